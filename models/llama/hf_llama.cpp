// HF Llama <-> Trident Llama: NOTE [HF Llama layout] in hf_llama.h.
#include "models/llama/hf_llama.h"

#include <ATen/core/grad_mode.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/atomic_file.h"
#include "core/json.h"
#include "core/model_checks.h"
#include "checkpoint/safetensors.h"
#include "core/version.h"
#include "models/common/hf_names.h"
#include "models/llama/llama.h"
#include "models/llama/llama_rules.h"

namespace trident {
namespace {

namespace st = safetensors;

// The HF name of a Trident parameter; `vocab` when its rows are the padded vocabulary.
struct Mapping {
  std::string hf;
  bool vocab = false;
  bool experts = false;  // hf holds "{e}": one tensor per expert, stacked on dim 0 (NOTE [HF Mixtral layout])
  // NOTE [HF DeepSeek-V3 layout]: rows whose rotary part a file may keep interleaved.
  enum class Rope { kNone, kQueryHeads, kKvDown } rope = Rope::kNone;
};

// The HF name of expert e's tensor of an experts mapping.
std::string expert_name(const Mapping& m, int64_t e) {
  const size_t at = m.hf.find("{e}");
  return m.hf.substr(0, at) + std::to_string(e) + m.hf.substr(at + 3);
}

Mapping map_name(const std::string& name, const ModelConfig& cfg) {
  const std::string& arch = cfg.arch;
  if (name == "embedding.word.weight") return {"model.embed_tokens.weight", true};
  if (name == "head.weight") return {"lm_head.weight", true};
  if (name == "final_norm.weight") return {"model.norm.weight"};
  const std::string pre = "layers.";
  const size_t dot = name.find('.', pre.size());
  if (name.compare(0, pre.size(), pre) == 0 && dot != std::string::npos) {
    const std::string hf = "model.layers." + name.substr(pre.size(), dot - pre.size()) + ".", rest = name.substr(dot + 1);
    static const std::pair<const char*, const char*> table[] = {
        {"attn_norm.weight", "input_layernorm.weight"},  {"attn.q.weight", "self_attn.q_proj.weight"},
        {"attn.k.weight", "self_attn.k_proj.weight"},    {"attn.v.weight", "self_attn.v_proj.weight"},
        {"attn.o.weight", "self_attn.o_proj.weight"},    {"mlp_norm.weight", "post_attention_layernorm.weight"},
        {"mlp.gate.weight", "mlp.gate_proj.weight"},     {"mlp.up.weight", "mlp.up_proj.weight"},
        {"mlp.down.weight", "mlp.down_proj.weight"},
    };
    if (arch == "deepseek_v3") {  // NOTE [HF DeepSeek-V3 layout]
      if (rest == "attn.q.weight")
        return {hf + (cfg.q_lora_rank > 0 ? "self_attn.q_b_proj.weight" : "self_attn.q_proj.weight"), false, false,
                Mapping::Rope::kQueryHeads};
      if (rest == "attn.kv_down.weight") return {hf + "self_attn.kv_a_proj_with_mqa.weight", false, false, Mapping::Rope::kKvDown};
      static const std::pair<const char*, const char*> deepseek[] = {
          {"attn.q_down.weight", "self_attn.q_a_proj.weight"},
          {"attn.q_down_norm.weight", "self_attn.q_a_layernorm.weight"},
          {"attn.kv_down_norm.weight", "self_attn.kv_a_layernorm.weight"},
          {"attn.kv_up.weight", "self_attn.kv_b_proj.weight"},
          {"moe.router.bias", "mlp.gate.e_score_correction_bias"},
          {"moe.shared.gate.weight", "mlp.shared_experts.gate_proj.weight"},
          {"moe.shared.up.weight", "mlp.shared_experts.up_proj.weight"},
          {"moe.shared.down.weight", "mlp.shared_experts.down_proj.weight"},
      };
      for (const auto& [t, h] : deepseek)
        if (rest == t) return {hf + h};
    }
    for (const auto& [t, h] : table)
      if (rest == t) return {hf + h};
    if (arch == "mixtral") {  // NOTE [HF Mixtral layout]
      if (rest == "moe.router.weight") return {hf + "block_sparse_moe.gate.weight"};
      static const std::pair<const char*, const char*> experts[] = {
          {"moe.experts.gate.weight", "w1"}, {"moe.experts.up.weight", "w3"}, {"moe.experts.down.weight", "w2"}};
      for (const auto& [t, w] : experts)
        if (rest == t) return {hf + "block_sparse_moe.experts.{e}." + w + ".weight", false, true};
    }
    // NOTE [HF Qwen MoE layout]
    static const std::pair<const char*, const char*> qwen[] = {
        {"moe.router.weight", "mlp.gate.weight"},
        {"moe.shared.gate.weight", "mlp.shared_expert.gate_proj.weight"},
        {"moe.shared.up.weight", "mlp.shared_expert.up_proj.weight"},
        {"moe.shared.down.weight", "mlp.shared_expert.down_proj.weight"},
        {"moe.shared_gate.weight", "mlp.shared_expert_gate.weight"},
        {"attn.q.bias", "self_attn.q_proj.bias"}, {"attn.k.bias", "self_attn.k_proj.bias"},
        {"attn.v.bias", "self_attn.v_proj.bias"}, {"attn.q_norm.weight", "self_attn.q_norm.weight"},
        {"attn.k_norm.weight", "self_attn.k_norm.weight"},
    };
    for (const auto& [t, h] : qwen)
      if (rest == t) return {hf + h};
    static const std::pair<const char*, const char*> qwen_experts[] = {
        {"moe.experts.gate.weight", "gate_proj"}, {"moe.experts.up.weight", "up_proj"},
        {"moe.experts.down.weight", "down_proj"}};
    for (const auto& [t, w] : qwen_experts)
      if (rest == t) return {hf + "mlp.experts.{e}." + w + ".weight", false, true};
  }
  throw std::logic_error("no Hugging Face Llama name for parameter " + name);
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void read_rope(const json::Value& c, const std::string& cpath, ModelConfig& m) {
  // transformers 5: rope_parameters holds the base and the scaling; older files
  // have rope_theta at the top and rope_scaling (null when unscaled).
  const json::Value* params = json::find(c, "rope_parameters");
  const json::Value* legacy = json::find(c, "rope_scaling");
  const auto type_of = [](const json::Value* v) -> std::string {
    if (!v || v->is_null()) return "default";
    const json::Value* t = json::find(*v, "rope_type");
    if (!t) t = json::find(*v, "type");
    return t && t->is_string() ? json::as_string(*t, "") : "default";
  };
  if (params && !params->is_null() && legacy && !legacy->is_null() && type_of(params) != type_of(legacy))
    throw ModelInputError(cpath + ": rope_parameters (rope_type \"" + type_of(params) + "\") and rope_scaling (\"" +
                             type_of(legacy) + "\") disagree: expected one of them, or both the same");
  const json::Value* scaling = params && !params->is_null() ? params : legacy;
  const std::string where = params && !params->is_null() ? cpath + " rope_parameters" : cpath + " rope_scaling";
  const json::Value& theta_holder = params && !params->is_null() ? *params : c;
  if (const json::Value* t = json::find(theta_holder, "rope_theta"))
    m.rope_theta = json::as_double(*t, cpath + " rope_theta");
  if (!scaling || scaling->is_null()) return;
  const json::Value* type = json::find(*scaling, "rope_type");
  if (!type) type = json::find(*scaling, "type");
  const std::string kind = type ? json::as_string(*type, where + " rope_type") : "default";
  if (kind == "default") return;
  if (kind != "llama3" && kind != "yarn")
    throw ModelInputError(where + ": rope_type = \"" + kind + "\"; Trident reads \"default\", \"llama3\" and \"yarn\"");
  m.rope_factor = json::as_double(json::at(*scaling, "factor", where), where + " factor");
  // The factor stretches the original context; transformers' rope validation asks >= 1 of llama3's
  // and yarn's (below 1 it warns and goes on to compute wrong frequencies).
  if (!(m.rope_factor >= 1))
    throw ModelInputError(where + ": factor = " + config_number(m.rope_factor) + " with rope_type \"" + kind +
                          "\": expected a number >= 1 (how many times the original context it stretches)");
  m.rope_original_max_position =
      json::as_int(json::at(*scaling, "original_max_position_embeddings", where), where + " original_max_position_embeddings");
  if (kind == "yarn") {  // NOTE [YaRN] in core/config_model.cpp
    m.rope_scaling = "yarn";
    // Absent, null or 0: transformers' defaults (beta_fast 32, beta_slow 1; no mscale).
    const auto optional = [&](const char* key, double absent) {
      const json::Value* v = json::find(*scaling, key);
      if (!v || v->is_null()) return absent;
      const double x = json::as_double(*v, where + " " + key);
      return x == 0 ? absent : x;
    };
    m.rope_beta_fast = optional("beta_fast", 32.0);
    m.rope_beta_slow = optional("beta_slow", 1.0);
    m.rope_mscale = optional("mscale", 0.0);
    m.rope_mscale_all_dim = optional("mscale_all_dim", 0.0);
    if (const json::Value* a = json::find(*scaling, "attention_factor"); a && !a->is_null())
      throw ModelInputError(where + ": attention_factor is set; Trident computes it from factor, mscale and "
                                    "mscale_all_dim (NOTE [YaRN]), expected it absent");
    if (const json::Value* t = json::find(*scaling, "truncate"); t && !(t->is_boolean() && t->get<bool>()))
      throw ModelInputError(where + ": truncate is not true; Trident reads YaRN's truncated correction range only");
    return;
  }
  m.rope_scaling = "llama3";
  m.rope_low_freq_factor = json::as_double(json::at(*scaling, "low_freq_factor", where), where + " low_freq_factor");
  m.rope_high_freq_factor = json::as_double(json::at(*scaling, "high_freq_factor", where), where + " high_freq_factor");
}

// The tensors a file may hold (models/common/hf_names.h): those the family's plan maps to.
HfNames hf_names(const ModelConfig& m) {
  HfNames names{m.arch, "model.layers.", "num_hidden_layers",
                {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"},
                {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                 "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight"}};
  // Every name the family's plan maps to, one per expert for the experts' tensors: those of the
  // first layer and of the first MoE layer (model.moe_first_dense), which hold every kind.
  std::vector<PlannedParam> plan = llama_param_plan(m, {0, 1, false, false}, 1, 0);
  if (m.experts > 0 && m.moe_first_dense > 0 && m.moe_first_dense < m.layers)
    for (PlannedParam& p : llama_param_plan(m, {m.moe_first_dense, 1, false, false}, 1, 0)) plan.push_back(p);
  for (const PlannedParam& p : plan) {
    const Mapping map = map_name(p.info.name, m);
    const size_t dot = map.hf.find('.', std::string("model.layers.").size());
    const std::string in_layer = map.hf.substr(dot + 1);
    if (!map.experts) {
      names.block.insert(in_layer);
      continue;
    }
    for (int64_t e = 0; e < m.experts; ++e) names.block.insert(expert_name({in_layer, false, true}, e));
  }
  return names;
}

// The weight files of DIR: one model.safetensors, or the shards an index names.
std::vector<std::string> weight_files(const std::string& dir) {
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (std::filesystem::exists(single)) return {single};
  if (!std::filesystem::exists(index))
    throw ModelInputError(dir + " has neither model.safetensors nor model.safetensors.index.json");
  const json::Value v = json::parse(read_file(index), index);
  std::set<std::string> files;
  for (const auto& [name, file] : json::as_object(json::at(v, "weight_map", index), index + " weight_map"))
    files.insert(json::as_string(file, index + " weight_map." + name));
  std::vector<std::string> out;
  for (const std::string& f : files) {
    if (f.find('/') != std::string::npos || f == "..")
      throw ModelInputError(index + ": weight_map names \"" + f + "\", not a file of the directory");
    if (!std::filesystem::exists(dir + "/" + f))
      throw ModelInputError(index + " names " + f + ", which " + dir + " does not have");
    out.push_back(dir + "/" + f);
  }
  return out;
}

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
void read_qwen_moe(const json::Value& c, const std::string& cpath, HfLlama& hf) {
  ModelConfig& m = hf.model;
  const std::string type = m.arch;
  // Qwen3-MoE's files on the Hub say num_experts; transformers 5.24's save_pretrained writes num_local_experts.
  const json::Value* e = json::find(c, "num_experts");
  const char* experts_key = "num_experts";
  if (!e && type == "qwen3_moe") e = json::find(c, experts_key = "num_local_experts");
  if (!e) throw ModelInputError(cpath + ": no num_experts" + (type == "qwen3_moe" ? " (or num_local_experts)" : ""));
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
  if (type == "qwen2_moe") {
    if (const json::Value* b = json::find(c, "qkv_bias"); b && !json::as_bool(*b, cpath))
      throw ModelInputError(cpath + ": qkv_bias = false; Trident's qwen2_moe has q/k/v biases (expected true)");
    m.moe_shared_ffn_hidden =
        json::as_int(json::at(c, "shared_expert_intermediate_size", cpath), cpath + " shared_expert_intermediate_size");
  }
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

// The rotary rows of a DeepSeek-V3 tensor (NOTE [HF DeepSeek-V3 layout]) from the interleaved
// order (x0 x1 | x2 x3 | ..., each pair one frequency) to rotate_half's (x0 x2 ... | x1 x3 ...),
// or back.
at::Tensor permute_rope_rows(const at::Tensor& t, Mapping::Rope kind, const ModelConfig& cfg, bool to_halves) {
  const int64_t dr = cfg.qk_rope_head_dim;
  at::Tensor perm = at::cat({at::arange(0, dr, 2, at::kLong), at::arange(1, dr, 2, at::kLong)});
  if (!to_halves) perm = at::argsort(perm);
  at::Tensor out = t.clone();
  if (kind == Mapping::Rope::kKvDown) {
    out.narrow(0, cfg.kv_lora_rank, dr).copy_(t.narrow(0, cfg.kv_lora_rank, dr).index_select(0, perm));
  } else {  // each head's rows [nope | rope]
    const int64_t width = cfg.qk_nope_head_dim + dr;
    const at::Tensor heads = t.view({cfg.heads, width, t.size(1)});
    out.view({cfg.heads, width, t.size(1)}).narrow(1, cfg.qk_nope_head_dim, dr).copy_(
        heads.narrow(1, cfg.qk_nope_head_dim, dr).index_select(1, perm));
  }
  return out;
}

}  // namespace

HfLlama read_hf_llama_config(const std::string& dir) {
  HfLlama hf;
  hf.dir = dir;
  const std::string cpath = dir + "/config.json";
  if (!std::filesystem::exists(cpath)) throw ModelInputError(dir + " is not a Hugging Face model: no config.json");
  const json::Value c = json::parse(read_file(cpath), cpath);
  auto get_int = [&](const char* k) { return json::as_int(json::at(c, k, cpath), cpath + " " + k); };
  const std::string type = json::as_string(json::at(c, "model_type", cpath), cpath + " model_type");
  if (!llama_decoder(type))
    throw ModelInputError(cpath + ": model_type = \"" + type +
                          "\"; expected \"llama\", \"mixtral\", \"qwen2_moe\", \"qwen3_moe\" or \"deepseek_v3\"");
  for (const char* k : {"attention_bias", "mlp_bias"})
    if (const json::Value* b = json::find(c, k); b && json::as_bool(*b, cpath + " " + k))
      throw ModelInputError(cpath + ": " + k + " = true; Trident's " + type + " has no such biases");
  if (const json::Value* a = json::find(c, "hidden_act"); a && json::as_string(*a, cpath + " hidden_act") != "silu")
    throw ModelInputError(cpath + ": hidden_act = \"" + json::as_string(*a, "") +
                          "\"; Trident's Llama uses silu (SwiGLU)");
  if (const json::Value* t = json::find(c, "pretraining_tp"); t && !t->is_null() && json::as_int(*t, cpath) != 1)
    throw ModelInputError(cpath + ": pretraining_tp = " + std::to_string(json::as_int(*t, cpath)) + "; expected 1");
  ModelConfig& m = hf.model;
  m.arch = type;
  if (type == "mixtral") {
    // NOTE [HF Mixtral layout]: what Trident's Mixtral does not have is refused, not ignored.
    if (const json::Value* w = json::find(c, "sliding_window"); w && !w->is_null())
      throw ModelInputError(cpath + ": sliding_window = " + std::to_string(json::as_int(*w, cpath + " sliding_window")) +
                            "; Trident's Mixtral attends to the whole sequence (expected null)");
    if (const json::Value* j = json::find(c, "router_jitter_noise"); j && json::as_double(*j, cpath) != 0)
      throw ModelInputError(cpath + ": router_jitter_noise = " + json::dump(*j) +
                            "; Trident's router adds no noise (expected 0)");
    read_experts(c, cpath, json::at(c, "num_local_experts", cpath), "num_local_experts", hf);
  }
  if (type == "qwen2_moe" || type == "qwen3_moe") read_qwen_moe(c, cpath, hf);
  if (type == "deepseek_v3") read_deepseek_v3(c, cpath, hf);
  m.layers = get_int("num_hidden_layers");
  m.hidden = get_int("hidden_size");
  m.heads = get_int("num_attention_heads");
  m.ffn_hidden = get_int("intermediate_size");
  m.vocab_size = get_int("vocab_size");
  m.seq_len = get_int("max_position_embeddings");
  // Absent or null is one K/V head per head (LlamaConfig's default); 0 is no head at all, not Trident's
  // model.kv_heads = 0 ("= heads"), so it is refused here rather than read as that.
  const json::Value* kv = json::find(c, "num_key_value_heads");
  m.kv_heads = kv && !kv->is_null() ? json::as_int(*kv, cpath + " num_key_value_heads") : m.heads;
  if (type == "deepseek_v3" && m.kv_heads != m.heads)
    throw ModelInputError(cpath + ": num_key_value_heads = " + std::to_string(m.kv_heads) +
                          "; DeepSeek-V3's latent attention has a key and a value per head (expected "
                          "num_attention_heads = " + std::to_string(m.heads) + ")");
  if (m.kv_heads < 1)
    throw ModelInputError(cpath + ": num_key_value_heads = " + std::to_string(m.kv_heads) +
                          "; expected an integer >= 1 dividing num_attention_heads (" + std::to_string(m.heads) + ")");
  if (const json::Value* e = json::find(c, "rms_norm_eps"))
    m.layernorm_eps = json::as_double(*e, cpath + " rms_norm_eps");
  const json::Value* tie = json::find(c, "tie_word_embeddings");
  m.tie_embeddings = tie ? json::as_bool(*tie, cpath + " tie_word_embeddings") : false;  // LlamaConfig's default
  if (const json::Value* hd = json::find(c, "head_dim"); hd && !hd->is_null() && type != "deepseek_v3") {
    const int64_t d = json::as_int(*hd, cpath + " head_dim");
    // qwen3_moe's head_dim is its own (model.kv_channels); the others' must be hidden / heads.
    if (type == "qwen3_moe" && !(m.hidden % m.heads == 0 && d == m.hidden / m.heads)) {
      if (d < 1) throw ModelInputError(cpath + ": head_dim = " + std::to_string(d) + "; expected an integer >= 1");
      m.kv_channels = d;
    } else if (type != "qwen3_moe" && m.hidden % m.heads == 0 && d != m.hidden / m.heads) {
      throw ModelInputError(cpath + ": head_dim = " + std::to_string(d) + "; Trident's " + type +
                            " needs hidden_size / num_attention_heads = " + std::to_string(m.hidden / m.heads));
    }
  }
  read_rope(c, cpath, m);
  if (const json::Value* t = json::find(c, "tokenizer"); t && t->is_string()) hf.tokenizer = json::as_string(*t, "");
  else if (std::filesystem::exists(dir + "/tokenizer.json")) hf.tokenizer = "hf";
  return hf;
}

namespace {

// Whether `name` is a tensor of DeepSeek-V3's multi-token prediction modules: the `mtp` layers
// after the model's `layers`.
bool mtp_layer(const std::string& name, int64_t layers, int64_t mtp) {
  const std::string pre = "model.layers.";
  long long layer = -1;
  return mtp > 0 && name.compare(0, pre.size(), pre) == 0 && std::sscanf(name.c_str() + pre.size(), "%lld.", &layer) == 1 &&
         layer >= layers && layer < layers + mtp;
}

// Each MoE layer's router has a row per expert the weights hold. A config.json whose expert count
// differs is named here, before the tensors' names and shapes, which would blame a tensor (an
// expert beyond the count, or the router's shape).
void check_expert_count(const std::vector<st::Tensor>& file, const HfLlama& hf, const std::string& path) {
  const ModelConfig& m = hf.model;
  if (m.experts < 1) return;
  const std::string pre = "model.layers.", router = map_name("layers.0.moe.router.weight", m).hf;
  const std::string in_layer = router.substr(router.find('.', pre.size()) + 1);  // "mlp.gate.weight"
  for (const st::Tensor& t : file) {
    long long layer = -1;
    int used = 0;
    if (t.name.compare(0, pre.size(), pre) != 0 || std::sscanf(t.name.c_str() + pre.size(), "%lld.%n", &layer, &used) != 1 ||
        used == 0 || t.name.substr(pre.size() + static_cast<size_t>(used)) != in_layer || t.shape.empty() ||
        t.shape[0] == m.experts)
      continue;
    throw ModelInputError(hf.dir + "/config.json: " + hf.experts_key + " = " + std::to_string(m.experts) +
                          ", but the weights hold " + std::to_string(t.shape[0]) + " experts (" + t.name + " in " +
                          path + " is " + shape_text(t.shape) + ")");
  }
}

}  // namespace

HfLlama read_hf_llama(const std::string& dir) {
  HfLlama hf = read_hf_llama_config(dir);
  const ModelConfig& m = hf.model;
  const HfNames names = hf_names(m);
  for (const std::string& path : weight_files(dir)) {
    const std::vector<st::Tensor> file = st::read_file(path);
    check_expert_count(file, hf, path);
    for (const st::Tensor& t : file) {
      if (t.name.find("rotary_emb.inv_freq") != std::string::npos) continue;  // a buffer some files keep
      if (mtp_layer(t.name, m.layers, hf.mtp_layers)) continue;  // NOTE [HF DeepSeek-V3 layout]: not read
      check_hf_name(t.name, names, m.layers, path);
      const std::vector<float> v = st::to_float(t, path);
      st::check_finite(v, t.name, path);
      at::Tensor x = at::empty(t.shape, at::kFloat);
      std::memcpy(x.data_ptr<float>(), v.data(), v.size() * sizeof(float));
      hf.tensors[t.name] = x;
    }
  }
  if (m.tie_embeddings) {
    auto head = hf.tensors.find("lm_head.weight"), embed = hf.tensors.find("model.embed_tokens.weight");
    if (head != hf.tensors.end() && (embed == hf.tensors.end() || !at::equal(head->second, embed->second)))
      throw ModelInputError(dir + ": tie_word_embeddings = true but lm_head.weight differs from "
                               "model.embed_tokens.weight");
  }
  return hf;
}

void check_hf_llama_matches(const HfLlama& hf, const ModelConfig& cfg) {
  ConfigDiff diff;
  const ModelConfig& m = hf.model;
  if (cfg.arch != m.arch) diff.note("model.arch = \"" + cfg.arch + "\" (the directory holds a " + m.arch + ")");
  diff.number("num_local_experts", m.experts, "model.experts", cfg.experts);
  diff.number("num_experts_per_tok", m.moe_top_k, "model.moe_top_k", cfg.moe_top_k);
  if (!m.mla()) diff.number("head_dim", m.head_dim(), "model.kv_channels (head width)", cfg.head_dim());
  if (m.experts > 0) {
    diff.number("mlp_only_layers (the first dense layers)", m.moe_first_dense, "model.moe_first_dense",
                cfg.moe_first_dense);
    diff.number("moe_intermediate_size", m.moe_ffn(), "model.moe_ffn_hidden (expert width)", cfg.moe_ffn());
    diff.number("shared_expert_intermediate_size", m.moe_shared_ffn_hidden, "model.moe_shared_ffn_hidden",
                cfg.moe_shared_ffn_hidden);
    // Mixtral's router always renormalises its top-k weights; Qwen's says so in norm_topk_prob.
    diff.number("norm_topk_prob", m.moe_norm_topk_prob, "model.moe_norm_topk_prob", cfg.moe_norm_topk_prob);
    if (m.moe_score_function != cfg.moe_score_function)
      diff.note("the router scores by " + m.moe_score_function + " but model.moe_score_function = \"" +
                cfg.moe_score_function + "\"");
    diff.number("n_group", m.moe_router_groups, "model.moe_router_groups", cfg.moe_router_groups);
    diff.number("topk_group", m.moe_router_group_topk, "model.moe_router_group_topk", cfg.moe_router_group_topk);
    diff.number("routed_scaling_factor", m.moe_routed_scaling_factor, "model.moe_routed_scaling_factor",
                cfg.moe_routed_scaling_factor);
    diff.number("e_score_correction_bias (present)", m.moe_expert_bias, "model.moe_expert_bias", cfg.moe_expert_bias);
  }
  if (m.mla() || cfg.mla()) {  // NOTE [MLA]
    diff.number("q_lora_rank", m.q_lora_rank, "model.q_lora_rank", cfg.q_lora_rank);
    diff.number("kv_lora_rank", m.kv_lora_rank, "model.kv_lora_rank", cfg.kv_lora_rank);
    diff.number("qk_nope_head_dim", m.qk_nope_head_dim, "model.qk_nope_head_dim", cfg.qk_nope_head_dim);
    diff.number("qk_rope_head_dim", m.qk_rope_head_dim, "model.qk_rope_head_dim", cfg.qk_rope_head_dim);
    diff.number("v_head_dim", m.v_head_dim, "model.v_head_dim", cfg.v_head_dim);
  }
  diff.number("num_hidden_layers", m.layers, "model.layers", cfg.layers);
  diff.number("hidden_size", m.hidden, "model.hidden", cfg.hidden);
  diff.number("num_attention_heads", m.heads, "model.heads", cfg.heads);
  diff.number("num_key_value_heads", m.kv(), "model.kv_heads", cfg.kv());
  diff.number("intermediate_size", m.ffn(), "model.ffn_hidden", cfg.ffn());
  diff.number("vocab_size", m.vocab_size, "model.vocab_size", cfg.vocab_size);
  diff.number("rms_norm_eps", m.layernorm_eps, "model.layernorm_eps", cfg.layernorm_eps);
  diff.number("rope_theta", m.rope_theta, "model.rope_theta", cfg.rope_theta);
  diff.number("tie_word_embeddings", m.tie_embeddings, "model.tie_embeddings", cfg.tie_embeddings);
  if (m.rope_scaling != cfg.rope_scaling) {
    diff.note("rope scaling \"" + m.rope_scaling + "\" but model.rope_scaling = \"" + cfg.rope_scaling + "\"");
  } else if (m.rope_scaling != "none") {  // llama3 and yarn
    diff.number("rope factor", m.rope_factor, "model.rope_factor", cfg.rope_factor);
    diff.number("rope original_max_position_embeddings", m.rope_original_max_position,
                "model.rope_original_max_position", cfg.rope_original_max_position);
    if (m.rope_scaling == "llama3") {
      diff.number("rope low_freq_factor", m.rope_low_freq_factor, "model.rope_low_freq_factor", cfg.rope_low_freq_factor);
      diff.number("rope high_freq_factor", m.rope_high_freq_factor, "model.rope_high_freq_factor",
                  cfg.rope_high_freq_factor);
    } else {
      diff.number("rope beta_fast", m.rope_beta_fast, "model.rope_beta_fast", cfg.rope_beta_fast);
      diff.number("rope beta_slow", m.rope_beta_slow, "model.rope_beta_slow", cfg.rope_beta_slow);
      diff.number("rope mscale", m.rope_mscale, "model.rope_mscale", cfg.rope_mscale);
      diff.number("rope mscale_all_dim", m.rope_mscale_all_dim, "model.rope_mscale_all_dim", cfg.rope_mscale_all_dim);
    }
  }
  if (m.seq_len < cfg.seq_len)
    diff.note("max_position_embeddings = " + std::to_string(m.seq_len) + " is less than model.seq_len = " +
              std::to_string(cfg.seq_len));
  diff.throw_if_any(hf.dir);
}

void init_from_hf_llama(const HfLlama& hf, const ModelConfig& cfg, std::vector<Param>& params) {
  check_hf_llama_matches(hf, cfg);
  at::NoGradGuard no_grad;
  for (Param& p : params) {
    const Mapping m = map_name(p.info.tied_copy ? "embedding.word.weight" : p.info.name, cfg);
    const auto tensor = [&](const std::string& name) {
      auto it = hf.tensors.find(name);
      if (it == hf.tensors.end()) throw ModelInputError(hf.dir + " has no tensor " + name + " (for " + p.info.name + ")");
      if (m.experts && it->second.sizes().vec() != std::vector<int64_t>(p.info.full_shape.begin() + 1, p.info.full_shape.end()))
        throw ModelInputError(hf.dir + ": tensor " + name + " has shape " + shape_text(it->second.sizes().vec()) +
                              " but each expert of " + p.info.name + " needs " +
                              shape_text({p.info.full_shape.begin() + 1, p.info.full_shape.end()}));
      return it->second;
    };
    at::Tensor t;
    if (m.experts) {  // NOTE [HF Mixtral layout]: one tensor per expert, stacked
      std::vector<at::Tensor> each;
      for (int64_t e = 0; e < p.info.full_shape[0]; ++e) each.push_back(tensor(expert_name(m, e)));
      t = at::stack(each);
    } else {
      t = tensor(m.hf);
    }
    std::vector<int64_t> want = p.info.full_shape;
    if (m.rope != Mapping::Rope::kNone && hf.rope_interleaved && t.sizes().vec() == want)
      t = permute_rope_rows(t, m.rope, cfg, /*to_halves=*/true);
    if (m.vocab) want[0] = cfg.vocab_size;
    if (t.sizes().vec() != want)
      throw ModelInputError(hf.dir + ": tensor " + m.hf + " has shape " + shape_text(t.sizes().vec()) + " but " +
                               p.info.name + " needs " + shape_text(want));
    if (m.vocab) {  // pad the vocabulary with zero rows
      at::Tensor full = at::zeros(p.info.full_shape, at::kFloat);
      full.narrow(0, 0, t.size(0)).copy_(t);
      t = full;
    }
    p.tensor.copy_(local_slice(p.info, t, p.tensor.sizes().vec()));  // this rank's TP and EP part
  }
}

int write_hf_llama(const std::string& dir, const ModelConfig& cfg, const std::string& tokenizer,
                   const std::function<at::Tensor(const ParamInfo&)>& full, int64_t shard_bytes) {
  // What the format's router cannot say is refused before anything is written.
  const ModelConfig d;
  const bool deepseek = cfg.arch == "deepseek_v3";
  const auto cannot = [&](bool differs, const std::string& what) {
    if (differs)
      throw ModelInputError(what + ": transformers' " + cfg.arch + " router cannot hold it, so the export would "
                            "not compute what the checkpoint does");
  };
  if (deepseek) {
    cannot(cfg.moe_score_function != "sigmoid", "model.moe_score_function = \"" + cfg.moe_score_function + "\"");
  } else if (cfg.experts > 0) {
    cannot(cfg.moe_score_function != d.moe_score_function, "model.moe_score_function = \"" + cfg.moe_score_function + "\"");
    cannot(cfg.moe_router_groups != d.moe_router_groups, "model.moe_router_groups = " + std::to_string(cfg.moe_router_groups));
    cannot(cfg.moe_routed_scaling_factor != d.moe_routed_scaling_factor,
           "model.moe_routed_scaling_factor = " + config_number(cfg.moe_routed_scaling_factor));
    cannot(cfg.moe_expert_bias, "model.moe_expert_bias = true");
  }
  std::filesystem::create_directories(dir);
  std::vector<std::vector<st::Tensor>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const PlannedParam& p : llama_param_plan(cfg, {0, cfg.layers, true, true}, 1, 0)) {
    if (p.info.tied_copy) continue;
    const Mapping m = map_name(p.info.name, cfg);
    at::Tensor t = full(p.info).to(at::kFloat);
    if (m.vocab) t = t.narrow(0, 0, cfg.vocab_size);
    t = t.contiguous();
    const int64_t bytes = t.numel() * 4;
    if (shard_bytes > 0 && in_shard > 0 && in_shard + bytes > shard_bytes) shards.emplace_back(), in_shard = 0;
    // deepseek_v3: rotary rows in rotate_half's order, as Trident keeps them (rope_interleave = false).
    if (m.experts) {  // NOTE [HF Mixtral layout]: one tensor per expert
      for (int64_t e = 0; e < t.size(0); ++e) {
        const at::Tensor one = t[e].contiguous();
        shards.back().push_back(st::from_float(expert_name(m, e), one.sizes().vec(), one.data_ptr<float>()));
      }
    } else {
      shards.back().push_back(st::from_float(m.hf, t.sizes().vec(), t.data_ptr<float>()));
    }
    in_shard += bytes;
    total += bytes;
  }
  if (deepseek && !cfg.moe_expert_bias) {
    // transformers' DeepSeek-V3 router always has the correction bias: zeros choose as no bias does.
    for (int64_t l = cfg.moe_first_dense; l < cfg.layers; ++l) {
      const std::vector<float> z(static_cast<size_t>(cfg.experts), 0.0f);
      shards.back().push_back(st::from_float("model.layers." + std::to_string(l) + ".mlp.gate.e_score_correction_bias",
                                             {cfg.experts}, z.data()));
    }
  }
  int n = 0;
  if (shard_bytes <= 0) {
    st::write_file(dir + "/model.safetensors", shards[0], {{"format", "pt"}});
    n = static_cast<int>(shards[0].size());
  } else {
    json::Value map = json::Value::object();
    for (size_t k = 0; k < shards.size(); ++k) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
      st::write_file(dir + "/" + name, shards[k], {{"format", "pt"}});
      for (const st::Tensor& t : shards[k]) map[t.name] = json::Value(name), ++n;
    }
    json::Value index = json::Value::object();
    json::Value meta = json::Value::object();
    meta["total_size"] = json::number(total);
    index["metadata"] = meta;
    index["weight_map"] = map;
    write_file_atomic(dir + "/model.safetensors.index.json", json::dump(index, 2) + "\n");
  }

  json::Value c = json::Value::object();
  const bool mixtral = cfg.arch == "mixtral", qwen = cfg.arch == "qwen2_moe" || cfg.arch == "qwen3_moe";
  const char* arch_class = mixtral    ? "MixtralForCausalLM"
                           : qwen     ? (cfg.arch == "qwen2_moe" ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM")
                           : deepseek ? "DeepseekV3ForCausalLM"
                                      : "LlamaForCausalLM";
  c["architectures"] = json::Value::array({json::Value(arch_class)});
  c["model_type"] = json::Value(cfg.arch);
  if (mixtral) {
    c["num_local_experts"] = json::number(cfg.experts);
    c["num_experts_per_tok"] = json::number(cfg.moe_top_k);
    c["sliding_window"] = json::Value();
    c["router_jitter_noise"] = json::number(0.0);
  }
  if (qwen) {  // NOTE [HF Qwen MoE layout]: num_experts, as the Hub's files say it
    c["num_experts"] = json::number(cfg.experts);
    c["num_experts_per_tok"] = json::number(cfg.moe_top_k);
    c["moe_intermediate_size"] = json::number(cfg.moe_ffn());
    c["norm_topk_prob"] = json::Value(cfg.moe_norm_topk_prob);
    c["decoder_sparse_step"] = json::number(int64_t{1});
    json::Value dense = json::Value::array({});
    for (int64_t l = 0; l < cfg.moe_first_dense; ++l) dense.push_back(json::number(l));
    c["mlp_only_layers"] = dense;
    c["use_sliding_window"] = json::Value(false);
    if (cfg.arch == "qwen2_moe") {
      c["qkv_bias"] = json::Value(true);
      c["shared_expert_intermediate_size"] = json::number(cfg.moe_shared_ffn_hidden);
    }
  }
  if (deepseek) {  // NOTE [HF DeepSeek-V3 layout]
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
  c["hidden_size"] = json::number(cfg.hidden);
  c["intermediate_size"] = json::number(cfg.ffn());
  c["num_hidden_layers"] = json::number(cfg.layers);
  c["num_attention_heads"] = json::number(cfg.heads);
  c["num_key_value_heads"] = json::number(cfg.kv());
  c["head_dim"] = json::number(deepseek ? cfg.qk_rope_head_dim : cfg.head_dim());  // DeepSeek-V3's: the rotary width
  c["vocab_size"] = json::number(cfg.vocab_size);
  c["max_position_embeddings"] = json::number(cfg.seq_len);
  c["rms_norm_eps"] = json::number(cfg.layernorm_eps);
  c["hidden_act"] = json::Value("silu");
  if (cfg.arch == "llama" || cfg.arch == "qwen3_moe" || deepseek) c["attention_bias"] = json::Value(false);
  if (cfg.arch == "llama") c["mlp_bias"] = json::Value(false);
  c["tie_word_embeddings"] = json::Value(cfg.tie_embeddings);
  c["initializer_range"] = json::number(cfg.init_std);
  json::Value rope = json::Value::object();
  rope["rope_theta"] = json::number(cfg.rope_theta);
  rope["rope_type"] = json::Value(cfg.rope_scaling == "none" ? "default" : cfg.rope_scaling);
  if (cfg.rope_scaling != "none") {  // llama3 and yarn
    rope["factor"] = json::number(cfg.rope_factor);
    rope["original_max_position_embeddings"] = json::number(cfg.rope_original_max_position);
  }
  if (cfg.rope_scaling == "yarn") {  // NOTE [YaRN]: an absent mscale stays absent
    rope["beta_fast"] = json::number(cfg.rope_beta_fast);
    rope["beta_slow"] = json::number(cfg.rope_beta_slow);
    if (cfg.rope_mscale != 0) rope["mscale"] = json::number(cfg.rope_mscale);
    if (cfg.rope_mscale_all_dim != 0) rope["mscale_all_dim"] = json::number(cfg.rope_mscale_all_dim);
  }
  if (cfg.rope_scaling == "llama3") {
    rope["low_freq_factor"] = json::number(cfg.rope_low_freq_factor);
    rope["high_freq_factor"] = json::number(cfg.rope_high_freq_factor);
  }
  c["rope_parameters"] = rope;
  c["torch_dtype"] = json::Value("float32");
  c["tokenizer"] = json::Value(tokenizer);
  c["trident_version"] = json::Value(kTridentVersion);
  write_file_atomic(dir + "/config.json", json::dump(c, 2) + "\n");
  return n;
}

}  // namespace trident
