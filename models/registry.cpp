// Model registry: see registry.h.
#include "models/registry.h"

#include <stdexcept>

#include "models/gpt/gpt.h"

namespace trident {

std::unique_ptr<Model> make_model(const Config& cfg) {
  if (cfg.model.arch == "gpt") return std::make_unique<GptModel>(cfg.model, cfg.parallel.pipeline_layers);
  throw std::runtime_error("model.arch = \"" + cfg.model.arch + "\": unknown model (known: gpt)");
}

}  // namespace trident
