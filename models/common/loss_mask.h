// The loss of a micro-batch under loss masks (NOTE [token-weighted loss]).
#pragma once

#include <ATen/core/Tensor.h>

namespace trident {

// NOTE [token-weighted loss]
// With data.eod_mask_loss or data.completion_only_loss a label counts where its mask is 1, and
// the step's loss is one mean over the counted tokens of the whole global batch, Σ ce·mask / N,
// N the mask's sum over every micro-batch and every dp × cp rank: what one process computes with
// the global batch in one micro-batch (Megatron-Core's calculate_per_token_loss, torchtitan's
// global token count). A mean per micro-batch or per rank would weigh a rank with few counted
// tokens as much as one with many. Each rank's last stage returns Σ ce·mask · scale, scale =
// dp·cp / N, a device scalar (the counts are all-reduced on the device: no host read), so the
// micro-batches' outputs add up (backward scale 1) and the gradients' mean over dp × cp divides
// the dp·cp back out. N = 0 (nothing counts) gives a loss and gradients of 0. Without the keys
// the loss is each micro-batch's mean, averaged, as before (bit for bit).
struct LossMask {
  at::Tensor mask;   // (b, s) float32 on the device: 1 counts, 0 does not (this rank's cp positions)
  at::Tensor scale;  // () float32 on the device: dp·cp / N
};

// The last stage's loss from its per-token cross-entropy (b, s): the mean without a mask,
// else Σ ce·mask · scale.
at::Tensor micro_batch_loss(const at::Tensor& per_token, const LossMask* mask);

}  // namespace trident
