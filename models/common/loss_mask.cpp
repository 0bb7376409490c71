// The loss of a micro-batch under loss masks: see loss_mask.h, NOTE [token-weighted loss].
#include "models/common/loss_mask.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace trident {

at::Tensor micro_batch_loss(const at::Tensor& per_token, const LossMask* mask) {
  if (mask == nullptr) return per_token.mean();
  if (!per_token.sizes().equals(mask->mask.sizes()))
    throw std::logic_error("loss mask of shape " + c10::str(mask->mask.sizes()) + " for per-token losses of shape " +
                           c10::str(per_token.sizes()));
  return (per_token * mask->mask).sum() * mask->scale;
}

}  // namespace trident
