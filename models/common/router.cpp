// The MoE router: see router.h.
#include "models/common/router.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace trident {

namespace {

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

}  // namespace

at::Tensor best_columns(const at::Tensor& values, int64_t k) {
  return std::get<1>(values.sort(/*stable=*/true, /*dim=*/-1, /*descending=*/true)).narrow(-1, 0, k);
}

void check_router_options(const RouterOptions& o) {
  const std::string error = router_options_error(o);
  if (!error.empty()) throw std::invalid_argument(error);
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

void update_expert_bias(at::Tensor& bias, const at::Tensor& load, double rate) {
  at::NoGradGuard no_grad;
  bias.add_((load.mean() - load).sign().to(at::kFloat) * rate);
}

}  // namespace trident
