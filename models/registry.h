// The one place a model family is chosen by name (model.arch): the trainer
// asks for a Model and never names a particular one.
#pragma once

#include <memory>

#include "framework/config.h"
#include "schedules/stage.h"

namespace trident {

// The model of `cfg.model.arch`, split by `cfg.parallel.pipeline_layers`.
// Throws std::runtime_error for an unknown arch.
std::unique_ptr<Model> make_model(const Config& cfg);

}  // namespace trident
