// The MoE router, first of the layer's steps (models/common/moe_layer.h): each
// token's scores over the experts, the group limit, its top-k experts and their
// weights, the capacity that drops assignments past it, and the correction
// bias's update. Shapes: tokens T, hidden H, experts E, top-k K.
#pragma once

#include <ATen/core/Tensor.h>

#include "core/router_options.h"

namespace trident {

// NOTE [MoE router]
// logits = x gateᵀ in fp32; scores = softmax(logits) or sigmoid(logits). The
// experts are chosen by scores + bias (NOTE [expert bias]), within the
// topk_group best of n_group groups when grouped: a group's score is the sum
// of its two best experts' (DeepSeek-V3's ranking), its one expert's when a
// group has one. The weights are the chosen experts' scores, renormalised to
// sum 1 when norm_topk_prob (sigmoid scores: over their sum + 1e-20), then
// times routed_scaling_factor. softmax_after_topk takes the softmax over the K
// chosen logits only (Megatron's moe_router_pre_softmax = false). Ties break
// to the lower expert (group) index on every rank: the choice is a stable
// descending sort, not at::topk, whose order among equal values is unspecified.
// What can route is router_options_error()'s (core/router_options.h).

// Throws std::invalid_argument with router_options_error()'s line when the options cannot route.
void check_router_options(const RouterOptions& o);

struct Routing {
  at::Tensor logits;   // (T, E) fp32
  at::Tensor scores;   // (T, E) fp32: softmax or sigmoid of the logits
  at::Tensor experts;  // (T, K) int64: chosen experts, best first
  at::Tensor weights;  // (T, K) fp32: their weights
  // What the balancing losses read (NOTE [MoE balancing losses] in moe_losses.h): the scores
  // (sigmoid ones normalised per token) and their own top-k, without the bias or the group limit.
  at::Tensor aux_scores;   // (T, E) fp32
  at::Tensor aux_experts;  // (T, K) int64: `experts` itself when nothing but the scores chose
};

// x (T, H), gate (E, H); bias undefined or (E) fp32.
Routing route(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& bias, const RouterOptions& o);

// The k best columns of each row of `values`, best first, ties to the lower column.
at::Tensor best_columns(const at::Tensor& values, int64_t k);

// NOTE [expert capacity]
// With capacity_factor c > 0 each expert takes at most ceil(T·K / E · c) of
// the T·K assignments routed in one call (Megatron's get_capacity): on one
// rank, one layer, one micro-batch, before any dispatch, so data and expert
// parallelism change nothing of which are dropped. Past capacity an expert
// keeps the assignments with the highest weights (ties to the earlier token)
// or, by position, the earliest tokens; a dropped assignment adds nothing to
// its token (the kept weights are not renormalised, as Megatron's), and the
// balancing losses read the routing before dropping. Returns (T, K) bool: the
// kept assignments.
at::Tensor keep_within_capacity(const Routing& r, const RouterOptions& o);

// NOTE [expert bias]
// The score-correction bias (model.moe_expert_bias; DeepSeek-V3's
// auxiliary-loss-free balancing) chooses experts and never weights them. It is
// a parameter (layers.i.moe.router.bias, fp32, zeros at init, no weight decay),
// so checkpoints, resharding and export carry it; route() reads it detached,
// so it has no gradient and AdamW leaves it bit for bit (zero moments give a
// zero update). update_expert_bias() moves it, once per step, after the
// backward and before the optimizer: by rate · sign(mean load − load_e), the
// loads the tokens each expert received in the step summed over the world
// (every micro-batch, replica and stage: the same on every rank, so every
// replica's bias stays the same; megatron-core's get_updated_expert_bias).
void update_expert_bias(at::Tensor& bias, const at::Tensor& load, double rate);

}  // namespace trident
