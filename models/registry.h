// The one place a model family is chosen by name (model.arch): the trainer
// asks for a Model and never names a particular one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "models/common/model.h"

namespace trident {

// The model of `cfg.model.arch`, split by chunk_layers(cfg) (core/pipeline_layout.h).
// Throws std::runtime_error for an unknown arch.
std::unique_ptr<Model> make_model(const Config& cfg);

// Whether two models are of the same family (model.arch): the registry is where families are told
// apart by name.
bool same_family(const ModelConfig& a, const ModelConfig& b);

// `model.init_from`: fills this rank's parameters of every chunk (its TP
// slices, tied copies included) from the pretrained model in cfg.model.init_from
// (a Hugging Face GPT-2 directory for "gpt", a Llama one for "llama"). Throws
// naming the file, key or tensor that does not fit.
void init_from_pretrained(const Config& cfg, const std::vector<std::vector<Param>*>& stage_params);

// The model a Hugging Face directory holds (config.json's model_type: "gpt2"
// or "llama") and the tokenizer it records.
struct Pretrained {
  ModelConfig model;
  std::string tokenizer;
};
Pretrained read_pretrained_config(const std::string& dir);

// `trident export`: the model of a checkpoint (any layout) to `out` in
// `format` ("hf-gpt2" for gpt, "hf-llama" for llama; shard_bytes > 0 shards
// a Llama's safetensors). Returns the number of tensors written; throws when
// the format does not fit the checkpoint's model.
int export_checkpoint(const std::string& checkpoint, const std::string& format, const std::string& out,
                      int64_t shard_bytes = 0);

}  // namespace trident
