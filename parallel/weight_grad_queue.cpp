// Deferred weight gradients: see weight_grad_queue.h, NOTE [I/W split].
#include "parallel/weight_grad_queue.h"

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/custom_function.h>

namespace trident {

using torch::autograd::AutogradContext;

namespace {

// The forward-time scope (NOTE [I/W split]): read only by forwards, which run
// on the caller's thread; a backward reads the queue its forward kept.
thread_local const WeightGradQueue* g_weight_grad_scope = nullptr;

// What an autograd context keeps of the scope's queue (saved_data holds IValues).
struct QueueHolder : torch::CustomClassHolder {
  explicit QueueHolder(const WeightGradQueue& queue) : q(queue) {}
  WeightGradQueue q;
};

}  // namespace

struct WeightGradQueue::State {
  std::atomic<bool> armed{false};
  mutable std::mutex mutex;  // pushes may come from the engine's threads
  std::vector<std::function<void()>> items;
};

WeightGradQueue::WeightGradQueue() : state_(std::make_shared<State>()) {}

void WeightGradQueue::arm(bool defer) { state_->armed = defer; }
bool WeightGradQueue::armed() const { return state_->armed; }

void WeightGradQueue::push(std::function<void()> f) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->items.push_back(std::move(f));
}

void WeightGradQueue::run() {
  std::vector<std::function<void()>> items;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    items.swap(state_->items);
  }
  for (auto& f : items) f();
}

bool WeightGradQueue::empty() const { return size() == 0; }

size_t WeightGradQueue::size() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->items.size();
}

WeightGradScope::WeightGradScope(const WeightGradQueue* q) : prev_(g_weight_grad_scope) { g_weight_grad_scope = q; }
WeightGradScope::~WeightGradScope() { g_weight_grad_scope = prev_; }

const WeightGradQueue* weight_grad_scope() { return g_weight_grad_scope; }

void keep_weight_grad_queue(AutogradContext* ctx) {
  if (const WeightGradQueue* q = g_weight_grad_scope)
    ctx->saved_data["weight_grad_queue"] = c10::IValue::make_capsule(c10::make_intrusive<QueueHolder>(*q));
}

WeightGradQueue* deferring_weight_grad_queue(AutogradContext* ctx) {
  auto it = ctx->saved_data.find("weight_grad_queue");
  if (it == ctx->saved_data.end()) return nullptr;
  auto* holder = static_cast<QueueHolder*>(it->second.toCapsule().get());  // the capsule in ctx keeps it alive
  return holder->q.armed() ? &holder->q : nullptr;
}

}  // namespace trident
