// The model families a config may name (model.arch), each with its config
// rules: the families' part of the config tables (NOTE [config tables] in
// core/config.h). Pure C++: the config checks of every command use it, with or
// without libtorch.
#pragma once

#include <vector>

#include "core/config.h"

namespace trident {

const std::vector<ModelFamilyRules>& model_families();

}  // namespace trident
