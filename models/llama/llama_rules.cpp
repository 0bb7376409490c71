#include "models/llama/llama_rules.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace trident {

namespace {

std::string n(int64_t v) { return std::to_string(v); }
std::string g(double v) { return config_number(v); }

// NOTE [Llama-decoder families]: what each family's blocks have (NOTE [model features] in core/config.h)
//   llama       grouped-query attention, a dense SwiGLU MLP, rotary positions, an LM head of its own or tied
//   mixtral     Llama's attention; every MLP a mixture of experts, top-k weights renormalised
//   qwen2_moe   q/k/v biases; every MLP a mixture of experts plus a shared expert gated by a sigmoid
//               (model.moe_shared_ffn_hidden, required)
//   qwen3_moe   a per-head RMSNorm of q and of k before the rotary embedding; model.kv_channels
//               (HF head_dim) may differ from hidden / heads
//   deepseek_v3 multi-head latent attention (NOTE [MLA] in models/common/mla.h, NOTE [MLA keys]); ungated
//               shared experts (model.moe_shared_ffn_hidden, optional); its router is the model.moe_* router keys
// The three after Mixtral may keep the first model.moe_first_dense layers dense. All four MoE families at
// tp > 1: NOTE [experts under tensor parallelism] in parallel/token_dispatcher.h.
struct DecoderFamily {
  const char* name;
  ModelFeatures features;
  const char* title = "";           // its name in prose
  const char* shared_example = "";  // SharedExperts::kRequired: a published model's shared width
};

const std::vector<DecoderFamily>& decoder_families() {
  constexpr ModelFeatures kLlama{.gated_mlp = true, .position_table = false, .moe = false, .untied_head = true};
  const auto with = [&](auto change) {
    ModelFeatures f = kLlama;
    change(f);
    return f;
  };
  static const std::vector<DecoderFamily> families = {
      {"llama", kLlama, "Llama"},
      {"mixtral", with([](ModelFeatures& f) { f.moe = true; }), "Mixtral"},
      {"qwen2_moe", with([](ModelFeatures& f) {
         f.moe = f.qkv_bias = f.shared_expert_gate = f.dense_first_layers = true;
         f.shared_experts = SharedExperts::kRequired;
       }),
       "Qwen2-MoE", "Qwen1.5-MoE-A2.7B: 5632"},
      {"qwen3_moe", with([](ModelFeatures& f) { f.moe = f.qk_norm = f.head_dim_key = f.dense_first_layers = true; }),
       "Qwen3-MoE"},
      {"deepseek_v3", with([](ModelFeatures& f) {
         f.moe = f.dense_first_layers = true;
         f.attention = AttentionKind::kLatent;
         f.shared_experts = SharedExperts::kOptional;
       }),
       "DeepSeek-V3"},
  };
  return families;
}

const DecoderFamily* find_decoder_family(const std::string& arch) {
  for (const DecoderFamily& f : decoder_families())
    if (f.name == arch) return &f;
  return nullptr;
}

// The family of a config its rules run for (model_family() found it by name).
const DecoderFamily& decoder_family(const std::string& arch) {
  const DecoderFamily* f = find_decoder_family(arch);
  if (!f) throw std::logic_error("model.arch = \"" + arch + "\" is no Llama-decoder family");
  return *f;
}

// "\"a\"", "\"a\" and \"b\"": the families whose features read a key.
std::string readers(bool (*reads)(const ModelFeatures&)) {
  std::vector<std::string> names;
  for (const DecoderFamily& f : decoder_families())
    if (reads(f.features)) names.push_back("\"" + std::string(f.name) + "\"");
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

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
  // Keys read by some of the Llama-decoder families only (by their features): elsewhere they do nothing.
  const auto only = [&](bool set, const std::string& key, bool (*reads)(const ModelFeatures&)) {
    if (set && !reads(decoder_family(m.arch).features))
      config_fail(c, key + " is read by model.arch = " + readers(reads) + " only; model.arch = \"" + m.arch +
                         "\" does not read it");
  };
  only(m.kv_channels != 0, "model.kv_channels", [](const ModelFeatures& f) { return f.head_dim_key; });
  only(m.moe_shared_ffn_hidden != 0, "model.moe_shared_ffn_hidden",
       [](const ModelFeatures& f) { return f.shared_experts != SharedExperts::kNone; });
  const auto latent = [](const ModelFeatures& f) { return f.attention == AttentionKind::kLatent; };
  only(m.q_lora_rank != 0, "model.q_lora_rank", latent);
  only(m.kv_lora_rank != 0, "model.kv_lora_rank", latent);
  only(m.qk_nope_head_dim != 0, "model.qk_nope_head_dim", latent);
  only(m.qk_rope_head_dim != 0, "model.qk_rope_head_dim", latent);
  only(m.v_head_dim != 0, "model.v_head_dim", latent);
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

// Every Llama-decoder family's rules, read from its features: MLA's before the rest.
void check_decoder(const Config& c) {
  const DecoderFamily& family = decoder_family(c.model.arch);
  const ModelFeatures& f = family.features;
  if (f.attention == AttentionKind::kLatent) check_mla(c);
  check_llama(c);
  if (f.moe && !f.dense_first_layers && c.model.moe_first_dense > 0)
    config_fail(c, "model.moe_first_dense = " + n(c.model.moe_first_dense) + ": " + family.title +
                       " has experts in every layer (its Hugging Face layout has no dense layer); expected 0");
  if (f.shared_experts == SharedExperts::kRequired && c.model.moe_shared_ffn_hidden < 1)
    config_fail(c, "model.moe_shared_ffn_hidden = " + n(c.model.moe_shared_ffn_hidden) + ": " + c.model.arch +
                       " has a shared expert; expected its width (" + family.shared_example + ")");
}

}  // namespace

std::vector<ModelFamilyRules> llama_decoder_families() {
  std::vector<ModelFamilyRules> out;
  for (const DecoderFamily& f : decoder_families()) out.push_back({f.name, check_decoder, f.features});
  return out;
}

const ModelFeatures* llama_decoder_features(const std::string& arch) {
  const DecoderFamily* f = find_decoder_family(arch);
  return f ? &f->features : nullptr;
}

const ModelFeatures& llama_features(const ModelConfig& m) {
  const ModelFeatures* f = llama_decoder_features(m.arch);
  if (!f) throw std::logic_error("model.arch = \"" + m.arch + "\": not a Llama-decoder family (llama_rules.h)");
  return *f;
}

bool llama_decoder(const std::string& arch) { return llama_decoder_features(arch) != nullptr; }

}  // namespace trident
