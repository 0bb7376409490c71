#include "models/gpt/gpt_rules.h"

#include <string>
#include <utility>

namespace trident {

namespace {

// GPT reads none of Llama's keys: one set to other than its default would be ignored.
void check_gpt(const Config& c) {
  const ModelConfig& m = c.model;
  const ModelConfig d;  // the defaults
  const auto refuse = [&](bool set, const std::string& key) {
    if (set) config_fail(c, key + " is a llama key: model.arch = \"" + m.arch + "\" does not read it");
  };
  refuse(m.kv_heads != 0 && m.kv_heads != m.heads, "model.kv_heads (" + std::to_string(m.kv_heads) + ")");
  refuse(!m.tie_embeddings, "model.tie_embeddings = false");
  if (m.kv_channels != 0) config_fail(c, "model.kv_channels is read by model.arch = \"qwen3_moe\" only; gpt does not read it");
  for (const auto& [value, key] : {std::pair{m.q_lora_rank, "model.q_lora_rank"}, {m.kv_lora_rank, "model.kv_lora_rank"},
                                   {m.qk_nope_head_dim, "model.qk_nope_head_dim"},
                                   {m.qk_rope_head_dim, "model.qk_rope_head_dim"}, {m.v_head_dim, "model.v_head_dim"}})
    if (value != 0) config_fail(c, std::string(key) + " is read by model.arch = \"deepseek_v3\" only; gpt does not read it");
  refuse(m.rope_theta != d.rope_theta, "model.rope_theta");
  refuse(m.rope_scaling != d.rope_scaling, "model.rope_scaling");
  refuse(m.rope_factor != d.rope_factor, "model.rope_factor");
  refuse(m.rope_low_freq_factor != d.rope_low_freq_factor, "model.rope_low_freq_factor");
  refuse(m.rope_high_freq_factor != d.rope_high_freq_factor, "model.rope_high_freq_factor");
  refuse(m.rope_original_max_position != d.rope_original_max_position, "model.rope_original_max_position");
  refuse(m.rope_beta_fast != d.rope_beta_fast, "model.rope_beta_fast");
  refuse(m.rope_beta_slow != d.rope_beta_slow, "model.rope_beta_slow");
  refuse(m.rope_mscale != d.rope_mscale, "model.rope_mscale");
  refuse(m.rope_mscale_all_dim != d.rope_mscale_all_dim, "model.rope_mscale_all_dim");
}

}  // namespace

// Two MLP matrices (fc1, fc2) and a learned position table.
ModelFamilyRules gpt_family() { return {"gpt", check_gpt, ModelShape{.gated_mlp = false, .position_table = true}}; }

}  // namespace trident
