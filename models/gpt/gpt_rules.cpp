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
  // The rope scaling keys: given at any value (NOTE [given keys]) or changed.
  for (const RopeScalingKey& r : rope_scaling_keys()) refuse(r.value(m) != r.value(d) || c.gave(r.key), r.key);
}

}  // namespace

// GPT-2's block (two MLP matrices, fc1 and fc2, LayerNorms and biases) and a learned position table; the LM
// head is always the word embedding.
ModelFamilyRules gpt_family() { return {"gpt", check_gpt, ModelFeatures{.gated_mlp = false, .position_table = true}}; }

}  // namespace trident
