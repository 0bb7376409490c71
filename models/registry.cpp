// Model registry: see registry.h.
#include "models/registry.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "core/atomic_file.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/checkpoint_tensors.h"
#include "core/json.h"
#include "core/model_checks.h"
#include "core/pipeline_layout.h"

#include "models/families.h"
#include "models/gpt/gpt.h"
#include "models/gpt/hf_gpt2.h"
#include "models/llama/hf_llama.h"
#include "models/llama/llama.h"
#include "models/llama/llama_rules.h"

namespace trident {

std::unique_ptr<Model> make_model(const Config& cfg) {
  if (cfg.model.arch == "gpt") return std::make_unique<GptModel>(cfg.model, chunk_layers(cfg));
  // Mixtral and Qwen's MoE models are Llama's decoder with a mixture of experts in every layer (NOTE [MoE block]
  // in models/llama/llama.cpp, NOTE [Llama-decoder families] in models/llama/llama_rules.cpp).
  if (llama_decoder(cfg.model.arch)) return std::make_unique<LlamaModel>(cfg.model, chunk_layers(cfg));
  throw ModelInputError("model.arch = \"" + cfg.model.arch + "\": unknown model (known: gpt, llama, mixtral, qwen2_moe, qwen3_moe, deepseek_v3)");
}

bool same_family(const ModelConfig& a, const ModelConfig& b) { return a.arch == b.arch; }

namespace {

// config.json's model_type, or "" when absent.
std::string hf_model_type(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!std::filesystem::exists(path)) throw ModelInputError(dir + " is not a Hugging Face model: no config.json");
  const json::Value c = json::parse(read_file(path), path);
  const json::Value* t = json::find(c, "model_type");
  return t ? json::as_string(*t, path + " model_type") : "";
}

}  // namespace

void init_from_pretrained(const Config& cfg, const std::vector<std::vector<Param>*>& stage_params) {
  if (cfg.model.arch == "gpt") {
    const HfGpt2 hf = read_hf_gpt2(cfg.model.init_from);  // once, for all stages
    for (std::vector<Param>* params : stage_params) init_from_hf(hf, cfg.model, *params);
    return;
  }
  if (llama_decoder(cfg.model.arch)) {
    const HfLlama hf = read_hf_llama(cfg.model.init_from);
    for (std::vector<Param>* params : stage_params) init_from_hf_llama(hf, cfg.model, *params);
    return;
  }
  throw ModelInputError("model.init_from: no pretrained format for model.arch = \"" + cfg.model.arch + "\"");
}

namespace {

// config.json through the rules every training config passes (ranges, sizes,
// the family's and the TP plan's shapes): a model that arrives for eval or
// generate is checked like one that trains.
Pretrained checked(Pretrained p, const std::string& dir) {
  Config c;
  c.model = p.model;
  c.source = dir + "/config.json";
  check_model_config(c, model_families());
  return p;
}

}  // namespace

Pretrained read_pretrained_config(const std::string& dir) {
  const std::string type = hf_model_type(dir);
  if (llama_decoder(type)) {
    HfLlama hf = read_hf_llama_config(dir);
    return checked({hf.model, hf.tokenizer}, dir);
  }
  if (type == "gpt2" || type.empty()) {  // GPT-2 files of older tools have no model_type
    HfGpt2 hf = read_hf_gpt2_config(dir);
    return checked({hf.model, hf.tokenizer}, dir);
  }
  throw ModelInputError(dir + "/config.json: model_type = \"" + type + "\"; Trident reads \"gpt2\", \"llama\", \"mixtral\", \"qwen2_moe\", \"qwen3_moe\" and \"deepseek_v3\"");
}

int export_checkpoint(const std::string& checkpoint, const std::string& format, const std::string& out,
                      int64_t shard_bytes) {
  const ckpt::Reader r(checkpoint);
  const Config c = parse_config(r.meta().config_toml, r.step_dir() + "/manifest.json (config)");
  std::string want = c.model.arch == "gpt" ? "hf-gpt2" : "hf-" + c.model.arch;  // hf-qwen2-moe, not hf-qwen2_moe
  std::replace(want.begin(), want.end(), '_', '-');
  if (format != want)
    throw ModelInputError("--format " + format + ": the checkpoint holds a model.arch = \"" + c.model.arch +
                             "\" model; export it with --format " + want);
  if (shard_bytes > 0 && format == "hf-gpt2")
    throw ModelInputError("--shard-mb: only the Llama-decoder formats (hf-llama, hf-mixtral, hf-qwen2-moe, hf-qwen3-moe, hf-deepseek-v3) "
                          "write sharded safetensors");
  auto full = [&](const ParamInfo& info) {
    at::Tensor t = at::zeros(info.full_shape, at::kFloat);
    ckpt::load_param(r, info.name, info, t);
    return t;
  };
  if (format != "hf-gpt2") return write_hf_llama(out, c.model, c.data.tokenizer, full, shard_bytes);
  int n = 0;
  write_hf_gpt2(out, c.model, c.data.tokenizer, [&](const ParamInfo& info) {
    ++n;
    return full(info);
  });
  return n;
}

}  // namespace trident
