// AdamW with decoupled weight decay (Loshchilov & Hutter 2019), no decay on
// biases and norms. Purely elementwise, so a shard updated on its own gives
// exactly the slice of the full tensor's update.
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "parallel/param.h"

namespace trident {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(std::vector<Param*> params, AdamWOptions opts);
  // One update with learning rate lr from each parameter's .grad().
  void step(double lr);
  int64_t steps_taken() const { return t_; }

 private:
  std::vector<Param*> params_;
  std::vector<at::Tensor> m_, v_;
  AdamWOptions o_;
  int64_t t_ = 0;
};

}  // namespace trident
