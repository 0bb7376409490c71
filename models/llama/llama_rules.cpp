#include "models/llama/llama_rules.h"

#include <string>

namespace trident {

namespace {

std::string n(int64_t v) { return std::to_string(v); }
std::string g(double v) { return config_number(v); }

void check_llama(const Config& c) {
  const ModelConfig& m = c.model;
  const ModelConfig d;  // the defaults
  if (m.rope_scaling != "llama3") {
    const auto refuse = [&](bool set, const std::string& key) {
      if (set) config_fail(c, key + " is read only with model.rope_scaling = \"llama3\", got \"" + m.rope_scaling + "\"");
    };
    refuse(m.rope_factor != d.rope_factor, "model.rope_factor");
    refuse(m.rope_low_freq_factor != d.rope_low_freq_factor, "model.rope_low_freq_factor");
    refuse(m.rope_high_freq_factor != d.rope_high_freq_factor, "model.rope_high_freq_factor");
    refuse(m.rope_original_max_position != d.rope_original_max_position, "model.rope_original_max_position");
  } else if (m.rope_high_freq_factor <= m.rope_low_freq_factor) {
    config_fail(c, "model.rope_high_freq_factor (" + g(m.rope_high_freq_factor) +
                       ") must exceed model.rope_low_freq_factor (" + g(m.rope_low_freq_factor) + ")");
  }
  if (m.ffn_hidden == 0)
    config_fail(c, "model.ffn_hidden must be set for model.arch = \"" + m.arch + "\" (the SwiGLU width; Llama 3 8B uses 14336)");
  if (m.dropout > 0) config_fail(c, "model.dropout = " + g(m.dropout) + ": " + m.arch + " has no dropout, expected 0");
  if (m.heads % m.kv() != 0)
    config_fail(c, "model.kv_heads (" + n(m.kv()) + ") must divide model.heads (" + n(m.heads) + ")");
  if (m.kv() % c.parallel.tp != 0) {
    config_fail(c, "parallel.tp (" + n(c.parallel.tp) + ") must divide model.kv_heads (" + n(m.kv()) +
                       "): each tensor-parallel rank holds whole key/value heads");
  }
  if (m.hidden % m.heads == 0 && m.head_dim() % 2 != 0)
    config_fail(c, "model.hidden / model.heads (" + n(m.head_dim()) + ") must be even for rotary embeddings");
}

void check_mixtral(const Config& c) {
  check_llama(c);
  if (c.parallel.tp > 1)
    config_fail(c, "parallel.tp = " + n(c.parallel.tp) + " with model.arch = \"mixtral\": the experts are not split "
                   "over tensor-parallel ranks yet (expert tensor parallelism); expected parallel.tp = 1");
}

}  // namespace

// SwiGLU (gate, up, down) and rotary positions, no table.
ModelFamilyRules llama_family() {
  return {"llama", check_llama, ModelShape{.gated_mlp = true, .position_table = false}};
}

ModelFamilyRules mixtral_family() {
  return {"mixtral", check_mixtral, ModelShape{.gated_mlp = true, .position_table = false, .moe = true}};
}

}  // namespace trident
