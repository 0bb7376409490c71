#include "models/families.h"

#include "models/gpt/gpt_rules.h"
#include "models/llama/llama_rules.h"

namespace trident {

const std::vector<ModelFamilyRules>& model_families() {
  static const std::vector<ModelFamilyRules> families = [] {
    std::vector<ModelFamilyRules> all = {gpt_family()};
    for (ModelFamilyRules& f : llama_decoder_families()) all.push_back(std::move(f));
    return all;
  }();
  return families;
}

}  // namespace trident
