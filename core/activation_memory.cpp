// Activation memory of one transformer layer: see activation_memory.h.
#include "core/activation_memory.h"

#include <stdexcept>

#include "core/config_rules.h"

namespace trident {

double layer_activation_bytes(const ModelConfig& m, const ModelFeatures& shape, int64_t micro_batch, int64_t tp,
                              bool sequence_parallel, const std::string& recompute, int elem_bytes, int64_t cp) {
  if (recompute != "none" && recompute != "full" && recompute != "selective")
    throw std::invalid_argument("recompute '" + recompute + "': expected none, full or selective");
  if (cp < 1) throw std::invalid_argument("cp " + std::to_string(cp) + ": expected >= 1");
  const double sb = static_cast<double>(m.seq_len * micro_batch) / static_cast<double>(cp),
               h = static_cast<double>(m.hidden);
  const double f = static_cast<double>(m.ffn()), t = static_cast<double>(tp), e = elem_bytes;
  const double rep_div = sequence_parallel ? t : 1.0;  // what SP shards along the sequence
  if (recompute == "full") return sb * h * e / rep_div;
  const bool dropout = m.dropout > 0;
  // Replicated without SP (per token, elements): the two norms' inputs (2h), the attention's and the
  // MLP's inputs (h each); bytes: the two dropout masks after attention and MLP (h each).
  const double replicated = (4 * h * e + (dropout ? 2 * h : 0)) / rep_div;
  // Sharded over tp (per token): q, k, v; the output projection's input; the MLP's wide tensors.
  const double kv = static_cast<double>(m.kv() * m.head_dim());
  double attention = h + 2 * kv + h;
  if (m.mla()) {  // NOTE [MLA]: the latents (q's, the keys' and values' with the rotary key), q, k, v, o's input
    const double heads = static_cast<double>(m.heads), qk = static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim),
                 dv = static_cast<double>(m.v_head_dim);
    attention = static_cast<double>(m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) + 2 * heads * qk + 2 * heads * dv;
  }
  double mlp = (shape.gated_mlp ? 4 : 2) * f;
  if (shape.moe && m.experts > 0) {
    // A mean layer (NOTE [planned experts] in planner/model_cost.h): the dense first layers keep f-wide
    // tensors; an MoE layer per token its k rows sorted by expert and their outputs (2 k h), each row's
    // four expert-wide tensors (4 k I), the shared expert's four (4 S) and the router's scores (2 E).
    const double share = static_cast<double>(config_rules::moe_layers(m)) / static_cast<double>(m.layers);
    const double k = static_cast<double>(m.moe_top_k);
    const double moe = 2 * k * h + 4 * k * static_cast<double>(m.moe_ffn()) +
                       4 * static_cast<double>(m.moe_shared_ffn_hidden) + 2 * static_cast<double>(m.experts);
    mlp = (1 - share) * mlp + share * moe;
  }
  const double sharded = (attention + mlp) * e;
  // Attention core per token and head: a*s elements of softmax output (plus, with dropout, its output
  // and a 1-byte mask); selective recomputation keeps none of it.
  const double as = static_cast<double>(m.heads * m.seq_len);
  const double core = recompute == "selective" ? 0.0 : (dropout ? as * (2 * e + 1) : as * e);
  return sb * (replicated + (sharded + core) / t);
}

}  // namespace trident
