// Llama's config rules (NOTE [config tables] in core/config.h): pure C++, for the
// config checks of every command (models/families.h lists the families).
#pragma once

#include <string>

#include "core/config.h"

namespace trident {

// model.arch = "llama": the SwiGLU width set, no dropout, whole key/value heads
// per tensor-parallel rank, an even head width for rotary embeddings, and the
// rope keys only with the rope_scaling that reads them.
ModelFamilyRules llama_family();

// model.arch = "mixtral": Llama's attention with a mixture of SwiGLU experts
// in every layer (NOTE [MoE keys], NOTE [MoE block] in models/common/moe_layer.h): Llama's
// rules, and the experts not split over tensor-parallel ranks.
ModelFamilyRules mixtral_family();
// model.arch = "qwen2_moe" and "qwen3_moe": the same with Qwen's attention and
// MoE (NOTE [Llama-decoder MoE families] in llama_rules.cpp).
ModelFamilyRules qwen2_moe_family();
ModelFamilyRules qwen3_moe_family();
// model.arch = "deepseek_v3": multi-head latent attention and DeepSeek-V3's
// router and shared experts (NOTE [MLA keys] in llama_rules.cpp).
ModelFamilyRules deepseek_v3_family();

// Whether model.arch (or a config.json's model_type) is one of the families
// built on Llama's decoder: llama, mixtral, qwen2_moe, qwen3_moe, deepseek_v3.
bool llama_decoder(const std::string& arch);

}  // namespace trident
