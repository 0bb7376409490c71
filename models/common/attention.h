// Causal self-attention through libtorch's scaled_dot_product_attention (SDPA):
// the one attention core of every model family, so GPT and the next families
// share its kernels (fused flash attention on the CPU; flash or
// memory-efficient kernels on CUDA) and its test (tests/torch_unit/test_attention.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace trident {

// softmax(q kᵀ / √d + causal mask) v over (batch, heads, seq, head_dim) tensors,
// with dropout `dropout_p` on the attention weights when > 0. Under tensor
// parallelism each rank passes its own heads (batch, heads/tp, seq, head_dim);
// heads are independent, so that is the matching slice of the full result.
// Grouped-query attention: k and v may hold fewer heads, a divisor of q's;
// query head i reads key/value head i / (q heads / kv heads) (NOTE [grouped heads]).
// `scale` replaces 1/√d where given (multi-head latent attention's).
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                            std::optional<double> scale = std::nullopt);

// The same arithmetic written out (matmul, masked fill, softmax in fp32, matmul),
// key/value heads repeated for their query groups: the reference the SDPA path
// is tested against.
at::Tensor causal_attention_explicit(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// (b, kv, s, d) -> (b, kv · group, s, d): each key/value head repeated for its query group.
at::Tensor repeat_kv_heads(const at::Tensor& x, int64_t group);

}  // namespace trident
