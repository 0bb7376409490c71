// The Hugging Face formats of the Llama-decoder families: hf_llama_families.h.
#include "models/llama/hf_llama_families.h"

#include <stdexcept>

#include "core/model_checks.h"
#include "models/llama/llama_rules.h"

namespace trident {
namespace {

// The expert count under `key` and num_experts_per_tok, which must route.
void read_experts(const json::Value& c, const std::string& cpath, const json::Value& count, const std::string& key,
                  HfLlama& hf) {
  ModelConfig& m = hf.model;
  hf.experts_key = key;
  m.experts = json::as_int(count, cpath + " " + key);
  m.moe_top_k = json::as_int(json::at(c, "num_experts_per_tok", cpath), cpath + " num_experts_per_tok");
  if (m.experts < 1 || m.moe_top_k < 1 || m.moe_top_k > m.experts)
    throw ModelInputError(cpath + ": num_experts_per_tok = " + std::to_string(m.moe_top_k) + " with " + key + " = " +
                          std::to_string(m.experts) + ": expected 1 <= num_experts_per_tok <= " + key);
}

// NOTE [HF Qwen MoE layout]: qwen2_moe's and qwen3_moe's experts, top-k, widths and router; what
// Trident's do not have (dense layers between the sparse ones, a sliding window, no q/k/v biases
// for qwen2_moe) is refused by name.
// `other_experts_key`: where the file may say the expert count instead of num_experts (nullptr: nowhere).
void read_qwen_moe(const json::Value& c, const std::string& cpath, HfLlama& hf, const char* other_experts_key) {
  ModelConfig& m = hf.model;
  const std::string type = m.arch;
  const json::Value* e = json::find(c, "num_experts");
  const char* experts_key = "num_experts";
  if (!e && other_experts_key) e = json::find(c, experts_key = other_experts_key);
  if (!e)
    throw ModelInputError(cpath + ": no num_experts" +
                          (other_experts_key ? std::string(" (or ") + other_experts_key + ")" : std::string()));
  read_experts(c, cpath, *e, experts_key, hf);
  m.moe_ffn_hidden = json::as_int(json::at(c, "moe_intermediate_size", cpath), cpath + " moe_intermediate_size");
  if (const json::Value* n = json::find(c, "norm_topk_prob")) m.moe_norm_topk_prob = json::as_bool(*n, cpath);
  else m.moe_norm_topk_prob = false;  // both configs' default
  if (const json::Value* s = json::find(c, "decoder_sparse_step"); s && json::as_int(*s, cpath) != 1)
    throw ModelInputError(cpath + ": decoder_sparse_step = " + std::to_string(json::as_int(*s, cpath)) +
                          "; Trident's " + type + " has experts in every layer (expected 1)");
  if (const json::Value* d = json::find(c, "mlp_only_layers"); d && !d->is_null()) {
    // The first k layers dense (model.moe_first_dense = k) is what Trident has; another pattern is refused.
    const std::vector<json::Value>& dense = json::as_array(*d, cpath + " mlp_only_layers");
    for (size_t i = 0; i < dense.size(); ++i)
      if (json::as_int(dense[i], cpath + " mlp_only_layers") != static_cast<int64_t>(i))
        throw ModelInputError(cpath + ": mlp_only_layers = " + json::dump(*d) + "; Trident's " + type +
                              " keeps dense MLPs in the first layers only (expected [0, 1, ..., k-1], or [])");
    m.moe_first_dense = static_cast<int64_t>(dense.size());
  }
  if (const json::Value* w = json::find(c, "use_sliding_window"); w && json::as_bool(*w, cpath))
    throw ModelInputError(cpath + ": use_sliding_window = true; Trident's " + type +
                          " attends to the whole sequence (expected false)");
}

void read_qwen2_moe(const json::Value& c, const std::string& cpath, HfLlama& hf) {
  read_qwen_moe(c, cpath, hf, nullptr);
  if (const json::Value* b = json::find(c, "qkv_bias"); b && !json::as_bool(*b, cpath))
    throw ModelInputError(cpath + ": qkv_bias = false; Trident's qwen2_moe has q/k/v biases (expected true)");
  hf.model.moe_shared_ffn_hidden =
      json::as_int(json::at(c, "shared_expert_intermediate_size", cpath), cpath + " shared_expert_intermediate_size");
}

// Qwen3-MoE's files on the Hub say num_experts; transformers 5.24's save_pretrained writes num_local_experts.
void read_qwen3_moe(const json::Value& c, const std::string& cpath, HfLlama& hf) {
  read_qwen_moe(c, cpath, hf, "num_local_experts");
}

// n_group and topk_group against the expert count and num_experts_per_tok, in the file's own key
// names: the same rules as model.moe_router_groups' (NOTE [MoE router] in models/common/router.h),
// which would name Trident's keys for a file that has none of them.
void check_router_groups(const std::string& cpath, const std::string& experts_key, const ModelConfig& m) {
  const auto n = [](int64_t v) { return std::to_string(v); };
  const int64_t groups = m.moe_router_groups, topk = m.moe_router_group_topk;
  if (groups < 1 || m.experts % groups != 0)
    throw ModelInputError(cpath + ": n_group = " + n(groups) + ": expected an integer >= 1 dividing " + experts_key +
                          " (" + n(m.experts) + ")");
  if (topk < 1 || topk > groups)
    throw ModelInputError(cpath + ": topk_group = " + n(topk) + ": expected 1 to n_group (" + n(groups) + ")");
  if (groups > 1 && m.experts / groups < 2)
    throw ModelInputError(cpath + ": n_group = " + n(groups) + " leaves " + n(m.experts / groups) + " expert per group of " +
                          experts_key + " = " + n(m.experts) + ": a group is ranked by its two best experts "
                          "(expected at least 2 per group)");
  if (topk * (m.experts / groups) < m.moe_top_k)
    throw ModelInputError(cpath + ": num_experts_per_tok = " + n(m.moe_top_k) + " exceeds the experts of topk_group = " +
                          n(topk) + " group(s) of " + n(m.experts / groups) + " (n_group = " + n(groups) + ")");
}

// NOTE [HF DeepSeek-V3 layout]: DeepSeek-V3's config.json (what transformers 5.24 writes and the Hub's
// files hold). Trident's router is the sigmoid over groups with the score-correction bias; what it
// does not have is refused by name.
void read_deepseek_v3(const json::Value& c, const std::string& cpath, HfLlama& hf) {
  ModelConfig& m = hf.model;
  const auto get_int = [&](const char* k) { return json::as_int(json::at(c, k, cpath), cpath + " " + k); };
  // An optional integer where null means `none`.
  const auto opt_int = [&](const char* k, int64_t none) {
    const json::Value* v = json::find(c, k);
    return v && !v->is_null() ? json::as_int(*v, cpath + " " + k) : none;
  };
  const json::Value* e = json::find(c, "n_routed_experts");
  const char* experts_key = "n_routed_experts";
  if (!e) e = json::find(c, experts_key = "num_local_experts");
  if (!e) throw ModelInputError(cpath + ": no n_routed_experts");
  read_experts(c, cpath, *e, experts_key, hf);
  m.moe_ffn_hidden = get_int("moe_intermediate_size");
  const int64_t shared = opt_int("n_shared_experts", 0);
  if (shared < 1)
    throw ModelInputError(cpath + ": n_shared_experts = " + std::to_string(shared) +
                          "; Trident's deepseek_v3 has shared experts (expected >= 1)");
  m.moe_shared_ffn_hidden = m.moe_ffn_hidden * shared;
  m.moe_first_dense = opt_int("first_k_dense_replace", 0);
  if (const json::Value* n = json::find(c, "norm_topk_prob")) m.moe_norm_topk_prob = json::as_bool(*n, cpath);
  m.moe_score_function = "sigmoid";
  m.moe_expert_bias = true;
  m.moe_router_groups = opt_int("n_group", 1);
  m.moe_router_group_topk = opt_int("topk_group", 1);
  check_router_groups(cpath, experts_key, m);
  if (const json::Value* f = json::find(c, "routed_scaling_factor"))
    m.moe_routed_scaling_factor = json::as_double(*f, cpath + " routed_scaling_factor");
  // The Hub's files also say how the reference code routes; anything but what Trident does is refused.
  if (const json::Value* f = json::find(c, "scoring_func"); f && json::as_string(*f, cpath) != "sigmoid")
    throw ModelInputError(cpath + ": scoring_func = \"" + json::as_string(*f, "") +
                          "\"; Trident's deepseek_v3 router scores by sigmoid (expected \"sigmoid\")");
  if (const json::Value* f = json::find(c, "topk_method"); f && json::as_string(*f, cpath) != "noaux_tc")
    throw ModelInputError(cpath + ": topk_method = \"" + json::as_string(*f, "") +
                          "\"; Trident's deepseek_v3 router is group-limited with the correction bias (expected "
                          "\"noaux_tc\")");
  if (const json::Value* f = json::find(c, "moe_layer_freq"); f && json::as_int(*f, cpath) != 1)
    throw ModelInputError(cpath + ": moe_layer_freq = " + std::to_string(json::as_int(*f, cpath)) +
                          "; Trident's deepseek_v3 has experts in every layer after the first dense ones (expected 1)");
  m.q_lora_rank = opt_int("q_lora_rank", 0);
  m.kv_lora_rank = get_int("kv_lora_rank");
  m.qk_nope_head_dim = get_int("qk_nope_head_dim");
  m.qk_rope_head_dim = get_int("qk_rope_head_dim");
  m.v_head_dim = get_int("v_head_dim");
  // head_dim is the rotary part here (transformers sets it so), not a head's width.
  if (const json::Value* hd = json::find(c, "head_dim"); hd && !hd->is_null() && json::as_int(*hd, cpath) != m.qk_rope_head_dim)
    throw ModelInputError(cpath + ": head_dim = " + std::to_string(json::as_int(*hd, cpath)) +
                          " but qk_rope_head_dim = " + std::to_string(m.qk_rope_head_dim) +
                          ": DeepSeek-V3's head_dim is its rotary width (expected them equal)");
  const json::Value* interleave = json::find(c, "rope_interleave");
  hf.rope_interleaved = interleave && !interleave->is_null() ? json::as_bool(*interleave, cpath + " rope_interleave")
                                                             : true;  // DeepseekV3Config's default
  hf.mtp_layers = opt_int("num_nextn_predict_layers", opt_int("num_mtp_layers", 0));
}

void read_mixtral(const json::Value& c, const std::string& cpath, HfLlama& hf) {
  // NOTE [HF Mixtral layout]: what Trident's Mixtral does not have is refused, not ignored.
  if (const json::Value* w = json::find(c, "sliding_window"); w && !w->is_null())
    throw ModelInputError(cpath + ": sliding_window = " + std::to_string(json::as_int(*w, cpath + " sliding_window")) +
                          "; Trident's Mixtral attends to the whole sequence (expected null)");
  if (const json::Value* j = json::find(c, "router_jitter_noise"); j && json::as_double(*j, cpath) != 0)
    throw ModelInputError(cpath + ": router_jitter_noise = " + json::dump(*j) +
                          "; Trident's router adds no noise (expected 0)");
  read_experts(c, cpath, json::at(c, "num_local_experts", cpath), "num_local_experts", hf);
}

void write_mixtral(json::Value& c, const ModelConfig& cfg) {
  c["num_local_experts"] = json::number(cfg.experts);
  c["num_experts_per_tok"] = json::number(cfg.moe_top_k);
  c["sliding_window"] = json::Value();
  c["router_jitter_noise"] = json::number(0.0);
}

// NOTE [HF Qwen MoE layout]: num_experts, as the Hub's files say it.
void write_qwen_moe(json::Value& c, const ModelConfig& cfg) {
  c["num_experts"] = json::number(cfg.experts);
  c["num_experts_per_tok"] = json::number(cfg.moe_top_k);
  c["moe_intermediate_size"] = json::number(cfg.moe_ffn());
  c["norm_topk_prob"] = json::Value(cfg.moe_norm_topk_prob);
  c["decoder_sparse_step"] = json::number(int64_t{1});
  json::Value dense = json::Value::array({});
  for (int64_t l = 0; l < cfg.moe_first_dense; ++l) dense.push_back(json::number(l));
  c["mlp_only_layers"] = dense;
  c["use_sliding_window"] = json::Value(false);
}

void write_qwen2_moe(json::Value& c, const ModelConfig& cfg) {
  write_qwen_moe(c, cfg);
  c["qkv_bias"] = json::Value(true);
  c["shared_expert_intermediate_size"] = json::number(cfg.moe_shared_ffn_hidden);
}

// NOTE [HF DeepSeek-V3 layout]
void write_deepseek_v3(json::Value& c, const ModelConfig& cfg) {
  c["n_routed_experts"] = json::number(cfg.experts);
  c["num_experts_per_tok"] = json::number(cfg.moe_top_k);
  c["moe_intermediate_size"] = json::number(cfg.moe_ffn());
  c["n_shared_experts"] = json::number(cfg.moe_shared_ffn_hidden / cfg.moe_ffn());
  c["first_k_dense_replace"] = json::number(cfg.moe_first_dense);
  c["norm_topk_prob"] = json::Value(cfg.moe_norm_topk_prob);
  c["n_group"] = json::number(cfg.moe_router_groups);
  c["topk_group"] = json::number(cfg.moe_router_group_topk);
  c["routed_scaling_factor"] = json::number(cfg.moe_routed_scaling_factor);
  c["q_lora_rank"] = cfg.q_lora_rank > 0 ? json::number(cfg.q_lora_rank) : json::Value();
  c["kv_lora_rank"] = json::number(cfg.kv_lora_rank);
  c["qk_nope_head_dim"] = json::number(cfg.qk_nope_head_dim);
  c["qk_rope_head_dim"] = json::number(cfg.qk_rope_head_dim);
  c["v_head_dim"] = json::number(cfg.v_head_dim);
  c["rope_interleave"] = json::Value(false);
  c["num_nextn_predict_layers"] = json::number(int64_t{0});
}

bool with_q_lora(const ModelConfig& m) { return m.q_lora_rank > 0; }
bool without_q_lora(const ModelConfig& m) { return m.q_lora_rank == 0; }

using Rope = HfMapping::Rope;

// LlamaForCausalLM's names inside a layer (NOTE [HF Llama layout]): every family's where its table has none.
const std::vector<HfLayerName> kLlamaNames = {
    {"attn_norm.weight", "input_layernorm.weight"},  {"attn.q.weight", "self_attn.q_proj.weight"},
    {"attn.k.weight", "self_attn.k_proj.weight"},    {"attn.v.weight", "self_attn.v_proj.weight"},
    {"attn.o.weight", "self_attn.o_proj.weight"},    {"mlp_norm.weight", "post_attention_layernorm.weight"},
    {"mlp.gate.weight", "mlp.gate_proj.weight"},     {"mlp.up.weight", "mlp.up_proj.weight"},
    {"mlp.down.weight", "mlp.down_proj.weight"},
};

// Qwen's and DeepSeek-V3's router and routed experts (NOTE [HF Qwen MoE layout]).
const std::vector<HfLayerName> kQwenExperts = {
    {"moe.router.weight", "mlp.gate.weight"},
    {"moe.experts.gate.weight", "mlp.experts.{e}.gate_proj.weight", true},
    {"moe.experts.up.weight", "mlp.experts.{e}.up_proj.weight", true},
    {"moe.experts.down.weight", "mlp.experts.{e}.down_proj.weight", true},
};

std::vector<HfLayerName> joined(std::vector<HfLayerName> a, const std::vector<HfLayerName>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<HfFamily>& hf_families() {
  static const std::vector<HfFamily> families = {
      {"llama", "LlamaForCausalLM", {}, HfRouter::kSoftmaxTopK, true, true},
      {"mixtral", "MixtralForCausalLM",  // NOTE [HF Mixtral layout]
       {{"moe.router.weight", "block_sparse_moe.gate.weight"},
        {"moe.experts.gate.weight", "block_sparse_moe.experts.{e}.w1.weight", true},
        {"moe.experts.up.weight", "block_sparse_moe.experts.{e}.w3.weight", true},
        {"moe.experts.down.weight", "block_sparse_moe.experts.{e}.w2.weight", true}},
       HfRouter::kSoftmaxTopK, false, false, read_mixtral, write_mixtral},
      {"qwen2_moe", "Qwen2MoeForCausalLM",
       joined(kQwenExperts, {{"moe.shared.gate.weight", "mlp.shared_expert.gate_proj.weight"},
                             {"moe.shared.up.weight", "mlp.shared_expert.up_proj.weight"},
                             {"moe.shared.down.weight", "mlp.shared_expert.down_proj.weight"},
                             {"moe.shared_gate.weight", "mlp.shared_expert_gate.weight"},
                             {"attn.q.bias", "self_attn.q_proj.bias"},
                             {"attn.k.bias", "self_attn.k_proj.bias"},
                             {"attn.v.bias", "self_attn.v_proj.bias"}}),
       HfRouter::kSoftmaxTopK, false, false, read_qwen2_moe, write_qwen2_moe},
      {"qwen3_moe", "Qwen3MoeForCausalLM",
       joined(kQwenExperts, {{"attn.q_norm.weight", "self_attn.q_norm.weight"},
                             {"attn.k_norm.weight", "self_attn.k_norm.weight"}}),
       HfRouter::kSoftmaxTopK, true, false, read_qwen3_moe, write_qwen_moe},
      {"deepseek_v3", "DeepseekV3ForCausalLM",  // NOTE [HF DeepSeek-V3 layout]
       joined({{"attn.q.weight", "self_attn.q_b_proj.weight", false, Rope::kQueryHeads, with_q_lora},
               {"attn.q.weight", "self_attn.q_proj.weight", false, Rope::kQueryHeads, without_q_lora},
               {"attn.kv_down.weight", "self_attn.kv_a_proj_with_mqa.weight", false, Rope::kKvDown},
               {"attn.q_down.weight", "self_attn.q_a_proj.weight"},
               {"attn.q_down_norm.weight", "self_attn.q_a_layernorm.weight"},
               {"attn.kv_down_norm.weight", "self_attn.kv_a_layernorm.weight"},
               {"attn.kv_up.weight", "self_attn.kv_b_proj.weight"},
               {"moe.router.bias", "mlp.gate.e_score_correction_bias"},
               {"moe.shared.gate.weight", "mlp.shared_experts.gate_proj.weight"},
               {"moe.shared.up.weight", "mlp.shared_experts.up_proj.weight"},
               {"moe.shared.down.weight", "mlp.shared_experts.down_proj.weight"}},
              kQwenExperts),
       HfRouter::kGroupedSigmoidBias, true, false, read_deepseek_v3, write_deepseek_v3},
  };
  return families;
}

}  // namespace

const HfFamily* find_hf_family(const std::string& model_type) {
  for (const HfFamily& f : hf_families())
    if (f.model_type == model_type) return &f;
  return nullptr;
}

const HfFamily& hf_family(const ModelConfig& m) {
  const HfFamily* f = find_hf_family(m.arch);
  if (!f) throw std::logic_error("model.arch = \"" + m.arch + "\" has no Hugging Face Llama-decoder format");
  return *f;
}

std::string expert_name(const HfMapping& m, int64_t e) {
  const size_t at = m.hf.find("{e}");
  return m.hf.substr(0, at) + std::to_string(e) + m.hf.substr(at + 3);
}

HfMapping hf_mapping(const std::string& name, const ModelConfig& cfg) {
  if (name == "embedding.word.weight") return {"model.embed_tokens.weight", true};
  if (name == "head.weight") return {"lm_head.weight", true};
  if (name == "final_norm.weight") return {"model.norm.weight"};
  const std::string pre = "layers.";
  const size_t dot = name.find('.', pre.size());
  if (name.compare(0, pre.size(), pre) == 0 && dot != std::string::npos) {
    const std::string hf = "model.layers." + name.substr(pre.size(), dot - pre.size()) + ".", rest = name.substr(dot + 1);
    for (const std::vector<HfLayerName>* table : {&hf_family(cfg).names, &kLlamaNames})
      for (const HfLayerName& n : *table)
        if (rest == n.trident && (!n.when || n.when(cfg))) return {hf + n.hf, false, n.experts, n.rope};
  }
  throw std::logic_error("no Hugging Face Llama name for parameter " + name);
}

}  // namespace trident
