// Activation memory of one transformer layer (pure, closed form): shared by the
// planner's step model and the trainer's host-memory check (NOTE [size checks]
// in core/config_rules.h), so both count the same tensors.
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"

namespace trident {

// NOTE [activation memory]
// Bytes one layer keeps for its backward, per micro-batch of b sequences, on one
// rank. Korthikanti et al. 2022 (arXiv 2205.05198) Sec. 4 count s*b*h*(34 + 5 a s / h)
// for a 16-bit GPT layer with dropout (attention 11 sbh + 5 a s^2 b, MLP 19 sbh, the
// LayerNorms 4 sbh); with TP s*b*h*(10 + 24/t + 5 a s/(h t)), with SP all divided by t;
// full recomputation keeps the layer input, 2 sbh (/t with SP); selective drops 5 a s^2 b.
// Here the tensors are counted in elements times elem_bytes (fp32 doubles every term but
// the 1-byte dropout masks, which exist only with dropout > 0; without dropout attention
// keeps its softmax output once, a s^2 b elements). Both keep q, k, v (k, v at kv_heads *
// head_dim) and the output projection's input; a gated MLP (NOTE [model features]) keeps
// four ffn-wide tensors (gate, up, silu(gate), product), GPT's two. Under CP (cp > 1) a
// rank keeps s / cp tokens of each sequence: every term divides by cp. MLA keeps its
// latents and q, k, v at their own widths; MoE, per token, its k sorted rows and outputs,
// each row's four expert-wide tensors, the shared expert's and router's scores, averaged
// with the dense first layers (NOTE [planned experts] in planner/model_cost.h).
double layer_activation_bytes(const ModelConfig& m, const ModelFeatures& shape, int64_t micro_batch, int64_t tp,
                              bool sequence_parallel, const std::string& recompute, int elem_bytes, int64_t cp = 1);

}  // namespace trident
