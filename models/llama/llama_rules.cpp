#include "models/llama/llama_rules.h"

#include <string>

namespace trident {

namespace {

std::string n(int64_t v) { return std::to_string(v); }
std::string g(double v) { return config_number(v); }

void check_llama(const Config& c) {
  const ModelConfig& m = c.model;
  const ModelConfig d;  // the defaults
  // Each rope key with the scaling that reads it (NOTE [YaRN] in core/config_model.cpp): refused
  // when given at any value (NOTE [given keys]) or changed, under a scaling that does not read it.
  for (const RopeScalingKey& r : rope_scaling_keys())
    if ((r.value(m) != r.value(d) || c.gave(r.key)) && model_key_unread(c, r.key))
      config_fail(c, std::string(r.key) + " is read only with model.rope_scaling = " + r.read_by + ", got \"" +
                         m.rope_scaling + "\"");
  if (m.rope_scaling == "llama3" && m.rope_high_freq_factor <= m.rope_low_freq_factor)
    config_fail(c, "model.rope_high_freq_factor (" + g(m.rope_high_freq_factor) +
                       ") must exceed model.rope_low_freq_factor (" + g(m.rope_low_freq_factor) + ")");
  if (m.rope_scaling == "yarn" && m.rope_beta_fast <= m.rope_beta_slow)
    config_fail(c, "model.rope_beta_fast (" + g(m.rope_beta_fast) + ") must exceed model.rope_beta_slow (" +
                       g(m.rope_beta_slow) + "): YaRN's ramp runs from the fast rotations to the slow");
  if (m.ffn_hidden == 0)
    config_fail(c, "model.ffn_hidden must be set for model.arch = \"" + m.arch + "\" (the SwiGLU width; Llama 3 8B uses 14336)");
  if (m.dropout > 0) config_fail(c, "model.dropout = " + g(m.dropout) + ": " + m.arch + " has no dropout, expected 0");
  if (m.heads % m.kv() != 0)
    config_fail(c, "model.kv_heads (" + n(m.kv()) + ") must divide model.heads (" + n(m.heads) + ")");
  if (m.kv() % c.parallel.tp != 0) {
    config_fail(c, "parallel.tp (" + n(c.parallel.tp) + ") must divide model.kv_heads (" + n(m.kv()) +
                       "): each tensor-parallel rank holds whole key/value heads");
  }
  if (!m.mla() && (m.kv_channels > 0 || m.hidden % m.heads == 0) && m.head_dim() % 2 != 0)
    config_fail(c, std::string(m.kv_channels > 0 ? "model.kv_channels" : "model.hidden / model.heads") + " (" +
                       n(m.head_dim()) + ") must be even for rotary embeddings");
  // Keys of one Llama-decoder family only: elsewhere they would do nothing.
  const auto only = [&](bool set, const std::string& key, const char* family) {
    if (set && m.arch != family)
      config_fail(c, key + " is read by model.arch = \"" + family + "\" only; model.arch = \"" + m.arch +
                         "\" does not read it");
  };
  only(m.kv_channels != 0, "model.kv_channels", "qwen3_moe");
  if (m.moe_shared_ffn_hidden != 0 && m.arch != "qwen2_moe" && m.arch != "deepseek_v3")
    config_fail(c, "model.moe_shared_ffn_hidden is read by model.arch = \"qwen2_moe\" and \"deepseek_v3\" only; "
                   "model.arch = \"" + m.arch + "\" does not read it");
  only(m.q_lora_rank != 0, "model.q_lora_rank", "deepseek_v3");
  only(m.kv_lora_rank != 0, "model.kv_lora_rank", "deepseek_v3");
  only(m.qk_nope_head_dim != 0, "model.qk_nope_head_dim", "deepseek_v3");
  only(m.qk_rope_head_dim != 0, "model.qk_rope_head_dim", "deepseek_v3");
  only(m.v_head_dim != 0, "model.v_head_dim", "deepseek_v3");
}

// NOTE [MLA keys]: DeepSeek-V3's attention has no key/value heads of its own
// (each head's key and value come from one shared latent), so model.kv_heads
// and model.kv_channels say nothing and are refused; its widths are required.
void check_mla(const Config& c) {
  const ModelConfig& m = c.model;
  const auto at_least_one = [&](int64_t v, const std::string& key, const char* what) {
    if (v < 1) config_fail(c, key + " = " + n(v) + ": deepseek_v3 needs " + what);
  };
  at_least_one(m.kv_lora_rank, "model.kv_lora_rank", "the keys' and values' latent width (DeepSeek-V3: 512)");
  at_least_one(m.qk_nope_head_dim, "model.qk_nope_head_dim", "each head's non-rotary q/k width (DeepSeek-V3: 128)");
  at_least_one(m.v_head_dim, "model.v_head_dim", "each value head's width (DeepSeek-V3: 128)");
  if (m.qk_rope_head_dim < 2 || m.qk_rope_head_dim % 2 != 0)
    config_fail(c, "model.qk_rope_head_dim = " + n(m.qk_rope_head_dim) +
                       ": deepseek_v3 needs an even rotary width >= 2 (DeepSeek-V3: 64)");
  if (m.kv_heads != 0 && m.kv_heads != m.heads)
    config_fail(c, "model.kv_heads = " + n(m.kv_heads) + " with model.arch = \"deepseek_v3\": multi-head latent "
                   "attention has a key and a value per head (expected 0 or model.heads = " + n(m.heads) + ")");
  if (m.kv_channels != 0)
    config_fail(c, "model.kv_channels is not read by model.arch = \"deepseek_v3\": its head widths are "
                   "model.qk_nope_head_dim, model.qk_rope_head_dim and model.v_head_dim");
  if (c.parallel.cp > 1)
    config_fail(c, "parallel.cp = " + n(c.parallel.cp) + " with model.arch = \"deepseek_v3\": multi-head latent "
                   "attention under context parallelism is not built yet (its value heads are narrower than its "
                   "query heads); expected parallel.cp = 1");
}

// NOTE [Llama-decoder MoE families]
//   mixtral    Llama's attention; every MLP a mixture of experts, top-k weights renormalised
//   qwen2_moe  q/k/v biases; every MLP a mixture of experts plus a shared expert gated by a sigmoid
//              (model.moe_shared_ffn_hidden, required)
//   qwen3_moe  a per-head RMSNorm of q and of k before the rotary embedding; model.kv_channels
//              (HF head_dim) may differ from hidden / heads
//   deepseek_v3 multi-head latent attention (NOTE [MLA] in models/common/mla.h, NOTE [MLA keys]); the first
//              model.moe_first_dense layers dense; a sigmoid router over groups with the
//              score-correction bias (the model.moe_* router keys); ungated shared experts
//              (model.moe_shared_ffn_hidden, optional)
// All four at tp > 1: NOTE [experts under tensor parallelism] in parallel/token_dispatcher.h.
void check_moe_family(const Config& c) {
  if (c.model.arch != "deepseek_v3") {
    check_llama(c);
  } else {
    check_mla(c);
    check_llama(c);
  }
  if (c.model.arch == "mixtral" && c.model.moe_first_dense > 0)
    config_fail(c, "model.moe_first_dense = " + n(c.model.moe_first_dense) +
                       ": Mixtral has experts in every layer (its Hugging Face layout has no dense layer); expected 0");
  if (c.model.arch == "qwen2_moe" && c.model.moe_shared_ffn_hidden < 1)
    config_fail(c, "model.moe_shared_ffn_hidden = " + n(c.model.moe_shared_ffn_hidden) +
                       ": qwen2_moe has a shared expert; expected its width (Qwen1.5-MoE-A2.7B: 5632)");
}

}  // namespace

// SwiGLU (gate, up, down) and rotary positions, no table.
ModelFamilyRules llama_family() {
  return {"llama", check_llama, ModelShape{.gated_mlp = true, .position_table = false}};
}

ModelFamilyRules mixtral_family() {
  return {"mixtral", check_moe_family, ModelShape{.gated_mlp = true, .position_table = false, .moe = true}};
}

ModelFamilyRules qwen2_moe_family() {
  return {"qwen2_moe", check_moe_family, ModelShape{.gated_mlp = true, .position_table = false, .moe = true}};
}

ModelFamilyRules qwen3_moe_family() {
  return {"qwen3_moe", check_moe_family, ModelShape{.gated_mlp = true, .position_table = false, .moe = true}};
}

ModelFamilyRules deepseek_v3_family() {
  return {"deepseek_v3", check_moe_family, ModelShape{.gated_mlp = true, .position_table = false, .moe = true}};
}

bool llama_decoder(const std::string& arch) {
  return arch == "llama" || arch == "mixtral" || arch == "qwen2_moe" || arch == "qwen3_moe" || arch == "deepseek_v3";
}

}  // namespace trident
