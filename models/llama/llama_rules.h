// The config rules and features of the families built on Llama's decoder
// (NOTE [config tables] in core/config.h, NOTE [Llama-decoder families] in
// llama_rules.cpp): pure C++, for the config checks of every command
// (models/families.h lists the families) and for the decoder's code, which
// reads what a block has from its family's features.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace trident {

// llama, mixtral, qwen2_moe, qwen3_moe and deepseek_v3: each family's rules (the SwiGLU width set, no
// dropout, whole key/value heads per tensor-parallel rank, an even head width for rotary embeddings,
// the rope keys only with the rope_scaling that reads them, the keys its features read and no others)
// and its features.
std::vector<ModelFamilyRules> llama_decoder_families();

// The features of model.arch (or a config.json's model_type) where it names a Llama-decoder family,
// else nullptr.
const ModelFeatures* llama_decoder_features(const std::string& arch);
// The same for a model the decoder builds; throws std::logic_error for another family.
const ModelFeatures& llama_features(const ModelConfig& m);
bool llama_decoder(const std::string& arch);

}  // namespace trident
