// GPT's config rules (NOTE [config tables] in core/config.h): pure C++, for the
// config checks of every command (models/families.h lists the families).
#pragma once

#include "core/config.h"

namespace trident {

// model.arch = "gpt": the Llama keys it does not read are refused.
ModelFamilyRules gpt_family();

}  // namespace trident
