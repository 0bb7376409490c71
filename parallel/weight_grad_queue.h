// Deferred weight gradients: the queue a zero-bubble schedule's I fills and
// its W runs (NOTE [I/W split]). Apart from the tensor-parallel layers that
// fill it (parallel/tensor_parallel.h) so that the executor (runtime/),
// which arms and runs it, does not see them.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace torch::autograd {
struct AutogradContext;
}

namespace trident {

// NOTE [I/W split]
// Zero-bubble schedules split a backward into I (input gradients, on the critical path) and
// W (weight gradients, deferred). During an I, linear() computes dX and queues dW; a W action
// runs the queue later. dW is computed by the same expression either way and each parameter's
// contributions are still added in micro-batch order, so results are bit-identical to an
// undeferred backward (B). The queue travels with the autograd graph, not with a thread (on
// CUDA the engine runs backward functions on a device thread of its own, which sees none of
// the caller's thread_locals), so
//  - the forward, always on the caller's thread, records its queue: inside a WeightGradScope,
//    linear() keeps the scope's queue in its autograd context (as a shared handle: the queue
//    lives as long as the graph does);
//  - the executor arms a micro-batch's queue before an I and disarms it before a B;
//  - the backward, on whatever thread runs it, asks the queue it kept: armed, it queues dW; not
//    armed, or no queue, it returns dW at once. Recomputation captures the scope at forward time
//    and re-opens it around the re-forward (NOTE [recomputation]).
// NOTE [queued dW]
// A queued dW reaches its parameter where the undeferred backward would have taken it: into
// .grad of a leaf weight, or, for a weight computed from a leaf (under bf16, the autograd cast
// of the fp32 master, NOTE [bf16]), through that weight's grad_fn into the leaf's .grad, the
// same ops on the same values. That path runs through torch::autograd::grad, not backward():
// the parameters' AccumulateGrad nodes do not run, so their post-hooks (the data-parallel
// "gradient final" marks, NOTE [gradient buckets]) do not fire in a W, for a leaf or not; the
// executor's REDUCE_GRAD says when a chunk's gradients are final. (Through backward(), a W that
// follows the chunk's last I, e.g. zb-h1's W0 W1 after I1 on the last stage, would mark a
// gradient final and start its bucket's DP reduction before the next W adds to it.)
//
// A handle: copies share one queue (as copies of at::Tensor share storage).
class WeightGradQueue {
 public:
  WeightGradQueue();
  // Whether backwards of the graphs recorded into this queue defer their
  // weight gradients (true: an I) or compute them at once (false: a B; the
  // default). Set before the backward starts, on any thread.
  void arm(bool defer);
  bool armed() const;
  void push(std::function<void()> f);  // safe from any thread
  void run();                          // runs and clears, in push order
  bool empty() const;
  size_t size() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// RAII: while alive, forwards on this thread record `q` (null: no queue) in
// the autograd graphs they build, for their backward to find on any thread.
class WeightGradScope {
 public:
  explicit WeightGradScope(const WeightGradQueue* q);
  ~WeightGradScope();
  WeightGradScope(const WeightGradScope&) = delete;
  WeightGradScope& operator=(const WeightGradScope&) = delete;

 private:
  const WeightGradQueue* prev_;
};

// The queue of the WeightGradScope open on this thread, or null: what a
// forward records (recompute() keeps it for its re-forward).
const WeightGradQueue* weight_grad_scope();

// For custom autograd functions that split their backward the way linear()
// does (the benchmarks' synthetic stage). In forward: record the scope's
// queue in ctx. In backward: that queue if it is armed (push the weight
// gradient there), else null (return it now). Neither reads thread state in
// the backward.
void keep_weight_grad_queue(torch::autograd::AutogradContext* ctx);
WeightGradQueue* deferring_weight_grad_queue(torch::autograd::AutogradContext* ctx);

}  // namespace trident
