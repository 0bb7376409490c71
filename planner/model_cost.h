// FLOPs, parameters and activation memory of a GPT-2 or Llama-decoder model
// (pure): the closed forms the planner's step model is built from. Each reads
// the model's keys and its family's features (NOTE [model features] in
// core/config.h, handed in with the Problem): GPT-2's block where
// features.gated_mlp is false (LayerNorms, biases, a position table), else
// Llama's decoder with what its family adds.
#pragma once

#include <cstdint>
#include <string>

#include "core/activation_memory.h"
#include "core/config.h"

namespace trident::plan {

// NOTE [planned experts]
// The planner prices a mixture of experts as one mean layer, as it prices every layer alike:
// compute by the parameters a token passes (its top-k experts, the shared expert, the router;
// DeepSeek-V3's "activated" parameters), memory by all of them (every expert), each averaged
// over the dense first layers (model.moe_first_dense) and the MoE ones. Under tp > 1 the experts
// are split over tp as the dense MLP (parallel.etp = tp, the default, NOTE [experts under tensor
// parallelism] in parallel/token_dispatcher.h): compute and memory divide by tp like the rest of
// the layer, and its TP reductions are priced as a dense layer's (routed and shared parts reduced
// once, as the MLP's; Qwen2-MoE's gated shared expert adds one more, left out). The search tries
// tp > 1 for MoE only with --moe-tp (many more layouts fit, each with tp times the micro-batches
// of tp = 1 to simulate); --layout evaluates any tp and etp (etp=N, a divisor of tp). With etp = 1
// (tried beside etp = tp under --moe-tp) every expert stays whole and the ep group takes the tp
// ranks too: expert memory divides by ep alone, each tp rank dispatches 1/tp of the tokens, and
// the tp reductions are priced as at etp = tp (an upper bound). Expert parallelism: NOTE [planned
// expert parallelism] in planner/step.cpp. MLA (deepseek_v3) is priced by its projections and heads.
struct MlpShape {
  double moe_share = 0;      // the share of the layers whose MLP is a mixture of experts
  double dense_width = 0;    // model.ffn_hidden: the dense layers' SwiGLU width
  double experts = 0, top_k = 0, expert_width = 0, shared_width = 0;
  double router_rows = 0;    // the router's rows (and the shared experts' gate: features.shared_expert_gate)
};
MlpShape mlp_shape(const ModelConfig& m, const ModelFeatures& f);
// The attention's weight-matrix parameters of one layer (MLA: its down and up projections and o).
double attention_matrix_params(const ModelConfig& m);
// Forward FLOPs of attention's Q K^T and P V per token and token of context, over the full square:
// 2 x 2 hidden (MLA: 2 x heads x (q/k + v) widths).
double attention_width(const ModelConfig& m);

// FLOPs of one micro-batch (b sequences of s tokens) through one transformer
// layer, the whole layer (divide by tp for one rank's share).
struct LayerFlops {
  double matmul = 0;     // forward FLOPs of the weight GEMMs: 2 * b*s * (matrix parameters of the layer)
  double attention = 0;  // forward FLOPs of Q K^T and (softmax) V: 4 * b * s^2 * h (the full square, as
                         // Narayanan et al. 2021 count it; a causal kernel could skip half)
  double forward() const { return matmul + attention; }
  // Backward, input-gradient part (I): one GEMM per weight GEMM, and twice the attention core (it has no weights).
  double input_grad() const { return matmul + 2 * attention; }
  double weight_grad() const { return matmul; }  // W: one GEMM per weight GEMM
};
LayerFlops layer_flops(const ModelConfig& m, const ModelFeatures& f, int64_t micro_batch);

// Forward FLOPs of the LM head of one micro-batch: 2 * b*s * h * padded vocabulary (backward: I and W as much).
double head_flops(const ModelConfig& m, int64_t micro_batch, int64_t tp);

// FLOPs of one training step of `samples` sequences: forward + backward of
// every layer and the head, plus the extra forward of the recomputed part
// ("none": nothing, "full": every layer, "selective": the attention core).
// With recompute = "full" and a GPT model this equals Narayanan et al. 2021's
// 96 B s l h^2 (1 + s/6h + V/16lh).
double step_flops(const ModelConfig& m, const ModelFeatures& f, int64_t samples, const std::string& recompute,
                  int64_t tp = 1);

// Parameters, as one rank of a tp-way tensor-parallel layout holds them.
struct ParamCounts {
  int64_t layer = 0;       // one transformer layer (its tp shard plus the replicated norms and row biases)
  int64_t layer_experts = 0;  // of which the routed experts this rank holds (a mean layer: NOTE [planned experts])
  int64_t embedding = 0;   // word (vocab-parallel shard) and, for gpt, position embeddings: the first stage
  int64_t head = 0;        // the last stage: final norm, and the LM head's own copy of the word embedding
                           // (gpt and tied llama: a copy only when pp > 1; untied llama: its own matrix)
};
// ep > 1: each rank holds model.experts / ep of every MoE layer's routed experts.
// ep: the experts' share is 1 / ep of them; etp (0: tp): the ranks each expert is split over.
ParamCounts param_counts(const ModelConfig& m, const ModelFeatures& f, int64_t tp, bool pipelined, int64_t ep = 1,
                         int64_t etp = 0);
int64_t total_params(const ModelConfig& m, const ModelFeatures& f);  // the model's distinct parameters (tp = pp = 1)

// layer_activation_bytes (NOTE [activation memory]) is in core/activation_memory.h:
// the trainer's host-memory check counts activations with it too, from the same features.

}  // namespace trident::plan
