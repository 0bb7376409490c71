// Causal attention: see attention.h.
#include "models/common/attention.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

namespace trident {

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p) {
  // The default scale is 1/sqrt(head_dim); is_causal masks key j > query i.
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, /*is_causal=*/true);
}

at::Tensor causal_attention_explicit(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t s = q.size(-2), hd = q.size(-1);
  at::Tensor att = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  at::Tensor future = at::ones({s, s}, at::TensorOptions().dtype(at::kBool).device(q.device())).triu(1);
  att = at::softmax(att.to(at::kFloat).masked_fill(future, -std::numeric_limits<float>::infinity()), -1)
            .to(q.scalar_type());  // (b, heads, s, s), softmax in fp32
  return at::matmul(att, v);
}

}  // namespace trident
