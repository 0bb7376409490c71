#include "planner/model_cost.h"

#include <stdexcept>

#include "core/config_rules.h"

namespace trident::plan {

// The trainer's resource checks count the same attention matrices (core/config_rules.h).
double attention_matrix_params(const ModelConfig& m) { return static_cast<double>(config_rules::attention_params(m)); }

MlpShape mlp_shape(const ModelConfig& m, const ModelFeatures& f) {
  MlpShape s;
  s.moe_share = static_cast<double>(config_rules::moe_layers(m)) / static_cast<double>(m.layers);
  s.dense_width = static_cast<double>(m.ffn());
  if (m.experts > 0) {
    s.experts = static_cast<double>(m.experts);
    s.top_k = static_cast<double>(m.moe_top_k);
    s.expert_width = static_cast<double>(m.moe_ffn());
    s.shared_width = static_cast<double>(m.moe_shared_ffn_hidden);
    s.router_rows = static_cast<double>(m.experts + (f.shared_expert_gate ? 1 : 0));  // and the shared experts' gate
  }
  return s;
}

namespace {

// Weight-matrix parameters one token passes through in one layer (no biases, no norms), averaged over
// the layers: under MoE the top-k experts, the shared expert and the router (NOTE [planned experts]).
double layer_matrix_params(const ModelConfig& m, const ModelFeatures& f) {
  const double h = static_cast<double>(m.hidden);
  if (!f.gated_mlp) return attention_matrix_params(m) + 2 * h * static_cast<double>(m.ffn());  // fc1, fc2
  const MlpShape s = mlp_shape(m, f);
  return attention_matrix_params(m) + (1 - s.moe_share) * 3 * h * s.dense_width +
         s.moe_share * (3 * h * (s.top_k * s.expert_width + s.shared_width) + h * s.router_rows);
}

}  // namespace

double attention_width(const ModelConfig& m) {
  if (!m.mla()) return 4 * static_cast<double>(m.hidden);
  return 2 * static_cast<double>(m.heads) *
         static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim);
}

namespace {

void check_recompute(const std::string& r) {
  if (r != "none" && r != "full" && r != "selective")
    throw std::invalid_argument("recompute '" + r + "': expected none, full or selective");
}

}  // namespace

LayerFlops layer_flops(const ModelConfig& m, const ModelFeatures& features, int64_t micro_batch) {
  const double tokens = static_cast<double>(micro_batch * m.seq_len);
  LayerFlops f;
  f.matmul = 2 * tokens * layer_matrix_params(m, features);
  f.attention = tokens * static_cast<double>(m.seq_len) * attention_width(m);
  return f;
}

double head_flops(const ModelConfig& m, int64_t micro_batch, int64_t tp) {
  return 2.0 * static_cast<double>(micro_batch * m.seq_len) * static_cast<double>(m.hidden) *
         static_cast<double>(m.padded_vocab(tp));
}

double step_flops(const ModelConfig& m, const ModelFeatures& f, int64_t samples, const std::string& recompute,
                  int64_t tp) {
  check_recompute(recompute);
  const LayerFlops l = layer_flops(m, f, samples);
  double per_layer = l.forward() + l.input_grad() + l.weight_grad();
  if (recompute == "full") per_layer += l.forward();
  if (recompute == "selective") per_layer += l.attention;
  return static_cast<double>(m.layers) * per_layer + 3 * head_flops(m, samples, tp);
}

ParamCounts param_counts(const ModelConfig& m, const ModelFeatures& features, int64_t tp, bool pipelined, int64_t ep,
                         int64_t etp) {
  const int64_t h = m.hidden, f = m.ffn(), t = tp, v = m.padded_vocab(tp);
  ParamCounts p;
  if (!features.gated_mlp) {
    // Sharded: qkv (3h^2 + 3h), proj weight h^2, fc1 (h f + f), fc2 weight f h. Replicated: two LayerNorms
    // (weight and bias, 4h) and the row-parallel biases of proj and fc2 (2h).
    p.layer = (3 * h * h + 3 * h + h * h + h * f + f + f * h) / t + 6 * h;
    p.embedding = v / t * h + m.seq_len * h;
    p.head = 2 * h + (pipelined ? v / t * h : 0);
  } else {
    // Every expert counts for memory (NOTE [planned experts]): the layers' mean, the dense first ones
    // with their MLP, the MoE ones with all experts, the shared expert and the router; MLA's two
    // latent norms are replicated beside the RMSNorms.
    const MlpShape s = mlp_shape(m, features);
    const double hd = static_cast<double>(h);
    const double experts = s.moe_share * 3 * hd * s.experts * s.expert_width / static_cast<double>(ep);
    const double mlp = (1 - s.moe_share) * 3 * hd * s.dense_width + experts +
                       s.moe_share * (3 * hd * s.shared_width + hd * s.router_rows);
    const int64_t norms = 2 * h + (m.mla() ? m.q_lora_rank + m.kv_lora_rank : 0);
    // The routed experts split over etp ranks (tp, the default, or 1: whole), the rest over tp.
    const double et = static_cast<double>(etp == 0 ? t : etp);
    p.layer = static_cast<int64_t>((attention_matrix_params(m) + mlp - experts) / static_cast<double>(t) + experts / et) +
              norms;
    p.layer_experts = static_cast<int64_t>(experts / et);
    p.embedding = v / t * h;
    p.head = h + ((!m.tie_embeddings || pipelined) ? v / t * h : 0);
  }
  return p;
}

int64_t total_params(const ModelConfig& m, const ModelFeatures& f) {
  const ParamCounts p = param_counts(m, f, 1, false);
  return m.layers * p.layer + p.embedding + p.head;
}

}  // namespace trident::plan
