// The balancing losses of an MoE layer, read from its routing
// (models/common/router.h), and how they join the backward from any pipeline
// stage. Each loss is returned without its coefficient.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "models/common/router.h"

namespace trident {

struct Group;  // parallel/process_groups.h

// NOTE [MoE balancing losses]
// switch_aux_loss: Switch Transformer / GShard, as Megatron's aux_loss:
//   E / (K T²) · Σ_e (Σ_t p[t, e]) · count_e,
// p the softmax scores, or the sigmoid scores over their sum per token (+1e-20),
// count_e the tokens whose top-K of p holds e: without the correction bias or
// the group limit (DeepSeek-V3's f_i and P_i, eq. 17-19 of its report;
// megatron-core's compute_routing_scores_for_aux_loss).
// seq_aux_loss: the same per sequence (DeepSeek-V3's sequence-wise loss),
//   averaged over the `seqs` sequences of T / seqs tokens each.
// z_loss: ST-MoE's router z-loss, mean over tokens of logsumexp(logits)².
// pooled_aux_loss: transformers' load_balancing_loss_func over several layers'
//   logits: pooled_loss of the softmax top-K counts C and score sums S summed
//   over every layer and token, rows = layers x T (one product of pooled
//   sums, not a sum of per-layer losses).
at::Tensor switch_aux_loss(const Routing& r, int64_t top_k, const Group* cp = nullptr, const at::Tensor& real = {});
at::Tensor seq_aux_loss(const Routing& r, int64_t top_k, int64_t seqs, const Group* cp = nullptr,
                        const at::Tensor& real = {});
at::Tensor z_loss(const Routing& r, const Group* cp = nullptr, const at::Tensor& real = {});
at::Tensor pooled_aux_loss(const std::vector<at::Tensor>& layer_logits, int64_t top_k);

// NOTE [balancing losses over real tokens]
// `real` (T) fp32, 1 on a real token and 0 on padding (NOTE [document counts] in
// datasets/step_batches.h), or undefined (every token real): each sum over tokens above
// (scores, counts, z) weighs a token by it and T becomes the real tokens' number (per
// sequence for seq_aux_loss), so the losses are those of the real tokens alone, as
// transformers' load_balancing_loss_func takes them with an attention_mask. Under context
// parallelism that number is the group's (summed with the counts; z_loss likewise: its
// ranks hold unequal numbers), each rank returning n times its share as below.

// NOTE [balancing losses under context parallelism]
// With `cp` (a context-parallel group of n > 1 ranks) r holds this rank's T
// tokens of sequences split over n ranks (NOTE [context split]): the counts
// are summed over the group (they carry no gradient) and each rank returns
// E / (K n T²) · Σ_e (Σ_t scores[t, e]) · count_e over its own scores: n
// times its share of the whole sequences' loss, so the n ranks' gradients,
// averaged over dp x cp as the LM loss's are, give each score its gradient in
// the whole sequences' loss, and their values summed over the group and
// divided by n are that loss. Per sequence likewise for seq_aux_loss. z_loss,
// a mean over tokens, needs nothing: each rank holds as many tokens.

// NOTE [pooled aux loss]
// model.moe_aux_loss = "pooled_aux_loss" trains with transformers' objective
// (MixtralForCausalLM's aux_loss): over a micro-batch of T tokens and the N MoE
// layers, L = pooled_loss(C, S, N T) = E / (N T)² · Σ_e C_e · S_e, C_e the
// assignments to expert e summed over every layer (pooled_counts), S_e its
// softmax scores summed over every layer and token. Only S carries a gradient:
// L's gradient in a score of any layer is E / (N T)² · C_e, which needs every
// layer's counts. They travel beside the hidden state (NOTE [pipeline side
// values] in models/common/model.h): each layer adds its own in the forward,
// the last stage's sum is C and comes back with the gradients, and
// attach_pooled_aux_loss gives each layer's S_l the gradient
// pooled_loss_factor(coefficient · scale, E, N T) · C, read in the backward
// (the counts are integers in fp32: any order of adding them is exact).
// (E) fp32: this layer's C; with `real`, of the real tokens (NOTE [balancing losses over real tokens]).
at::Tensor pooled_counts(const Routing& r, const at::Tensor& real = {});
// E / rows² · Σ_e counts_e · score_sums_e.
at::Tensor pooled_loss(const at::Tensor& counts, const at::Tensor& score_sums, double rows);
// scale · E / rows²: the pooled loss's gradient in a score sum per count, times scale.
double pooled_loss_factor(double scale, int64_t experts, double rows);
at::Tensor attach_pooled_aux_loss(const at::Tensor& y, const at::Tensor& score_sums, const at::Tensor& totals,
                                  double factor);

// NOTE [aux loss in the backward]
// A balancing loss lives in its layer, on any pipeline stage, but only the last
// stage's loss starts the backward. attach_aux_loss(y, aux, scale) returns y
// unchanged (an alias, no copy) and, in the backward, gives `aux` the gradient
// `scale` beside y's own, so the loss's gradient reaches its layer's router
// under every schedule, in the same backward action as the layer (Megatron's
// MoEAuxLossAutoScaler). `scale` is the coefficient over the number of
// micro-batches, as the LM loss is scaled; `aux` must be a scalar.
at::Tensor attach_aux_loss(const at::Tensor& y, const at::Tensor& aux, double scale);

}  // namespace trident
