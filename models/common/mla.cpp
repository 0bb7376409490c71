// Multi-head latent attention: NOTE [MLA] in mla.h. Its matrices go through
// parallel/tensor_parallel.h's linear, whose weight gradients the split backward defers.
#include "models/common/mla.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "models/common/attention.h"
#include "models/common/rms_norm.h"
#include "parallel/tensor_parallel.h"

namespace trident {

MlaLatents mla_latents(const at::Tensor& x, const at::Tensor& q_down, const at::Tensor& q_down_norm,
                       const at::Tensor& kv_down, const at::Tensor& kv_down_norm, const MlaDims& d) {
  constexpr double kLatentNormEps = 1e-6;  // transformers' DeepseekV3RMSNorm default, for both latents
  const at::Tensor kv = linear(x, kv_down, at::Tensor());  // (b, s, kv_rank + rope)
  MlaLatents l;
  l.q_in = q_down.defined() ? rms_norm(linear(x, q_down, at::Tensor()), q_down_norm, kLatentNormEps) : x;
  l.c = rms_norm(kv.narrow(-1, 0, d.kv_rank), kv_down_norm, kLatentNormEps);
  l.k_rope = kv.narrow(-1, d.kv_rank, d.rope);
  return l;
}

at::Tensor mla_core(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& k_rope, const MlaDims& d,
                    const std::function<at::Tensor(const at::Tensor&)>& rotate, const DocumentLengths* docs) {
  const int64_t bs = q.size(0), s = q.size(1), qk = d.nope + d.rope, width = std::max(qk, d.v);
  const at::Tensor q4 = q.view({bs, s, d.heads, qk}).transpose(1, 2);  // (b, heads, s, nope + rope)
  const at::Tensor kv4 = kv.view({bs, s, d.heads, d.nope + d.v}).transpose(1, 2);
  const at::Tensor kr = rotate(k_rope.view({bs, s, 1, d.rope}).transpose(1, 2)).expand({bs, d.heads, s, d.rope});
  at::Tensor qh = at::cat({q4.narrow(-1, 0, d.nope), rotate(q4.narrow(-1, d.nope, d.rope))}, -1);
  at::Tensor kh = at::cat({kv4.narrow(-1, 0, d.nope), kr}, -1);
  at::Tensor vh = kv4.narrow(-1, d.nope, d.v);
  if (d.v < width) vh = at::constant_pad_nd(vh, {0, width - d.v});
  if (qk < width) qh = at::constant_pad_nd(qh, {0, width - qk}), kh = at::constant_pad_nd(kh, {0, width - qk});
  at::Tensor y = docs ? document_attention(qh, kh, vh, *docs, 0.0, d.scale) : causal_attention(qh, kh, vh, 0.0, d.scale);
  if (d.v < width) y = y.narrow(-1, 0, d.v);
  return y.transpose(1, 2).reshape({bs, s, d.heads * d.v});
}

}  // namespace trident
