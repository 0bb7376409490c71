// What the executor tells data parallelism during a step's backward: when a
// chunk's gradients start to become final, and when they are. The executor
// (runtime/executor.h) calls it; the gradient buffer (parallel/data_parallel.h)
// listens, to start reducing gradients while the rest of the backward runs.
#pragma once

namespace trident {

// Told by the executor when a step's gradients of a chunk become final, so
// data parallelism can start reducing them during the rest of the backward.
class GradObserver {
 public:
  virtual ~GradObserver() = default;
  // Before the last backward (B or I) of `chunk` in this step: the last one
  // ahead of the chunk's REDUCE_GRAD.
  virtual void final_backward_begins(int chunk) = 0;
  // At the chunk's REDUCE_GRAD action, which every schedule places after the
  // last action that adds to `chunk`'s weight gradients (B or W) on this rank
  // (schedules/README.md, "Gradient-reduction points").
  virtual void grads_final(int chunk) = 0;
};

}  // namespace trident
