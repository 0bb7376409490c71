// Causal attention: see attention.h.
#include "models/common/attention.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

namespace trident {

at::Tensor repeat_kv_heads(const at::Tensor& x, int64_t group) {
  if (group == 1) return x;
  const int64_t b = x.size(0), kv = x.size(1), s = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({b, kv, group, s, d}).reshape({b, kv * group, s, d});
}

// NOTE [grouped heads]
// SDPA reads grouped key/value heads itself (enable_gqa) in its flash kernels,
// the CPU's in every dtype and CUDA's in half precision; there the repeated
// copies of k and v, and the sums over each group that their backward makes,
// are not made. CUDA's fp32 path (the memory-efficient kernel) does not take
// grouped heads, and SDPA would fall back to its unfused math: there k and v
// are repeated before the call instead.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                            std::optional<double> scale) {
  const int64_t group = q.size(-3) / k.size(-3);
  const bool grouped_kernel = q.device().is_cpu() || q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf;
  // The default scale is 1/sqrt(head_dim); is_causal masks key j > query i.
  if (group == 1 || grouped_kernel)
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, /*is_causal=*/true,
                                            scale, /*enable_gqa=*/group > 1);
  return at::scaled_dot_product_attention(q, repeat_kv_heads(k, group), repeat_kv_heads(v, group), /*attn_mask=*/{},
                                          dropout_p, /*is_causal=*/true, scale);
}

at::Tensor causal_attention_explicit(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t s = q.size(-2), hd = q.size(-1), group = q.size(-3) / k.size(-3);
  at::Tensor att = at::matmul(q, repeat_kv_heads(k, group).transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  at::Tensor future = at::ones({s, s}, at::TensorOptions().dtype(at::kBool).device(q.device())).triu(1);
  att = at::softmax(att.to(at::kFloat).masked_fill(future, -std::numeric_limits<float>::infinity()), -1)
            .to(q.scalar_type());  // (b, heads, s, s), softmax in fp32
  return at::matmul(att, repeat_kv_heads(v, group));
}

}  // namespace trident
