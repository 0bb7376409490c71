// The mixture-of-experts layer the MoE families share (Mixtral, Qwen-MoE,
// DeepSeek-V3), beside the dense MLP: the router that picks each token's top-k
// experts, the routed experts (SwiGLU) run on the tokens sorted by expert, and
// the balancing losses. Expert parallelism drops in between `dispatch` and
// `combine`: the expert computation takes the rows routed to the local experts,
// wherever they came from (ARCHITECTURE.md, "Where the coming pieces go").
// Shapes: tokens T = batch x seq flattened, hidden H, experts E, top-k K,
// expert width I.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace trident {

struct Group;  // parallel/process_groups.h

struct EpContext;  // parallel/expert_parallel.h

// NOTE [MoE router]
// logits = x gateᵀ in fp32; scores = softmax(logits) or sigmoid(logits). The
// experts are chosen by scores + bias (the score-correction bias of DeepSeek-V3's
// aux-loss-free balancing: it chooses experts and never weights them), within
// the topk_group best of n_group groups when grouped (a group's score is the
// sum of its two best experts', as DeepSeek-V3 and transformers'
// DeepseekV3TopkRouter rank groups). The weights are the chosen experts' scores,
// renormalised to sum 1 when norm_topk_prob (sigmoid scores: over their sum +
// 1e-20, as transformers), then times routed_scaling_factor. softmax_after_topk
// takes the softmax over the K chosen logits only (Megatron's
// moe_router_pre_softmax = false; mathematically the renormalised softmax).
// Ties break deterministically, to the lower expert (group) index, the same on
// every rank: the choice is a stable descending sort, not at::topk, whose order
// among equal values the kernels do not promise.
//
// NOTE [expert bias]
// The score-correction bias (model.moe_expert_bias) is a parameter of the
// model (layers.i.moe.router.bias, fp32, zeros at init, no weight decay), so
// checkpoints, resharding, --init-from and export carry it; route() reads it
// detached, so it never has a gradient and AdamW leaves it bit for bit (zero
// moments give a zero update). What moves it is model.moe_bias_update_rate's
// update, once per step (NOTE [expert bias update] in models/llama/llama.cpp).
struct RouterOptions {
  int64_t experts = 8;
  int64_t top_k = 2;
  std::string score = "softmax";  // "softmax" | "sigmoid"
  bool softmax_after_topk = false;
  bool norm_topk_prob = true;
  int64_t n_group = 1;     // groups of experts (1: no group limit)
  int64_t topk_group = 1;  // groups a token may choose from
  double routed_scaling_factor = 1.0;
  // NOTE [expert capacity]: > 0 caps each expert's assignments per call; 0 = none.
  double capacity_factor = 0.0;
  bool drop_by_position = false;  // past capacity drop the latest tokens, else the lowest weights
};

// Throws std::invalid_argument naming the option when the options cannot route
// (top-k above the experts, groups not dividing the experts, topk_group above
// n_group, an unknown score function).
void check_router_options(const RouterOptions& o);

struct Routing {
  at::Tensor logits;   // (T, E) fp32
  at::Tensor scores;   // (T, E) fp32: softmax or sigmoid of the logits, what the aux losses read
  at::Tensor experts;  // (T, K) int64: chosen experts, best first
  at::Tensor weights;  // (T, K) fp32: their weights
  // What the balancing losses read (NOTE [MoE balancing losses]): the scores (sigmoid ones
  // normalised per token) and their own top-k, without the bias or the group limit.
  at::Tensor aux_scores;   // (T, E) fp32
  at::Tensor aux_experts;  // (T, K) int64: `experts` itself when nothing but the scores chose
};

// x (T, H), gate (E, H); bias undefined or (E) fp32.
Routing route(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& bias, const RouterOptions& o);

// NOTE [MoE dispatch]
// The T x K (token, slot) assignments sorted by expert, stably (within an
// expert, in token order): row j of the sorted rows is token `token[j]`'s
// assignment `slot[j]`. counts[e] rows go to expert e, contiguously, so each
// expert's rows are one GEMM. `combine` scatters the expert outputs back, each
// times its weight, summed per token (index_add in the sorted order: the same
// order, hence the same bits, in every layout).
struct Dispatch {
  at::Tensor order;   // (T*K) int64: flat index t*K + k of each sorted row
  at::Tensor token;   // (T*K) int64: the token of each sorted row
  at::Tensor counts;  // (E) int64: rows per expert
};
// `keep` (T, K) bool, when defined: only the kept assignments are dispatched
// (NOTE [expert capacity]); the others contribute nothing to combine.
Dispatch dispatch(const at::Tensor& experts, int64_t num_experts, const at::Tensor& keep = at::Tensor());

