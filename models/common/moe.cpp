// The MoE layer's parts: router, dispatch and combine, the experts' GEMMs and
// the balancing losses (models/common/moe.h).
#include "models/common/moe.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/host_read.h"
#include "parallel/expert_parallel.h"
#include "parallel/tensor_parallel.h"
#include "parallel/weight_grad_queue.h"

namespace trident {

namespace {

// The k best of each row of `values`, best first, ties to the lower column:
// a stable descending sort (NOTE [MoE router]).
at::Tensor best_columns(const at::Tensor& values, int64_t k) {
  return std::get<1>(values.sort(/*stable=*/true, /*dim=*/-1, /*descending=*/true)).narrow(-1, 0, k);
}

// Experts outside the topk_group best groups of each token masked to -inf.
at::Tensor limit_to_groups(const at::Tensor& choice, const RouterOptions& o) {
  const int64_t t = choice.size(0), per_group = o.experts / o.n_group;
  const at::Tensor grouped = choice.view({t, o.n_group, per_group});
  // A group's score: the sum of its two best experts' (one when a group has one).
  const int64_t best = std::min<int64_t>(2, per_group);
  const at::Tensor group_score = std::get<0>(grouped.sort(/*stable=*/true, -1, true)).narrow(-1, 0, best).sum(-1);
  const at::Tensor keep = at::zeros({t, o.n_group}, choice.options().dtype(at::kBool))
                              .scatter_(1, best_columns(group_score, o.topk_group), true);
  return grouped.masked_fill(keep.logical_not().unsqueeze(-1), -std::numeric_limits<double>::infinity())
      .view({t, o.experts});
}

// Assignments per expert, without bincount's host read of the largest id on CUDA.
at::Tensor expert_counts(const at::Tensor& flat, int64_t num_experts) {
  return at::zeros({num_experts}, flat.options()).scatter_add_(0, flat, at::ones_like(flat));
}

}  // namespace

void check_router_options(const RouterOptions& o) {
  const auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (o.experts < 1) bad("experts = " + std::to_string(o.experts) + ": expected at least 1");
  if (o.top_k < 1 || o.top_k > o.experts)
    bad("top_k = " + std::to_string(o.top_k) + ": expected 1 to the number of experts (" +
        std::to_string(o.experts) + ")");
  if (o.score != "softmax" && o.score != "sigmoid")
    bad("score function \"" + o.score + "\": expected \"softmax\" or \"sigmoid\"");
  if (o.n_group < 1 || o.experts % o.n_group != 0)
    bad("n_group = " + std::to_string(o.n_group) + " does not divide the " + std::to_string(o.experts) + " experts");
  if (o.topk_group < 1 || o.topk_group > o.n_group)
    bad("topk_group = " + std::to_string(o.topk_group) + ": expected 1 to n_group (" + std::to_string(o.n_group) + ")");
  if (o.top_k > o.topk_group * (o.experts / o.n_group))
    bad("top_k = " + std::to_string(o.top_k) + " is more than the " + std::to_string(o.topk_group * (o.experts / o.n_group)) +
        " experts of topk_group = " + std::to_string(o.topk_group) + " groups");
  if (o.softmax_after_topk && o.score != "softmax") bad("softmax after top-k needs the softmax score function");
  if (!(o.routed_scaling_factor > 0)) bad("routed_scaling_factor must be > 0");
}

Routing route(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& bias, const RouterOptions& o) {
  Routing r;
  r.logits = at::linear(x.to(at::kFloat), gate.to(at::kFloat));  // (T, E) fp32
  r.scores = o.score == "sigmoid" ? r.logits.sigmoid() : r.logits.softmax(-1);
  at::Tensor choice = bias.defined() ? r.scores + bias : r.scores;
  if (o.n_group > 1) choice = limit_to_groups(choice, o);
  r.experts = best_columns(o.softmax_after_topk ? r.logits : choice, o.top_k);  // (T, K)
  if (o.softmax_after_topk) {
    r.weights = r.logits.gather(1, r.experts).softmax(-1);
  } else {
    r.weights = r.scores.gather(1, r.experts);
    if (o.norm_topk_prob) {
      at::Tensor sum = r.weights.sum(-1, /*keepdim=*/true);
      if (o.score == "sigmoid") sum = sum + 1e-20;
      r.weights = r.weights / sum;
    }
  }
  if (o.routed_scaling_factor != 1.0) r.weights = r.weights * o.routed_scaling_factor;
  // NOTE [MoE balancing losses]: sigmoid scores normalised per token; the top-k of those scores alone
  // where the bias or the groups chose otherwise.
  r.aux_scores = o.score == "sigmoid" ? r.scores / (r.scores.sum(-1, /*keepdim=*/true) + 1e-20) : r.scores;
  r.aux_experts = bias.defined() || o.n_group > 1 ? best_columns(r.aux_scores, o.top_k) : r.experts;
  return r;
}

Dispatch dispatch(const at::Tensor& experts, int64_t num_experts, const at::Tensor& keep) {
  Dispatch d;
  at::Tensor flat = experts.reshape({-1});
  // Dropped assignments (NOTE [expert capacity]) sort after every expert's and are cut off.
  if (keep.defined()) flat = at::where(keep.reshape({-1}), flat, at::full_like(flat, num_experts));
  d.order = std::get<1>(flat.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  if (keep.defined()) {
    d.counts = expert_counts(flat, num_experts + 1).narrow(0, 0, num_experts);
    d.order = d.order.narrow(0, 0, read_to_host(d.counts.sum(), "kept expert assignments").item<int64_t>());
  } else {
    d.counts = expert_counts(flat, num_experts);
  }
  d.token = d.order.div(experts.size(1), "floor");
  return d;
}

at::Tensor keep_within_capacity(const Routing& r, const RouterOptions& o) {
  const int64_t t = r.experts.size(0), k = r.experts.size(1), e = o.experts;
  const auto capacity = static_cast<int64_t>(std::ceil(static_cast<double>(t * k) / static_cast<double>(e) * o.capacity_factor));
  at::NoGradGuard no_grad;
  const at::Tensor flat = r.experts.reshape({-1}), tok = at::arange(t, flat.options()).repeat_interleave(k);
  const at::TensorOptions f = r.weights.options().dtype(at::kFloat);
  // (E, T): each expert's assignments valued by the policy, the others -inf; ranked within the expert.
  const at::Tensor value = o.drop_by_position ? tok.neg().to(at::kFloat) : r.weights.reshape({-1}).to(at::kFloat);
  at::Tensor table = at::full({e, t}, -std::numeric_limits<float>::infinity(), f);
  table.index_put_({flat, tok}, value);
  const at::Tensor order = std::get<1>(table.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true));
  const at::Tensor rank = at::empty_like(order).scatter_(1, order, at::arange(t, order.options()).unsqueeze(0).expand({e, t}).contiguous());
  return rank.index({flat, tok}).lt(capacity).view({t, k});
}

at::Tensor permute(const at::Tensor& x, const Dispatch& d) { return x.index_select(0, d.token); }

at::Tensor combine(const at::Tensor& rows, const at::Tensor& weights, const Dispatch& d, int64_t tokens) {
  const at::Tensor w = weights.reshape({-1}).index_select(0, d.order).to(rows.scalar_type()).unsqueeze(1);
  return at::zeros({tokens, rows.size(1)}, rows.options()).index_add(0, d.token, rows * w);
}

at::Tensor swiglu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down) {
  // trident::linear: a zero-bubble W computes the weight gradients (NOTE [I/W split]).
  return linear(at::silu(linear(x, gate, at::Tensor())) * linear(x, up, at::Tensor()), down, at::Tensor());
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// a · b written into `out` (a view: a slice of a larger result).
void mm_into(at::Tensor out, const at::Tensor& a, const at::Tensor& b) { at::mm_out(out, a, b); }

// NOTE [experts on the CPU]
// Without a grouped GEMM the experts run as one autograd function over the
// sorted rows: per expert and projection one GEMM written into its slice of
// one output (mm_out), the SwiGLU's element-wise ops once over all rows, and a
// backward written out: per expert dH = dY down_e, dRows = dG gate_e + dU up_e,
// and the weight gradients dgate_e = dGᵀ rows_e, dup_e = dUᵀ rows_e,
// ddown_e = dYᵀ H_e into slices of one gradient per projection. Through
// autograd the same layer was a graph of selects, narrows, per-expert linears
// and a cat, whose backward filled a zero tensor of the whole projection for
// every expert's select and added them up. The weight gradients defer to a
// zero-bubble W as linear()'s do (NOTE [I/W split]), computed by the same
// code either way. Counts are host values (one read per call, the caller's).
//
// NOTE [grouped experts]
// Where libtorch has a grouped GEMM (at::_grouped_mm: CUDA, and the CPU in
// fp32/bf16 with rows 16-byte aligned) the same function runs each of those
// products as one grouped GEMM over the offsets (the counts' running sums, no
// host read): g = rows·gateᵀ, dH = dY·down, the weight gradients as 2-d x 2-d
// groups (dGᵀ·rows per block of rows, zero for an expert without rows). So the
// CUDA experts' weight gradients defer to a W like the CPU's; before, autograd
// through _grouped_mm computed them in the I.
struct ExpertGemms {
  std::vector<int64_t> counts;  // host counts: one GEMM per expert (offs undefined)
  at::Tensor offs;              // int32 running sums of the counts: one grouped GEMM per product

  // a (n, K), w (E, N, K) -> (n, N): each expert's rows times w[e]ᵀ.
  at::Tensor by_transposed(const at::Tensor& a, const at::Tensor& w) const {
    if (offs.defined()) return at::_grouped_mm(a, w.transpose(1, 2), offs);
    at::Tensor out = at::empty({a.size(0), w.size(1)}, a.options());
    for_each_expert([&](int64_t e, int64_t b, int64_t c) { mm_into(out.narrow(0, b, c), a.narrow(0, b, c), w[e].t()); });
    return out;
  }
  // d (n, N), w (E, N, K) -> (n, K): each expert's rows times w[e].
  at::Tensor by(const at::Tensor& d, const at::Tensor& w) const {
    if (offs.defined()) return at::_grouped_mm(d, w, offs);
    at::Tensor out = at::empty({d.size(0), w.size(2)}, d.options());
    for_each_expert([&](int64_t e, int64_t b, int64_t c) { mm_into(out.narrow(0, b, c), d.narrow(0, b, c), w[e]); });
    return out;
  }
  // d (n, N), a (n, K) -> (E, N, K): each expert's dᵀ·a over its rows (zero without rows).
  at::Tensor outer(const at::Tensor& d, const at::Tensor& a, const at::Tensor& like) const {
    if (offs.defined()) return at::_grouped_mm(d.t(), a, offs);
    at::Tensor out = at::zeros_like(like);
    for_each_expert([&](int64_t e, int64_t b, int64_t c) { mm_into(out[e], d.narrow(0, b, c).t(), a.narrow(0, b, c)); });
    return out;
  }
  // f(expert, first row, rows) for each expert with rows.
  template <typename F>
  void for_each_expert(F&& f) const {
    int64_t begin = 0;
    for (size_t e = 0; e < counts.size(); ++e) {
      if (counts[e] > 0) f(static_cast<int64_t>(e), begin, counts[e]);
      begin += counts[e];
    }
  }
};

struct ExpertsSwigluFn : torch::autograd::Function<ExpertsSwigluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, const at::Tensor& gate, const at::Tensor& up,
                            const at::Tensor& down, const ExpertGemms& gemms) {
    const at::Tensor g = gemms.by_transposed(rows, gate), u = gemms.by_transposed(rows, up);
    const at::Tensor h = at::silu(g) * u;
    const at::Tensor y = gemms.by_transposed(h, down);
    ctx->save_for_backward({rows, g, u, h});
    ctx->saved_data["gate"] = gate, ctx->saved_data["up"] = up, ctx->saved_data["down"] = down;
    ctx->saved_data["counts"] = gemms.counts;
    if (gemms.offs.defined()) ctx->saved_data["offs"] = gemms.offs;
    keep_weight_grad_queue(ctx);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &g = saved[1], &u = saved[2], &h = saved[3];
    const at::Tensor gate = ctx->saved_data["gate"].toTensor(), up = ctx->saved_data["up"].toTensor(),
                     down = ctx->saved_data["down"].toTensor();
    ExpertGemms gemms;
    gemms.counts = ctx->saved_data["counts"].toIntVector();
    if (ctx->saved_data.count("offs") != 0) gemms.offs = ctx->saved_data["offs"].toTensor();
    const at::Tensor dy = grads[0].contiguous();
    const at::Tensor dh = gemms.by(dy, down);
    const at::Tensor du = dh * at::silu(g);
    const at::Tensor dg = at::silu_backward(dh * u, g);
    // Two products added, as autograd sums a tensor's two gradients (addmm_ would
    // accumulate one product into the other, rounding otherwise).
    const at::Tensor drows = gemms.by(dg, gate).add_(gemms.by(du, up));
    if (!gate.requires_grad() && !up.requires_grad() && !down.requires_grad())
      return {drows, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    // Experts without rows get zero gradients (defined: every rank's buckets
    // become final in the same backward, NOTE [expert dispatch]).
    auto weight_grads = [rows, h, dy, dg, du, gemms, gate, up, down]() {
      at::NoGradGuard no_grad;  // a W runs outside the engine, and mm_out records no graph
      return std::array<at::Tensor, 3>{gemms.outer(dg, rows, gate), gemms.outer(du, rows, up),
                                       gemms.outer(dy, h, down)};
    };
    if (WeightGradQueue* q = deferring_weight_grad_queue(ctx)) {
      q->push([weight_grads, gate, up, down]() {
        const auto w = weight_grads();
        accumulate_weight_grad(gate, w[0]);
        accumulate_weight_grad(up, w[1]);
        accumulate_weight_grad(down, w[2]);
      });
      return {drows, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    const auto w = weight_grads();
    return {drows, w[0], w[1], w[2], at::Tensor()};
  }
};

}  // namespace

bool grouped_experts_fit(const at::Tensor& rows, const at::Tensor& gate) {
  const auto t = rows.scalar_type();
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) return false;
  const int64_t align = 16 / static_cast<int64_t>(rows.element_size());  // 16-byte strides
  return gate.size(1) % align == 0 && gate.size(2) % align == 0;
}

