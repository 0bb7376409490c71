// HF GPT-2 <-> Trident GPT: NOTE [HF GPT-2 layout] in hf_gpt2.h.
#include "models/gpt/hf_gpt2.h"

#include <ATen/core/grad_mode.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/atomic_file.h"
#include "core/json.h"
#include "core/model_checks.h"
#include "checkpoint/safetensors.h"
#include "core/version.h"
#include "models/common/hf_names.h"
#include "models/gpt/gpt.h"

namespace trident {
namespace {

namespace st = safetensors;

// How a Trident tensor becomes its HF counterpart.
enum class Conv { Same, Transpose, Qkv, QkvBias, Vocab, Positions };

struct Mapping {
  std::string hf;
  Conv conv;
};

Mapping map_name(const std::string& name) {
  if (name == "embedding.word.weight") return {"wte.weight", Conv::Vocab};
  if (name == "embedding.position.weight") return {"wpe.weight", Conv::Positions};
  if (name == "final_ln.weight") return {"ln_f.weight", Conv::Same};
  if (name == "final_ln.bias") return {"ln_f.bias", Conv::Same};
  const std::string pre = "layers.";
  const size_t dot = name.find('.', pre.size());
  if (name.compare(0, pre.size(), pre) == 0 && dot != std::string::npos) {
    const std::string hf = "h." + name.substr(pre.size(), dot - pre.size()) + ".", rest = name.substr(dot + 1);
    static const std::pair<const char*, Mapping> table[] = {
        {"ln1.weight", {"ln_1.weight", Conv::Same}},
        {"ln1.bias", {"ln_1.bias", Conv::Same}},
        {"attn.qkv.weight", {"attn.c_attn.weight", Conv::Qkv}},
        {"attn.qkv.bias", {"attn.c_attn.bias", Conv::QkvBias}},
        {"attn.proj.weight", {"attn.c_proj.weight", Conv::Transpose}},
        {"attn.proj.bias", {"attn.c_proj.bias", Conv::Same}},
        {"ln2.weight", {"ln_2.weight", Conv::Same}},
        {"ln2.bias", {"ln_2.bias", Conv::Same}},
        {"mlp.fc.weight", {"mlp.c_fc.weight", Conv::Transpose}},
        {"mlp.fc.bias", {"mlp.c_fc.bias", Conv::Same}},
        {"mlp.proj.weight", {"mlp.c_proj.weight", Conv::Transpose}},
        {"mlp.proj.bias", {"mlp.c_proj.bias", Conv::Same}},
    };
    for (const auto& [t, m] : table)
      if (rest == t) return {hf + m.hf, m.conv};
  }
  throw std::logic_error("no Hugging Face GPT-2 name for parameter " + name);
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Trident full tensor -> HF tensor.
at::Tensor to_hf(const at::Tensor& t, Conv conv, const ModelConfig& cfg) {
  const int64_t h = cfg.hidden, heads = cfg.heads, hd = h / heads;
  switch (conv) {
    case Conv::Same:
    case Conv::Positions: return t.contiguous();
    case Conv::Transpose: return t.t().contiguous();
    case Conv::Qkv:  // (head, {q,k,v}, hd) rows -> ({q,k,v}, head, hd), then Conv1D (in, out)
      return t.view({heads, 3, hd, h}).permute({1, 0, 2, 3}).reshape({3 * h, h}).t().contiguous();
    case Conv::QkvBias: return t.view({heads, 3, hd}).permute({1, 0, 2}).reshape({3 * h}).contiguous();
    case Conv::Vocab: return t.narrow(0, 0, cfg.vocab_size).contiguous();
  }
  return t;
}

// The shape the HF tensor must have for a Trident parameter of full shape `full`.
std::vector<int64_t> hf_shape(const std::vector<int64_t>& full, Conv conv, const ModelConfig& cfg) {
  switch (conv) {
    case Conv::Transpose:
    case Conv::Qkv: return {full[1], full[0]};
    case Conv::Vocab: return {cfg.vocab_size, full[1]};
    default: return full;
  }
}

// The tensors a file may hold (models/common/hf_names.h).
const HfNames& hf_names() {
  static const HfNames names{
      "GPT-2", "h.", "n_layer", {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias", "lm_head.weight"},
      {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
       "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}};
  return names;
}

}  // namespace

HfGpt2 read_hf_gpt2_config(const std::string& dir) {
  HfGpt2 hf;
  hf.dir = dir;
  const std::string cpath = dir + "/config.json";
  if (!std::filesystem::exists(cpath)) throw ModelInputError(dir + " is not a Hugging Face model: no config.json");
  const json::Value c = json::parse(read_file(cpath), cpath);
  auto get_int = [&](const char* k) { return json::as_int(json::at(c, k, cpath), cpath + " " + k); };
  if (const json::Value* t = json::find(c, "model_type"); t && json::as_string(*t, cpath + " model_type") != "gpt2")
    throw ModelInputError(cpath + ": model_type = \"" + json::as_string(*t, "") + "\"; only \"gpt2\" is supported");
  if (const json::Value* a = json::find(c, "activation_function"); a && json::as_string(*a, cpath) != "gelu_new")
    throw ModelInputError(cpath + ": activation_function = \"" + json::as_string(*a, cpath) +
                             "\"; Trident's GPT uses the tanh GELU (\"gelu_new\")");
  if (const json::Value* s = json::find(c, "scale_attn_by_inverse_layer_idx"); s && json::as_bool(*s, cpath))
    throw ModelInputError(cpath + ": scale_attn_by_inverse_layer_idx = true is not supported");
  if (const json::Value* t = json::find(c, "tie_word_embeddings"); t && !json::as_bool(*t, cpath + " tie_word_embeddings"))
    throw ModelInputError(cpath + ": tie_word_embeddings = false; Trident's GPT ties the LM head to the word "
                             "embedding (expected true or no key)");
  hf.model.layers = get_int("n_layer");
  hf.model.hidden = get_int("n_embd");
  hf.model.heads = get_int("n_head");
  hf.model.seq_len = get_int("n_positions");
  hf.model.vocab_size = get_int("vocab_size");
  const json::Value* inner = json::find(c, "n_inner");
  hf.model.ffn_hidden = inner && !inner->is_null() ? json::as_int(*inner, cpath + " n_inner") : 0;
  if (const json::Value* e = json::find(c, "layer_norm_epsilon")) hf.model.layernorm_eps = json::as_double(*e, cpath);
  if (const json::Value* t = json::find(c, "tokenizer")) hf.tokenizer = json::as_string(*t, cpath + " tokenizer");
  else if (hf.model.vocab_size == 50257) hf.tokenizer = "gpt2";
  else if (hf.model.vocab_size == 256) hf.tokenizer = "byte";
  return hf;
}

HfGpt2 read_hf_gpt2(const std::string& dir) {
  HfGpt2 hf = read_hf_gpt2_config(dir);
  const std::string wpath = dir + "/model.safetensors";
  if (!std::filesystem::exists(wpath)) throw ModelInputError(dir + " has no model.safetensors");
  at::Tensor lm_head;
  for (const st::Tensor& t : st::read_file(wpath)) {
    std::string name = t.name;
    if (name.compare(0, 12, "transformer.") == 0) name = name.substr(12);
    // HF's causal-mask buffers are not parameters.
    if (name.size() > 10 && (name.compare(name.size() - 10, 10, ".attn.bias") == 0 ||
                             name.find(".attn.masked_bias") != std::string::npos))
      continue;
    check_hf_name(name, hf_names(), hf.model.layers, wpath);
    const std::vector<float> v = st::to_float(t, wpath);
    st::check_finite(v, t.name, wpath);
    at::Tensor x = at::empty(t.shape, at::kFloat);
    std::memcpy(x.data_ptr<float>(), v.data(), v.size() * sizeof(float));
    if (name == "lm_head.weight") lm_head = x;
    else hf.tensors[name] = x;
  }
  if (lm_head.defined()) {
    auto wte = hf.tensors.find("wte.weight");
    if (wte == hf.tensors.end() || !at::equal(wte->second, lm_head))
      throw ModelInputError(wpath + ": lm_head.weight differs from wte.weight; Trident ties the LM head to the "
                               "word embedding");
  }
  return hf;
}

at::Tensor trident_tensor_from_hf(const HfGpt2& hf, const ParamInfo& info) {
  const Mapping m = map_name(info.name);
  const std::string where = hf.dir + "/model.safetensors";
  auto it = hf.tensors.find(m.hf);
  if (it == hf.tensors.end()) throw ModelInputError(where + " has no tensor " + m.hf + " (for " + info.name + ")");
  at::Tensor t = it->second;
  const ModelConfig& cfg = hf.model;
  std::vector<int64_t> want = hf_shape(info.full_shape, m.conv, cfg);
  if (m.conv == Conv::Positions && t.dim() == 2 && t.size(1) == want[1] && t.size(0) > want[0])
    t = t.narrow(0, 0, want[0]);  // n_positions > seq_len: the first seq_len positions
  if (t.sizes().vec() != want)
    throw ModelInputError(where + ": tensor " + m.hf + " has shape " + shape_text(t.sizes().vec()) + " but " +
                             info.name + " needs " + shape_text(want));
  const int64_t h = info.full_shape.back(), heads = cfg.heads, hd = cfg.hidden / cfg.heads;
  switch (m.conv) {
    case Conv::Same:
    case Conv::Positions: return t.contiguous();
    case Conv::Transpose: return t.t().contiguous();
    case Conv::Qkv: return t.t().reshape({3, heads, hd, h}).permute({1, 0, 2, 3}).reshape({3 * h, h}).contiguous();
    case Conv::QkvBias: return t.view({3, heads, hd}).permute({1, 0, 2}).reshape({3 * cfg.hidden}).contiguous();
    case Conv::Vocab: {
      at::Tensor full = at::zeros(info.full_shape, at::kFloat);
      full.narrow(0, 0, t.size(0)).copy_(t);
      return full;
    }
  }
  return t;
}

void check_hf_matches(const HfGpt2& hf, const ModelConfig& cfg) {
  ConfigDiff diff;
  const ModelConfig& m = hf.model;
  diff.number("n_layer", m.layers, "model.layers", cfg.layers);
  diff.number("n_embd", m.hidden, "model.hidden", cfg.hidden);
  diff.number("n_head", m.heads, "model.heads", cfg.heads);
  diff.number("n_inner (MLP width)", m.ffn(), "the MLP width", cfg.ffn());
  diff.number("vocab_size", m.vocab_size, "model.vocab_size", cfg.vocab_size);
  diff.number("layer_norm_epsilon", m.layernorm_eps, "model.layernorm_eps", cfg.layernorm_eps);
  if (m.seq_len < cfg.seq_len)
    diff.note("n_positions = " + std::to_string(m.seq_len) + " is less than model.seq_len = " + std::to_string(cfg.seq_len));
  diff.throw_if_any(hf.dir);
}

void init_from_hf(const std::string& dir, const ModelConfig& cfg, std::vector<Param>& params) {
  init_from_hf(read_hf_gpt2(dir), cfg, params);
}

void init_from_hf(const HfGpt2& hf, const ModelConfig& cfg, std::vector<Param>& params) {
  check_hf_matches(hf, cfg);
  at::NoGradGuard no_grad;
  for (Param& p : params) {
    at::Tensor full = trident_tensor_from_hf(hf, p.info);
    p.tensor.copy_(local_slice(p.info, full, p.tensor.sizes().vec()));
  }
}

void write_hf_gpt2(const std::string& dir, const ModelConfig& cfg, const std::string& tokenizer,
                   const std::function<at::Tensor(const ParamInfo&)>& full) {
  std::filesystem::create_directories(dir);
  std::vector<st::Tensor> out;
  for (const PlannedParam& p : gpt_param_plan(cfg, {0, cfg.layers, true, true}, 1, 0)) {
    if (p.info.tied_copy) continue;
    const Mapping m = map_name(p.info.name);
    const at::Tensor t = to_hf(full(p.info).to(at::kFloat), m.conv, cfg);
    out.push_back(st::from_float(m.hf, t.sizes().vec(), t.data_ptr<float>()));
  }
  st::write_file(dir + "/model.safetensors", out, {{"format", "pt"}});

  json::Value c = json::Value::object();
  c["architectures"] = json::Value::array({json::Value("GPT2LMHeadModel")});
  c["model_type"] = json::Value("gpt2");
  c["n_layer"] = json::number(cfg.layers);
  c["n_head"] = json::number(cfg.heads);
  c["n_embd"] = json::number(cfg.hidden);
  c["n_positions"] = json::number(cfg.seq_len);
  c["n_ctx"] = json::number(cfg.seq_len);
  c["n_inner"] = cfg.ffn_hidden > 0 ? json::number(cfg.ffn_hidden) : json::Value();
  c["vocab_size"] = json::number(cfg.vocab_size);
  c["layer_norm_epsilon"] = json::number(cfg.layernorm_eps);
  c["activation_function"] = json::Value("gelu_new");
  c["initializer_range"] = json::number(cfg.init_std);
  for (const char* k : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) c[k] = json::number(cfg.dropout);
  c["tie_word_embeddings"] = json::Value(true);
  c["torch_dtype"] = json::Value("float32");
  c["tokenizer"] = json::Value(tokenizer);
  // GPT-2's <|endoftext|>; other tokenizers (bytes) have no such id, and a missing key would
  // make transformers default to 50256, outside their vocabulary.
  const json::Value eot = tokenizer == "gpt2" ? json::number(int64_t{50256}) : json::Value();
  c["bos_token_id"] = eot;
  c["eos_token_id"] = eot;
  c["trident_version"] = json::Value(kTridentVersion);
  write_file_atomic(dir + "/config.json", json::dump(c, 2) + "\n");
}

}  // namespace trident
