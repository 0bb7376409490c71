// Activation memory of one transformer layer (pure, closed form): shared by the
// planner's step model and the trainer's host-memory check (NOTE [size checks]
// in core/config_rules.h), so both count the same tensors.
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"

namespace trident {

// NOTE [activation memory]
// Bytes one layer keeps for its backward, per micro-batch of b sequences, on
// one rank. Korthikanti et al. 2022 (arXiv 2205.05198), Sec. 4, count for a
// GPT layer in 16-bit with dropout s*b*h*(34 + 5 a s / h) bytes: attention
// 11 sbh + 5 a s^2 b, MLP 19 sbh, the two LayerNorms 4 sbh; with tensor
// parallelism s*b*h*(10 + 24/t + 5 a s/(h t)), and with sequence parallelism
// everything divided by t; full recomputation keeps only the layer input,
// 2 sbh (divided by t with SP); selective recomputation drops the 5 a s^2 b
// attention term. Here the same tensors are counted in elements and
// multiplied by elem_bytes, so Trident's fp32 path (elem_bytes = 4) doubles
// every term but the dropout masks (1 byte per element), which exist only
// with dropout > 0; without dropout the attention keeps its softmax output
// once (a s^2 b elements) instead of softmax output, dropout output and mask.
// Both keep q, k, v (k and v at kv_heads * head_dim) and the output
// projection's input; a gated MLP (NOTE [model features], Llama's SwiGLU)
// keeps four ffn-wide tensors (gate, up, silu(gate), their product) where
// GPT's keeps two (fc1's output, the GELU's). Under context parallelism (cp
// > 1) a rank keeps its s / cp tokens of each sequence, each attending over
// the whole sequence: every term divides by cp (Megatron's formula with CP).
// MLA keeps its latents and its heads' q, k, v at their own widths; a mixture
// of experts, per token, its k sorted rows and their outputs, each row's four
// expert-wide tensors, the shared expert's and the router's scores, averaged
// with the dense first layers (NOTE [planned experts] in planner/model_cost.h).
double layer_activation_bytes(const ModelConfig& m, const ModelFeatures& shape, int64_t micro_batch, int64_t tp,
                              bool sequence_parallel, const std::string& recompute, int elem_bytes, int64_t cp = 1);

}  // namespace trident