// NOTE [expert capacity]
// With capacity_factor c > 0 each expert takes at most ceil(T·K / E · c) of
// the T·K assignments routed in one call (Megatron's get_capacity over
// num_tokens × top-k): on one rank, one layer, one micro-batch, so under data
// and expert parallelism every rank drops among its own tokens only, before
// any dispatch, and ep changes nothing of which are dropped. Past capacity an
// expert keeps the assignments with the highest weights (ties to the earlier
// token) or, by position, the earliest tokens; a dropped assignment adds
// nothing to its token (the kept weights are not renormalised, as Megatron),
// and the balancing losses read the routing before dropping. Returns (T, K)
// bool: the kept assignments.
at::Tensor keep_within_capacity(const Routing& r, const RouterOptions& o);
// x (T, H) -> (T*K, H): each sorted row's token.
at::Tensor permute(const at::Tensor& x, const Dispatch& d);
// rows (T*K, H), weights (T, K) -> (T, H): Σ_k weight · row.
at::Tensor combine(const at::Tensor& rows, const at::Tensor& weights, const Dispatch& d, int64_t tokens);

// The routed experts as SwiGLU on sorted rows: for expert e's rows r,
// down_e(silu(gate_e r) ⊙ up_e r). gate, up (E, I, H); down (E, H, I). One
// grouped GEMM per projection where libtorch has one for the device (CUDA:
// at::_grouped_mm, no host read, when the widths are 16-byte aligned), else one GEMM per expert over its contiguous
// rows (the counts read once on the host; the CPU has no such cost). Never a
// loop over tokens. Either way the weight gradients defer to a zero-bubble W
// (NOTE [grouped experts] in moe.cpp).
at::Tensor experts_swiglu(const at::Tensor& rows, const at::Tensor& counts, const at::Tensor& gate,
                          const at::Tensor& up, const at::Tensor& down);
// The grouped-GEMM path on any device libtorch has at::_grouped_mm for (the
// CPU too, where the tests compare it with the per-expert GEMMs): fp32, bf16 or
// fp16 rows, expert widths whose rows are 16-byte aligned (grouped_experts_fit),
// else std::invalid_argument.
bool grouped_experts_fit(const at::Tensor& rows, const at::Tensor& gate);
at::Tensor experts_swiglu_grouped(const at::Tensor& rows, const at::Tensor& counts, const at::Tensor& gate,
                                  const at::Tensor& up, const at::Tensor& down);

// A dense SwiGLU MLP (a shared expert): down(silu(gate x) ⊙ up x).
at::Tensor swiglu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down);

// One MoE layer's weights. Shared experts: shared_gate/up/down undefined when
// the layer has none; shared_expert_gate (1, H) undefined unless a sigmoid of
// x gates them (Qwen2-MoE). bias undefined without the correction bias.
struct MoeWeights {
  at::Tensor router;              // (E, H)
  at::Tensor bias;                // (E) fp32
  at::Tensor gate, up, down;      // (E, I, H), (E, I, H), (E, H, I)
  at::Tensor shared_gate, shared_up, shared_down;  // (S, H), (S, H), (H, S)
  at::Tensor shared_expert_gate;  // (1, H)
};
struct MoeOutput {
  at::Tensor y;  // (T, H)
  // False: y is this rank's part of a sum over the tp group (EpContext::caller_reduces with the
  // experts split over tp, NOTE [experts under tensor parallelism]), the caller's to reduce.
  bool reduced = true;
  Routing routing;
  at::Tensor counts;  // (E) int64: the rows each expert received (the dispatch's)
  int64_t assignments = 0;  // the (token, slot) pairs that dispatch routed before dropping
};
// NOTE [experts under tensor parallelism]
// Under tp > 1 the layer's input x is the whole micro-batch on every rank of
// the tp group (under sequence parallelism the caller gathers its slices
// first, each rank keeping its own slice's gradient, and slices or reduce-
// scatters the output again). Every tp rank routes every token alike (the router and the
// balancing losses are replicated, their gradients equal on every rank), so
// which tokens are dropped and which experts they choose is tp = 1's. Then,
// with parallel.etp (NOTE [expert grid] in parallel/layout.h):
//  - etp = tp (the default, Megatron's): each expert is split over the tp
//    ranks along its width as the dense MLP (gate and up by rows, down by
//    columns); every rank runs every routed row on its part and the parts of
//    the combined output are summed over tp. The rows and their weights enter
//    as copy_to_tp does (the gradients of both are sums of the parts').
//  - etp = 1: whole experts; tp rank r takes the r-th of tp equal slices of
//    the tokens (their rows and weights; the gradients of the other slices
//    are gathered back, so every rank's router sees all of them) into the
//    experts, and its slice's outputs are gathered over tp. The tp ranks are
//    then ep places of their own: the expert all-to-all folds over them.
//  - 1 < etp < tp: both at once. tp index t is part t mod etp of token slice
//    t / etp: the tp / etp slices (EpContext::token_slices) as at etp = 1,
//    each slice's rows into experts split over its etp ranks
//    (EpContext::expert_tp) as at etp = tp; a slice's outputs are summed over
//    its etp ranks, then the slices gathered.
// The shared experts are split over tp as the dense MLP. With the experts
// split over all of tp, the routed and the shared parts are summed on each rank first and
// reduced once (the caller's reduce-scatter under sequence parallelism, as
// Megatron's; else one all-reduce), but for Qwen2-MoE's sigmoid-gated shared
// expert, whose gate must read the whole shared output. The expert loads a
// layer counts are its dispatch's: its slice's on each of the slice's etp ranks
// (the world's sums the trainer reads are then etp times the loads, which only
// their ratios and signs use).
//
// x (T, H): route, dispatch, the experts on the sorted rows, combine, plus the
// shared experts. Under expert parallelism (`ep` given, of size > 1) w.gate,
// w.up and w.down hold this rank's E / ep experts, and the sorted rows go to
// the ranks of their experts and back between dispatch and combine (NOTE
// [expert dispatch] in parallel/expert_parallel.h).
MoeOutput moe_forward(const at::Tensor& x, const MoeWeights& w, const RouterOptions& o,
                      const EpContext* ep = nullptr);

