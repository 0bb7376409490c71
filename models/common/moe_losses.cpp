// The MoE layer's balancing losses: see moe_losses.h.
#include "models/common/moe_losses.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>
#include <string>

#include "parallel/process_groups.h"
#include "parallel/token_permutation.h"

namespace trident {

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

namespace {

// (E) fp32: the (token, slot) pairs of `experts` (T, K) per expert, each weighing its token's
// `real` (NOTE [balancing losses over real tokens]; undefined: 1). Integers in fp32: exact in any order.
at::Tensor weighted_counts(const at::Tensor& experts, int64_t e, const at::Tensor& real) {
  if (!real.defined()) return expert_counts(experts.reshape({-1}), e).to(at::kFloat);
  const at::Tensor w = real.to(at::kFloat).unsqueeze(1).expand({-1, experts.size(1)}).reshape({-1});
  return at::zeros({e}, w.options()).index_add_(0, experts.reshape({-1}), w);
}

}  // namespace

at::Tensor pooled_counts(const Routing& r, const at::Tensor& real) {
  return weighted_counts(r.aux_experts, r.aux_scores.size(1), real);
}

at::Tensor pooled_loss(const at::Tensor& counts, const at::Tensor& score_sums, double rows) {
  return (counts * score_sums).sum() * (static_cast<double>(counts.size(0)) / (rows * rows));
}

double pooled_loss_factor(double scale, int64_t experts, double rows) {
  return scale * static_cast<double>(experts) / (rows * rows);
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

// NOTE [balancing losses under context parallelism]: the counts of the whole
// sequences, and how many ranks hold them.
double over_context(const Group* cp, at::Tensor& counts) {
  if (!cp || cp->size() == 1) return 1.0;
  at::NoGradGuard no_grad;
  all_reduce(*cp, counts);
  return static_cast<double>(cp->size());
}

}  // namespace

at::Tensor switch_aux_loss(const Routing& r, int64_t top_k, const Group* cp, const at::Tensor& real) {
  const int64_t t = r.aux_scores.size(0), e = r.aux_scores.size(1);
  if (real.defined()) {  // NOTE [balancing losses over real tokens]: [counts | real tokens], summed over cp
    at::Tensor counts = at::cat({weighted_counts(r.aux_experts, e, real), real.sum().reshape({1}).to(at::kFloat)});
    const double n = over_context(cp, counts);
    const at::Tensor rt = counts[e].clamp_min(1.0);
    return (r.aux_scores.mul(real.unsqueeze(1)).sum(0) * counts.narrow(0, 0, e)).sum() *
           (static_cast<double>(e) * n / static_cast<double>(top_k)) / (rt * rt);
  }
  at::Tensor counts = expert_counts(r.aux_experts.reshape({-1}), e).to(at::kFloat);
  const double n = over_context(cp, counts);
  return (r.aux_scores.sum(0) * counts).sum() * (static_cast<double>(e) / (static_cast<double>(top_k) * t * t * n));
}

namespace {

// seq_aux_loss over real tokens: per sequence [counts | real tokens], summed over cp.
at::Tensor seq_aux_loss_over_real(const Routing& r, int64_t top_k, int64_t seqs, const Group* cp, const at::Tensor& real) {
  const int64_t t = r.aux_scores.size(0), e = r.aux_scores.size(1), per = t / seqs, k = r.aux_experts.size(1);
  const at::Tensor w = real.to(at::kFloat).reshape({seqs, per});
  const at::Tensor probs = (r.aux_scores.reshape({seqs, per, e}) * w.unsqueeze(2)).sum(1);  // (seqs, E)
  at::Tensor both = at::zeros({seqs, e + 1}, w.options());
  both.narrow(1, 0, e).scatter_add_(1, r.aux_experts.reshape({seqs, per * k}),
                                    w.unsqueeze(2).expand({seqs, per, k}).reshape({seqs, per * k}));
  both.narrow(1, e, 1).copy_(w.sum(1, true));
  const double n = over_context(cp, both);
  const at::Tensor rs = both.narrow(1, e, 1).clamp_min(1.0);
  return (probs * both.narrow(1, 0, e) / (rs * rs)).sum() *
         (static_cast<double>(e) * n / (static_cast<double>(top_k) * static_cast<double>(seqs)));
}

}  // namespace

at::Tensor seq_aux_loss(const Routing& r, int64_t top_k, int64_t seqs, const Group* cp, const at::Tensor& real) {
  const int64_t t = r.aux_scores.size(0), e = r.aux_scores.size(1), per = t / seqs;
  if (seqs < 1 || t % seqs != 0)
    throw std::invalid_argument("seq_aux_loss: " + std::to_string(t) + " tokens are not " + std::to_string(seqs) +
                                " sequences of equal length");
  if (real.defined()) return seq_aux_loss_over_real(r, top_k, seqs, cp, real);
  const at::Tensor probs = r.aux_scores.reshape({seqs, per, e}).sum(1);  // (seqs, E)
  const int64_t k = r.aux_experts.size(1);
  at::Tensor counts = at::zeros({seqs, e}, r.aux_scores.options())
                          .scatter_add_(1, r.aux_experts.reshape({seqs, per * k}),
                                        at::ones({seqs, per * k}, r.aux_scores.options()));
  const double n = over_context(cp, counts);
  return (probs * counts).sum() * (static_cast<double>(e) / (static_cast<double>(top_k) * per * per * seqs * n));
}

at::Tensor z_loss(const Routing& r, const Group* cp, const at::Tensor& real) {
  if (!real.defined()) return r.logits.logsumexp(-1).square().mean();
  at::Tensor rt = real.sum().reshape({1}).to(at::kFloat);  // NOTE [balancing losses over real tokens]
  const double n = over_context(cp, rt);
  return (r.logits.logsumexp(-1).square() * real).sum() * n / rt[0].clamp_min(1.0);
}

at::Tensor pooled_aux_loss(const std::vector<at::Tensor>& layer_logits, int64_t top_k) {
  if (layer_logits.empty()) throw std::invalid_argument("pooled_aux_loss: no layer's router logits");
  const int64_t e = layer_logits[0].size(-1);
  at::Tensor counts, probs;
  double rows = 0;
  for (const at::Tensor& logits : layer_logits) {
    const at::Tensor p = logits.to(at::kFloat).softmax(-1);
    const at::Tensor c = expert_counts(best_columns(p, top_k).reshape({-1}), e).to(at::kFloat);
    counts = counts.defined() ? counts + c : c;
    probs = probs.defined() ? probs + p.sum(0) : p.sum(0);
    rows += static_cast<double>(p.size(0));
  }
  return pooled_loss(counts, probs, rows);
}

}  // namespace trident