at::Tensor experts_swiglu_grouped(const at::Tensor& rows, const at::Tensor& counts, const at::Tensor& gate,
                                  const at::Tensor& up, const at::Tensor& down) {
  if (!grouped_experts_fit(rows, gate))
    throw std::invalid_argument("experts_swiglu_grouped: the grouped GEMM needs fp32, bf16 or fp16 rows and widths "
                                "whose rows are 16-byte aligned");
  ExpertGemms gemms;
  gemms.offs = counts.cumsum(0).to(at::kInt);
  return ExpertsSwigluFn::apply(rows.contiguous(), gate, up, down, gemms);
}

at::Tensor experts_swiglu(const at::Tensor& rows, const at::Tensor& counts, const at::Tensor& gate,
                          const at::Tensor& up, const at::Tensor& down) {
  if (rows.is_cuda() && grouped_experts_fit(rows, gate)) return experts_swiglu_grouped(rows, counts, gate, up, down);
  const at::Tensor host = counts.to(at::kCPU).contiguous();
  const int64_t* n = host.data_ptr<int64_t>();
  ExpertGemms gemms;
  gemms.counts.assign(n, n + host.numel());
  return ExpertsSwigluFn::apply(rows.contiguous(), gate, up, down, gemms);
}

namespace {

// NOTE [aux loss in the backward]
struct AuxLossScaler : torch::autograd::Function<AuxLossScaler> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y, const at::Tensor& aux,
                            double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({aux});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const at::Tensor aux = ctx->get_saved_variables()[0];
    return {g[0], at::full_like(aux, ctx->saved_data["scale"].toDouble()), at::Tensor()};
  }
};

