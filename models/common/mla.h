// Multi-head latent attention (DeepSeek-V2/V3), the parts a family's stage
// composes: the latents of the hidden state and the attention core over the
// up-projected heads (NOTE [MLA]). The stage owns the parameters, the rotary
// tables, tensor parallelism's entry and exit and recomputation.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

#include "models/common/document_attention.h"

namespace trident {

// NOTE [MLA]
// DeepSeek-V3's multi-head latent attention (transformers' DeepseekV3Attention):
//   q      = q_up(norm(q_down x))               (or q_up x when model.q_lora_rank = 0), per head [nope | rope]
//   latent = kv_down x = [c | k_rope]            c: kv_lora_rank wide, k_rope: one rotary key for every head
//   [k_nope | v] = kv_up(norm(c))               per head
//   k = [k_nope | rotary(k_rope)],  q = [q_nope | rotary(q_rope)]
// softmax(q kᵀ / √(nope + rope)) v, causal; then o. The two latent norms are RMSNorms of eps
// 1e-6 whatever model.layernorm_eps is (transformers' default). The rotary part uses HF's
// rotate_half layout: DeepSeek's files interleave each rotary pair, and the import permutes
// those rows of q_up and kv_down once (NOTE [HF DeepSeek-V3 layout] in models/llama/hf_llama.h),
// which leaves every q·k product as it was. Under TP the down projections and their norms are
// replicated and see this rank's tokens (a sequence shard under SP: gradients summed over TP as
// the norms' are); [q latent | c | k_rope] (or [x | c | k_rope]) enters the column-parallel
// region once, and the up projections hold whole heads. Value heads narrower than the query
// heads are zero-padded to the query width for SDPA's fused kernels, and the output cut back.
struct MlaDims {
  int64_t heads = 0;    // this rank's heads
  int64_t nope = 0;     // qk_nope_head_dim
  int64_t rope = 0;     // qk_rope_head_dim
  int64_t v = 0;        // v_head_dim
  int64_t kv_rank = 0;  // kv_lora_rank
  double scale = 0;     // the softmax scale: ModelConfig::mla_softmax_scale() (1/sqrt(nope + rope), NOTE [YaRN])
};

struct MlaLatents {
  at::Tensor q_in;    // (b, s, q_lora_rank) normed, or x itself without a q latent
  at::Tensor c;       // (b, s, kv_lora_rank) normed
  at::Tensor k_rope;  // (b, s, rope), before the rotary embedding
};

// x (b, s, h); q_down and q_down_norm undefined without a q latent.
MlaLatents mla_latents(const at::Tensor& x, const at::Tensor& q_down, const at::Tensor& q_down_norm,
                       const at::Tensor& kv_down, const at::Tensor& kv_down_norm, const MlaDims& d);

// q (b, s, heads·(nope + rope)), kv (b, s, heads·(nope + v)), k_rope (b, s, rope);
// `rotate` applies the rotary embedding to a (b, n, s, rope) tensor. Returns
// (b, s, heads·v), causal, and with `docs` inside each document (NOTE [packed documents]).
at::Tensor mla_core(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& k_rope, const MlaDims& d,
                    const std::function<at::Tensor(const at::Tensor&)>& rotate, const DocumentLengths* docs = nullptr);

}  // namespace trident
