#include "models/families.h"

#include "models/gpt/gpt_rules.h"
#include "models/llama/llama_rules.h"

namespace trident {

const std::vector<ModelFamilyRules>& model_families() {
  static const std::vector<ModelFamilyRules> families = {gpt_family(), llama_family(), mixtral_family(), qwen2_moe_family(),
                                                                qwen3_moe_family(), deepseek_v3_family()};
  return families;
}

}  // namespace trident