// NOTE [MoE balancing losses] (each returned without its coefficient)
// switch_aux_loss: Switch Transformer / GShard, as Megatron's aux_loss:
//   E / (K T²) · Σ_e (Σ_t p[t, e]) · count_e,
// p the softmax scores, or the sigmoid scores over their sum per token (+1e-20),
// count_e the tokens whose top-K of p holds e: without the score-correction
// bias or the group limit, which choose the experts the tokens go to (DeepSeek-
// V3's f_i and P_i, eq. 17-19 of its report; megatron-core's
// compute_routing_scores_for_aux_loss).
// seq_aux_loss: the same per sequence (DeepSeek-V3's sequence-wise loss,
//   Megatron's seq_aux_loss), averaged over the batch's sequences; x's tokens
//   are `seqs` sequences of T / seqs tokens each.
// z_loss: ST-MoE's router z-loss, mean over tokens of logsumexp(logits)².
// pooled_aux_loss: transformers' load_balancing_loss_func over several layers'
//   logits: the softmax top-K counts and the probabilities summed over every
//   layer and token, each divided by layers x T, then E · Σ_e count_e · prob_e
//   (one product of pooled means, not a sum of per-layer losses).
//
// NOTE [balancing losses under context parallelism]
// With `cp` (a context-parallel group of n > 1 ranks), r holds this rank's
// T tokens of sequences split over n ranks (NOTE [context split]): the
// counts are summed over the group (they carry no gradient) and each rank
// returns E / (K n T²) · Σ_e (Σ_t scores[t, e]) · count_e over its own scores,
// n times its share of the whole sequences' loss, so that the n ranks'
// gradients, averaged over dp x cp as the LM loss's are, give each score its
// gradient in the whole sequences' loss; and their values, summed over the
// group and divided by n, are the whole sequences' loss. Per sequence
// likewise for seq_aux_loss. z_loss, a mean over tokens, needs nothing: each
// rank holds as many tokens.
at::Tensor switch_aux_loss(const Routing& r, int64_t top_k, const Group* cp = nullptr);
at::Tensor seq_aux_loss(const Routing& r, int64_t top_k, int64_t seqs, const Group* cp = nullptr);
at::Tensor z_loss(const Routing& r);
at::Tensor pooled_aux_loss(const std::vector<at::Tensor>& layer_logits, int64_t top_k);

// NOTE [pooled aux loss]
// model.moe_aux_loss = "pooled_aux_loss" trains with transformers' objective
// (pooled_aux_loss above, MixtralForCausalLM's aux_loss with
// router_aux_loss_coef): over a micro-batch of T tokens and the model's N MoE
// layers, L = E / (N T)² · Σ_e C_e · S_e, C_e the assignments to expert e
// summed over every layer (pooled_counts), S_e its softmax scores summed over
// every layer and token. Only S carries a gradient, so L's gradient in a score
// of layer l is E / (N T)² · C_e for every token: each layer's backward needs
// the counts of all the model's layers, which sit on every pipeline stage. The
// counts travel beside the hidden state (NOTE [pipeline side values] in
// models/common/model.h): each layer adds its own during the forward, the last
// stage's sum is the micro-batch's C and goes back with the gradients, and
// attach_pooled_aux_loss gives the layer's score sums S_l (E) the gradient
// coefficient · scale · E / (N T)² · C, read from `totals` in the backward
// (Megatron's autoscaler again, with the counts filled in late). Summed over
// the layers that is L's gradient, the same on every layout (the counts are
// integers in fp32: any order of adding them is exact).
at::Tensor pooled_counts(const Routing& r);  // (E) fp32: this layer's C
at::Tensor attach_pooled_aux_loss(const at::Tensor& y, const at::Tensor& score_sums, const at::Tensor& totals,
                                  double factor);

// NOTE [aux loss in the backward]
// A balancing loss lives in its layer, on any pipeline stage, but only the last
// stage's loss starts the backward. attach_aux_loss(y, aux, scale) returns y
// unchanged (an alias, no copy) and, in the backward, gives `aux` the gradient
// `scale` beside y's own gradient, so the loss's gradient reaches its layer's
// router under every schedule, in the same backward action as the layer
// (Megatron's MoEAuxLossAutoScaler). `scale` is the coefficient over the number
// of micro-batches, as the LM loss is scaled; `aux` must be a scalar.
at::Tensor attach_aux_loss(const at::Tensor& y, const at::Tensor& aux, double scale);

}  // namespace trident
