// AdamW with decoupled weight decay (Loshchilov & Hutter 2019), no decay on
// biases and norms. Purely elementwise, so it runs over segments: contiguous
// element ranges of parameters. A whole parameter is one segment; under
// ZeRO-1 a rank's segments are the pieces of its shard (parallel/zero_optimizer.h),
// and each piece gets exactly the slice of the full tensor's update.
#pragma once

#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "core/param.h"

namespace trident {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// Elements [offset, offset + numel) of a parameter (flattened, contiguous)
// and of its gradient.
struct OptimSegment {
  Param* param = nullptr;
  int64_t offset = 0;
  int64_t numel = 0;
};

class AdamW {
 public:
  // Every element of each parameter (one segment per parameter).
  AdamW(const std::vector<Param*>& params, AdamWOptions opts);
  AdamW(std::vector<OptimSegment> segments, AdamWOptions opts);
  // One update with learning rate lr from each parameter's .grad(); segments
  // whose parameter has no gradient are skipped. `skip`, a float32 scalar on
  // the parameters' device, skips the whole update where it is 1 (NOTE [fused
  // AdamW]); the step still counts.
  void step(double lr, const std::optional<at::Tensor>& skip = std::nullopt);
  int64_t steps_taken() const { return t_; }
  // Bytes of optimizer state (exp_avg and exp_avg_sq) this rank holds.
  int64_t state_bytes() const;
  const std::vector<OptimSegment>& segments() const { return segs_; }
  // The state of segments()[i] (1-D, segment-sized) and the update count t:
  // what a checkpoint saves and restores (framework/checkpointing.h).
  std::vector<at::Tensor>& exp_avg() { return m_; }
  std::vector<at::Tensor>& exp_avg_sq() { return v_; }
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  std::vector<OptimSegment> segs_;
  // Each segment's 1-D views of its weight and gradient, remade only when
  // the tensor they view changes (NOTE [fused AdamW] in optimizer.cpp).
  struct SegmentViews {
    at::Tensor weight_of, grad_of;  // the tensors viewed (held: their identity is the cache key)
    at::Tensor weight, grad;
  };
  void refresh_views();

  std::vector<at::Tensor> m_, v_;
  std::vector<SegmentViews> views_;
  at::Tensor step_count_;  // t as the float32 tensor the fused kernel reads
  AdamWOptions o_;
  int64_t t_ = 0;
};

}  // namespace trident
