// Model registry: see registry.h.
#include "models/registry.h"

#include <stdexcept>

#include "models/gpt/gpt.h"
#include "models/gpt/hf_gpt2.h"

namespace trident {

std::unique_ptr<Model> make_model(const Config& cfg) {
  if (cfg.model.arch == "gpt") return std::make_unique<GptModel>(cfg.model, cfg.parallel.pipeline_layers);
  throw std::runtime_error("model.arch = \"" + cfg.model.arch + "\": unknown model (known: gpt)");
}

void init_from_pretrained(const Config& cfg, const std::vector<std::vector<Param>*>& chunks) {
  if (cfg.model.arch != "gpt")
    throw std::runtime_error("model.init_from: no pretrained format for model.arch = \"" + cfg.model.arch + "\"");
  const HfGpt2 hf = read_hf_gpt2(cfg.model.init_from);  // once, for all chunks
  for (std::vector<Param>* params : chunks) init_from_hf(hf, cfg.model, *params);
}

}  // namespace trident
