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
#include "checkpoint/safetensors_shards.h"
#include "models/llama/hf_llama_families.h"
#include "models/llama/llama.h"
#include "models/llama/llama_rules.h"

namespace trident {
namespace {

namespace st = safetensors;

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
    const HfMapping map = hf_mapping(p.info.name, m);
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

// The rotary rows of a DeepSeek-V3 tensor (NOTE [HF DeepSeek-V3 layout]) from the interleaved
// order (x0 x1 | x2 x3 | ..., each pair one frequency) to rotate_half's (x0 x2 ... | x1 x3 ...),
// or back.
at::Tensor permute_rope_rows(const at::Tensor& t, HfMapping::Rope kind, const ModelConfig& cfg, bool to_halves) {
  const int64_t dr = cfg.qk_rope_head_dim;
  at::Tensor perm = at::cat({at::arange(0, dr, 2, at::kLong), at::arange(1, dr, 2, at::kLong)});
  if (!to_halves) perm = at::argsort(perm);
  at::Tensor out = t.clone();
  if (kind == HfMapping::Rope::kKvDown) {
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
  const HfFamily* family = find_hf_family(type);
  if (!family)
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
  if (family->read) family->read(c, cpath, hf);  // the family's own keys
  const ModelFeatures& features = *llama_decoder_features(type);
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
  if (features.attention == AttentionKind::kLatent && m.kv_heads != m.heads)
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
  if (const json::Value* hd = json::find(c, "head_dim"); hd && !hd->is_null() && features.attention != AttentionKind::kLatent) {
    const int64_t d = json::as_int(*hd, cpath + " head_dim");
    // A family that reads model.kv_channels takes head_dim as its own; the others' must be hidden / heads.
    if (features.head_dim_key && !(m.hidden % m.heads == 0 && d == m.hidden / m.heads)) {
      if (d < 1) throw ModelInputError(cpath + ": head_dim = " + std::to_string(d) + "; expected an integer >= 1");
      m.kv_channels = d;
    } else if (!features.head_dim_key && m.hidden % m.heads == 0 && d != m.hidden / m.heads) {
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
  const std::string pre = "model.layers.", router = hf_mapping("layers.0.moe.router.weight", m).hf;
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
      if (mtp_layer(t.name, m.layers, hf.mtp_layers)) continue;  // NOTE [HF DeepSeek-V3 config]: not read
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
  if (find_hf_family(cfg.arch) != find_hf_family(m.arch)) diff.note("model.arch = \"" + cfg.arch + "\" (the directory holds a " + m.arch + ")");
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
    const HfMapping m = hf_mapping(p.info.tied_copy ? "embedding.word.weight" : p.info.name, cfg);
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
    if (m.rope != HfMapping::Rope::kNone && hf.rope_interleaved && t.sizes().vec() == want)
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

namespace {

// What the format's router cannot say is refused before anything is written.
void check_exportable_router(const ModelConfig& cfg, const HfFamily& family) {
  const ModelConfig d;
  const auto cannot = [&](bool differs, const std::string& what) {
    if (differs)
      throw ModelInputError(what + ": transformers' " + cfg.arch + " router cannot hold it, so the export would "
                            "not compute what the checkpoint does");
  };
  if (family.router == HfRouter::kGroupedSigmoidBias) {
    cannot(cfg.moe_score_function != "sigmoid", "model.moe_score_function = \"" + cfg.moe_score_function + "\"");
  } else if (cfg.experts > 0) {
    cannot(cfg.moe_score_function != d.moe_score_function, "model.moe_score_function = \"" + cfg.moe_score_function + "\"");
    cannot(cfg.moe_router_groups != d.moe_router_groups, "model.moe_router_groups = " + std::to_string(cfg.moe_router_groups));
    cannot(cfg.moe_routed_scaling_factor != d.moe_routed_scaling_factor,
           "model.moe_routed_scaling_factor = " + config_number(cfg.moe_routed_scaling_factor));
    cannot(cfg.moe_expert_bias, "model.moe_expert_bias = true");
  }
}

// Every untied parameter under its HF name (one tensor per expert, NOTE [HF Mixtral layout]), vocabulary
// padding removed, rotary rows in rotate_half's order as Trident keeps them (rope_interleave = false).
int write_weights(const std::string& dir, const ModelConfig& cfg, const HfFamily& family,
                  const std::function<at::Tensor(const ParamInfo&)>& full, int64_t shard_bytes) {
  st::ShardWriter out(shard_bytes);
  for (const PlannedParam& p : llama_param_plan(cfg, {0, cfg.layers, true, true}, 1, 0)) {
    if (p.info.tied_copy) continue;
    const HfMapping m = hf_mapping(p.info.name, cfg);
    at::Tensor t = full(p.info).to(at::kFloat);
    if (m.vocab) t = t.narrow(0, 0, cfg.vocab_size);
    t = t.contiguous();
    out.reserve(t.numel() * 4);
    if (m.experts) {
      for (int64_t e = 0; e < t.size(0); ++e) {
        const at::Tensor one = t[e].contiguous();
        out.add(st::from_float(expert_name(m, e), one.sizes().vec(), one.data_ptr<float>()));
      }
    } else {
      out.add(st::from_float(m.hf, t.sizes().vec(), t.data_ptr<float>()));
    }
  }
  if (family.router == HfRouter::kGroupedSigmoidBias && !cfg.moe_expert_bias) {
    // transformers' DeepSeek-V3 router always has the correction bias: zeros choose as no bias does.
    for (int64_t l = cfg.moe_first_dense; l < cfg.layers; ++l) {
      const std::vector<float> z(static_cast<size_t>(cfg.experts), 0.0f);
      out.add(st::from_float("model.layers." + std::to_string(l) + ".mlp.gate.e_score_correction_bias", {cfg.experts},
                             z.data()));
    }
  }
  return out.write(dir);
}

// transformers 5's rope_parameters: the base, the scaling type and its keys.
json::Value rope_parameters(const ModelConfig& cfg) {
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
  return rope;
}

// config.json: the class and model_type, the family's own keys, then those every family shares.
json::Value hf_config(const ModelConfig& cfg, const HfFamily& family, const std::string& tokenizer) {
  const bool latent = llama_features(cfg).attention == AttentionKind::kLatent;
  json::Value c = json::Value::object();
  c["architectures"] = json::Value::array({json::Value(family.architecture)});
  c["model_type"] = json::Value(cfg.arch);
  if (family.write) family.write(c, cfg);
  c["hidden_size"] = json::number(cfg.hidden);
  c["intermediate_size"] = json::number(cfg.ffn());
  c["num_hidden_layers"] = json::number(cfg.layers);
  c["num_attention_heads"] = json::number(cfg.heads);
  c["num_key_value_heads"] = json::number(cfg.kv());
  c["head_dim"] = json::number(latent ? cfg.qk_rope_head_dim : cfg.head_dim());  // MLA's: the rotary width
  c["vocab_size"] = json::number(cfg.vocab_size);
  c["max_position_embeddings"] = json::number(cfg.seq_len);
  c["rms_norm_eps"] = json::number(cfg.layernorm_eps);
  c["hidden_act"] = json::Value("silu");
  if (family.attention_bias_key) c["attention_bias"] = json::Value(false);
  if (family.mlp_bias_key) c["mlp_bias"] = json::Value(false);
  c["tie_word_embeddings"] = json::Value(cfg.tie_embeddings);
  c["initializer_range"] = json::number(cfg.init_std);
  c["rope_parameters"] = rope_parameters(cfg);
  c["torch_dtype"] = json::Value("float32");
  c["tokenizer"] = json::Value(tokenizer);
  c["trident_version"] = json::Value(kTridentVersion);
  return c;
}

}  // namespace

int write_hf_llama(const std::string& dir, const ModelConfig& cfg, const std::string& tokenizer,
                   const std::function<at::Tensor(const ParamInfo&)>& full, int64_t shard_bytes) {
  const HfFamily& family = hf_family(cfg);
  check_exportable_router(cfg, family);
  std::filesystem::create_directories(dir);
  const int n = write_weights(dir, cfg, family, full, shard_bytes);
  write_file_atomic(dir + "/config.json", json::dump(hf_config(cfg, family, tokenizer), 2) + "\n");
  return n;
}

}  // namespace trident
