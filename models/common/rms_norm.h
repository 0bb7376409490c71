// RMSNorm as one autograd function (NOTE [RMSNorm]).
#pragma once

#include <ATen/core/Tensor.h>

namespace trident {

// NOTE [RMSNorm]
// y = weight · (x / sqrt(mean(x², last dim) + eps)), the normalisation in
// fp32 and cast back to x's dtype before the weight multiplies (as
// transformers' LlamaRMSNorm does); weight is in x's dtype. One autograd node
// with the backward written out,
//   n = x·r, r = 1/sqrt(mean(x²) + eps),  g_n = g·weight,
//   g_weight = Σ_tokens g·n,   g_x = r·(g_n − n·mean(g_n·n)),
// instead of the seven nodes (pow, mean, add, rsqrt, two products, the cast)
// that autograd records for the same forward: on a GPU each is a launch, and
// at small widths each is a dispatch that costs more than its arithmetic. It
// saves x and r (one value per token).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The same forward through autograd's own operations: the reference rms_norm is tested against.
at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace trident
