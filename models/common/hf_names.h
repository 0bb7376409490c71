// Which tensors of a Hugging Face checkpoint a family reads: a name the family
// does not read, or a layer beyond the config's count, is an error (a file of
// another architecture, or a config.json cut short) instead of being ignored.
#pragma once

#include <cstdint>
#include <set>
#include <string>

namespace trident {

struct HfNames {
  std::string family;            // "GPT-2", "Llama": named in the error
  std::string layer_prefix;      // "h.", "model.layers.": then the layer index and '.'
  std::string layers_key;        // config.json's layer count: "n_layer", "num_hidden_layers"
  std::set<std::string> top;     // names outside the layers
  std::set<std::string> block;   // names inside a layer, after "<prefix><i>."
};

// Throws naming `file`, the tensor and the problem unless `name` is one of
// `names` with a layer index below `layers`.
void check_hf_name(const std::string& name, const HfNames& names, int64_t layers, const std::string& file);

}  // namespace trident
