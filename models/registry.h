// The one place a model family is chosen by name (model.arch): the trainer
// asks for a Model and never names a particular one.
#pragma once

#include <memory>
#include <vector>

#include "framework/config.h"
#include "models/model.h"

namespace trident {

// The model of `cfg.model.arch`, split by `cfg.parallel.pipeline_layers`.
// Throws std::runtime_error for an unknown arch.
std::unique_ptr<Model> make_model(const Config& cfg);

// `model.init_from`: fills this rank's parameters of every chunk (its TP
// slices, tied copies included) from the pretrained model in cfg.model.init_from
// (a Hugging Face GPT-2 directory for "gpt"). Throws naming the file, key or
// tensor that does not fit.
void init_from_pretrained(const Config& cfg, const std::vector<std::vector<Param>*>& chunks);

}  // namespace trident
