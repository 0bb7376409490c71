#include "planner/model_cost.h"

#include <stdexcept>

namespace trident::plan {

namespace {

bool is_llama(const ModelConfig& m) { return m.arch == "llama"; }

// Weight-matrix parameters of one layer (no biases, no norms).
double layer_matrix_params(const ModelConfig& m) {
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(m.ffn());
  if (!is_llama(m)) return 4 * h * h + 2 * h * f;  // qkv 3h^2, proj h^2, fc1 and fc2 h*f each
  const double kv = static_cast<double>(m.kv() * m.head_dim());
  return 2 * h * h + 2 * h * kv + 3 * h * f;  // q and o h^2, k and v h*kv, gate/up/down h*f
}

void check_recompute(const std::string& r) {
  if (r != "none" && r != "full" && r != "selective")
    throw std::invalid_argument("recompute '" + r + "': expected none, full or selective");
}

}  // namespace

ModelShape block_shape(const ModelConfig& m) {
  return ModelShape{.gated_mlp = is_llama(m), .position_table = !is_llama(m)};
}

LayerFlops layer_flops(const ModelConfig& m, int64_t micro_batch) {
  const double tokens = static_cast<double>(micro_batch * m.seq_len);
  LayerFlops f;
  f.matmul = 2 * tokens * layer_matrix_params(m);
  f.attention = 4 * tokens * static_cast<double>(m.seq_len) * static_cast<double>(m.hidden);
  return f;
}

double head_flops(const ModelConfig& m, int64_t micro_batch, int64_t tp) {
  return 2.0 * static_cast<double>(micro_batch * m.seq_len) * static_cast<double>(m.hidden) *
         static_cast<double>(m.padded_vocab(tp));
}

double step_flops(const ModelConfig& m, int64_t samples, const std::string& recompute, int64_t tp) {
  check_recompute(recompute);
  const LayerFlops l = layer_flops(m, samples);
  double per_layer = l.forward() + l.input_grad() + l.weight_grad();
  if (recompute == "full") per_layer += l.forward();
  if (recompute == "selective") per_layer += l.attention;
  return static_cast<double>(m.layers) * per_layer + 3 * head_flops(m, samples, tp);
}

ParamCounts param_counts(const ModelConfig& m, int64_t tp, bool pipelined) {
  const int64_t h = m.hidden, f = m.ffn(), t = tp, v = m.padded_vocab(tp);
  ParamCounts p;
  if (!is_llama(m)) {
    // Sharded: qkv (3h^2 + 3h), proj weight h^2, fc1 (h f + f), fc2 weight f h. Replicated: two LayerNorms
    // (weight and bias, 4h) and the row-parallel biases of proj and fc2 (2h).
    p.layer = (3 * h * h + 3 * h + h * h + h * f + f + f * h) / t + 6 * h;
    p.embedding = v / t * h + m.seq_len * h;
    p.head = 2 * h + (pipelined ? v / t * h : 0);
  } else {
    const int64_t kv = m.kv() * m.head_dim();
    p.layer = (2 * h * h + 2 * h * kv + 3 * h * f) / t + 2 * h;  // two RMSNorm weights replicated
    p.embedding = v / t * h;
    p.head = h + ((!m.tie_embeddings || pipelined) ? v / t * h : 0);
  }
  return p;
}

int64_t total_params(const ModelConfig& m) {
  const ParamCounts p = param_counts(m, 1, false);
  return m.layers * p.layer + p.embedding + p.head;
}

}  // namespace trident::plan
