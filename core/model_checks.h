// A model that arrives without a training config (a Hugging Face directory, a
// checkpoint for eval or generate): the caller-error type of its files and
// arguments, and the model part of the config checks it goes through.
#pragma once

#include <stdexcept>
#include <vector>

#include "core/config.h"

namespace trident {

// A model's files or arguments that their readers refuse: a Hugging Face
// config.json or safetensors file, a checkpoint of another model, a prompt or
// sampling option of eval/generate. Names the file, tensor or option.
// launch/main.cpp maps it to exit status 2 (NOTE [exit statuses]).
class ModelInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// check_config's model part (the [model] keys' ranges, sizes, the TP plan's
// shapes) and the family's rules from `families` (NOTE [config tables]), defined
// beside it (config.cpp and the section files, config_model.cpp ...): one set of rules for every way a
// model arrives. Throws ConfigError naming c.source and the key.
void check_model_config(const Config& c, const std::vector<ModelFamilyRules>& families);

}  // namespace trident