// NOTE [pooled aux loss]: `totals` is read in the backward, by then the micro-batch's counts.
struct PooledAuxScaler : torch::autograd::Function<PooledAuxScaler> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& y, const at::Tensor& /*score_sums*/,
                            const at::Tensor& totals, double factor) {
    ctx->saved_data["factor"] = factor;
    ctx->saved_data["totals"] = totals;  // not save_for_backward: written in place after this forward
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const at::Tensor totals = ctx->saved_data["totals"].toTensor();
    return {g[0], totals * ctx->saved_data["factor"].toDouble(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor pooled_counts(const Routing& r) {
  return expert_counts(r.aux_experts.reshape({-1}), r.aux_scores.size(1)).to(at::kFloat);
}

at::Tensor attach_pooled_aux_loss(const at::Tensor& y, const at::Tensor& score_sums, const at::Tensor& totals,
                                  double factor) {
  if (score_sums.dim() != 1 || !totals.defined() || totals.sizes() != score_sums.sizes())
    throw std::invalid_argument("attach_pooled_aux_loss: expected score sums and totals of one value per expert");
  return PooledAuxScaler::apply(y, score_sums, totals, factor);
}

at::Tensor attach_aux_loss(const at::Tensor& y, const at::Tensor& aux, double scale) {
  if (aux.dim() != 0) throw std::invalid_argument("attach_aux_loss: the aux loss must be a scalar");
  return AuxLossScaler::apply(y, aux, scale);
}

namespace {

// NOTE [all-gather dispatch]
// parallel.moe_dispatcher = "allgather" (Megatron's allgather dispatcher): every
// rank of the expert-parallel group gathers the group's tokens (T x ep rows of
// x, autograd: the backward reduce-scatters their gradients) with their chosen
// experts and weights, runs its own experts on the rows routed to them
// (sorted by local expert, then by source rank, token and slot: the rows and
// the order the all-to-all brings), adds each weighted output into its
// token's row of a (T x ep, H) buffer, and one reduce-scatter sums the ranks'
// buffers and leaves each rank its own tokens' rows (autograd: the backward
// all-gathers). No counts are exchanged; the rows a rank computes are one
// host read ("all-gather dispatch rows"). Each token's outputs are summed
// per rank and then over the ranks, an order other than the all-to-all's
// combine: equal within rounding, not in bits. It moves every token to every
// rank (ep x the all-to-all's volume at most), for small groups and fast links.
at::Tensor allgather_routed(const EpContext& ep, const at::Tensor& x, const at::Tensor& chosen,
                            const at::Tensor& weights, const MoeWeights& w, int64_t experts) {
  const int64_t n = ep.size(), local = experts / n, t = x.size(0), k = chosen.size(1);
  const TpContext group{ep.group};
  const at::Tensor all_x = gather_seq(group, x.unsqueeze(0)).squeeze(0);        // (n T, H)
  const at::Tensor all_w = gather_seq(group, weights.unsqueeze(0)).squeeze(0);  // (n T, K)
  at::Tensor all_e = at::empty({n, t, k}, chosen.options()), part = chosen.contiguous();
  all_gather_into(*ep.group, all_e, part);
  // Local expert ids; every other rank's experts sort after them (key = local).
  const at::Tensor flat = all_e.reshape({-1}) - ep.rank() * local;
  const at::Tensor mine = flat.ge(0).logical_and(flat.lt(local));
  const at::Tensor key = at::where(mine, flat, at::full_like(flat, local));
  const at::Tensor order = std::get<1>(key.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  const int64_t m = read_to_host(mine.sum(), "all-gather dispatch rows").item<int64_t>();
  const at::Tensor pos = order.narrow(0, 0, m), tok = at::div(pos, k, "floor");
  const at::Tensor rows = experts_swiglu(all_x.index_select(0, tok), expert_counts(key.index_select(0, pos), local),
                                         w.gate, w.up, w.down);
  const at::Tensor weight = all_w.reshape({-1}).index_select(0, pos).to(rows.scalar_type()).unsqueeze(1);
  const at::Tensor summed = at::zeros({n * t, x.size(1)}, rows.options()).index_add(0, tok, rows * weight);
  return reduce_scatter_seq(group, summed.unsqueeze(0)).squeeze(0);
}

}  // namespace

MoeOutput moe_forward(const at::Tensor& x, const MoeWeights& w, const RouterOptions& o, const EpContext* ep) {
  MoeOutput out;
  out.routing = route(x, w.router, w.bias, o);
  const at::Tensor keep = o.capacity_factor > 0 ? keep_within_capacity(out.routing, o) : at::Tensor();
  // NOTE [experts under tensor parallelism]: the routing is whole on every tp rank; the routed part
  // reads this rank's token slice (of tp / etp) into its experts' part (of etp).
  const TpContext tp{ep ? ep->tp : nullptr}, sl{ep ? ep->token_slices : nullptr}, et{ep ? ep->expert_tp : nullptr};
  const bool slices = sl.size() > 1, split = et.size() > 1;
  at::Tensor xs = x, weights = out.routing.weights, experts = out.routing.experts, kept = keep;
  if (slices) {
    const int64_t part = x.size(0) / sl.size();
    xs = scatter_along(sl, x, 0);
    weights = scatter_along(sl, weights, 0);
    experts = experts.narrow(0, sl.rank() * part, part);
    if (kept.defined()) kept = kept.narrow(0, sl.rank() * part, part);
  }
  if (split) {  // each rank's experts give a part of every output: the gradients of both are sums
    xs = copy_to_tp(et, xs);
    weights = copy_to_tp(et, weights);
  }
  const Dispatch d = dispatch(experts, o.experts, kept);
  out.counts = d.counts;
  out.assignments = experts.numel();
  at::Tensor y;
  if (ep && ep->size() > 1 && ep->allgather) {
    // A dropped assignment's expert is -1: no rank's (NOTE [expert capacity]).
    const at::Tensor chosen = kept.defined() ? at::where(kept, experts, -1) : experts;
    y = allgather_routed(*ep, xs, chosen, weights, w, o.experts);
  } else {
    const at::Tensor sorted = permute(xs, d);
    at::Tensor rows;
    if (ep && ep->size() > 1) {
      // NOTE [expert dispatch]: to the experts' ranks, this rank's experts on what came, and back.
      const ExpertExchange exchange = plan_exchange(*ep, d.counts);
      const at::Tensor local = dispatch_rows(*ep, sorted, exchange);
      rows = combine_rows(*ep, experts_swiglu(local, exchange.local_counts, w.gate, w.up, w.down), exchange);
    } else {
      rows = experts_swiglu(sorted, d.counts, w.gate, w.up, w.down);
    }
    y = combine(rows, weights, d, xs.size(0));
  }
  // Split experts: the routed part and the shared experts' summed on this rank, then one reduction
  // over tp (NOTE [experts under tensor parallelism]); not under Qwen2-MoE's gate, whose weight and
  // input would then see a part of the shared output: both parts are reduced first there.
  // (With both, etp < tp: each slice's parts summed over its etp ranks, then the slices gathered.)
  const bool one_reduction = split && !slices && !w.shared_expert_gate.defined();
  if (split && !one_reduction) y = reduce_from_tp(et, y);
  out.y = slices ? gather_along(sl, y, 0) : y;
  if (w.shared_gate.defined()) {  // split over tp as the dense MLP
    at::Tensor shared = swiglu(copy_to_tp(tp, x), w.shared_gate, w.shared_up, w.shared_down);
    if (!one_reduction) shared = reduce_from_tp(tp, shared);
    if (w.shared_expert_gate.defined()) shared = at::sigmoid(at::linear(x, w.shared_expert_gate)) * shared;
    out.y = out.y + shared;
  }
  if (one_reduction) {
    out.reduced = !ep->caller_reduces;
    if (out.reduced) out.y = reduce_from_tp(tp, out.y);
  }
  return out;
}

namespace {

// NOTE [balancing losses under context parallelism]: the counts of the whole
// sequences, and how many ranks hold them.
double over_context(const Group* cp, at::Tensor& counts) {
  if (!cp || cp->size() == 1) return 1.0;
  at::NoGradGuard no_grad;
  all_reduce(*cp, counts);
  return static_cast<double>(cp->size());
}

}  // namespace

at::Tensor switch_aux_loss(const Routing& r, int64_t top_k, const Group* cp) {
  const int64_t t = r.aux_scores.size(0), e = r.aux_scores.size(1);
  at::Tensor counts = expert_counts(r.aux_experts.reshape({-1}), e).to(at::kFloat);
  const double n = over_context(cp, counts);
  return (r.aux_scores.sum(0) * counts).sum() * (static_cast<double>(e) / (static_cast<double>(top_k) * t * t * n));
}

at::Tensor seq_aux_loss(const Routing& r, int64_t top_k, int64_t seqs, const Group* cp) {
  const int64_t t = r.aux_scores.size(0), e = r.aux_scores.size(1), per = t / seqs;
  if (seqs < 1 || t % seqs != 0)
    throw std::invalid_argument("seq_aux_loss: " + std::to_string(t) + " tokens are not " + std::to_string(seqs) +
                                " sequences of equal length");
  const at::Tensor probs = r.aux_scores.reshape({seqs, per, e}).sum(1);  // (seqs, E)
  const int64_t k = r.aux_experts.size(1);
  at::Tensor counts = at::zeros({seqs, e}, r.aux_scores.options())
                          .scatter_add_(1, r.aux_experts.reshape({seqs, per * k}),
                                        at::ones({seqs, per * k}, r.aux_scores.options()));
  const double n = over_context(cp, counts);
  return (probs * counts).sum() * (static_cast<double>(e) / (static_cast<double>(top_k) * per * per * seqs * n));
}

at::Tensor z_loss(const Routing& r) { return r.logits.logsumexp(-1).square().mean(); }

at::Tensor pooled_aux_loss(const std::vector<at::Tensor>& layer_logits, int64_t top_k) {
  if (layer_logits.empty()) throw std::invalid_argument("pooled_aux_loss: no layer's router logits");
  const int64_t e = layer_logits[0].size(-1);
  at::Tensor counts, probs;
  int64_t rows = 0;
  for (const at::Tensor& logits : layer_logits) {
    const at::Tensor p = logits.to(at::kFloat).softmax(-1);
    const at::Tensor c = expert_counts(best_columns(p, top_k).reshape({-1}), e).to(at::kFloat);
    counts = counts.defined() ? counts + c : c;
    probs = probs.defined() ? probs + p.sum(0) : p.sum(0);
    rows += p.size(0);
  }
  return (counts / rows * (probs / rows)).sum() * static_cast<double>(e);
}

}  // namespace trident
