// Per-phase operation counts: NOTE [operation counts] in op_count.h.
#include "core/op_count.h"

#include <atomic>
#include <memory>
#include <stdexcept>

#include <ATen/record_function.h>

namespace trident {
namespace {

std::atomic<int> g_phase{0};
std::array<std::atomic<int64_t>, kOpPhases> g_counts{};
std::atomic<bool> g_active{false};
thread_local int t_depth = 0;  // counted operations running on this thread

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction&) {
  if (t_depth++ == 0) g_counts[static_cast<size_t>(g_phase.load(std::memory_order_relaxed))]++;
  return nullptr;
}

void on_exit(const at::RecordFunction&, at::ObserverContext*) { --t_depth; }

}  // namespace

const char* op_phase_name(OpPhase p) {
  static const char* names[kOpPhases] = {"other", "forward", "backward", "grad_sync", "optimizer"};
  return names[static_cast<int>(p)];
}

OpPhase op_phase() { return static_cast<OpPhase>(g_phase.load()); }

OpPhase set_op_phase(OpPhase p) { return static_cast<OpPhase>(g_phase.exchange(static_cast<int>(p))); }

OpCounter::OpCounter() {
  if (g_active.exchange(true)) throw std::logic_error("OpCounter: one counter at a time");
  for (auto& c : g_counts) c = 0;
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit).scopes({at::RecordScope::FUNCTION}));
}

OpCounter::~OpCounter() {
  at::removeCallback(handle_);
  g_active = false;
}

std::array<int64_t, kOpPhases> OpCounter::counts() const {
  std::array<int64_t, kOpPhases> out{};
  for (int i = 0; i < kOpPhases; ++i) out[static_cast<size_t>(i)] = g_counts[static_cast<size_t>(i)].load();
  return out;
}

}  // namespace trident
