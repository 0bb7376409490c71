#include "models/common/hf_names.h"

#include <cstdio>

#include "core/model_checks.h"

namespace trident {

void check_hf_name(const std::string& name, const HfNames& names, int64_t layers, const std::string& file) {
  if (names.top.count(name)) return;
  const std::string& pre = names.layer_prefix;
  long long layer = -1;
  int used = 0;
  if (name.compare(0, pre.size(), pre) == 0 &&
      std::sscanf(name.c_str() + pre.size(), "%lld.%n", &layer, &used) == 1 && used > 0 &&
      names.block.count(name.substr(pre.size() + static_cast<size_t>(used)))) {
    if (layer < layers) return;
    throw ModelInputError(file + ": tensor " + name + " is of layer " + std::to_string(layer) + " but config.json has " +
                          names.layers_key + " = " + std::to_string(layers) + ": expected " + names.layers_key +
                          " = the file's layer count");
  }
  throw ModelInputError(file + ": tensor " + name + " is not a " + names.family +
                        " parameter Trident reads (a file of another architecture, or a config.json that does not "
                        "describe it)");
}

}  // namespace trident
