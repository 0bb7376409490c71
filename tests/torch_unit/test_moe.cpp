// The MoE layer's parts (models/common/moe_layer.h and its parts) against a per-token loop written
// out here: routing, dispatch and combine, the experts' GEMMs on sorted rows,
// empty experts, one expert taking every token, ties, groups, the losses.
// transformers' own blocks are the reference in tests/reference/test_moe_reference.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "models/common/experts.h"
#include "models/common/moe_layer.h"
#include "models/common/moe_losses.h"
#include "parallel/token_permutation.h"
#include "parallel/weight_grad_queue.h"

namespace trident {
namespace {

constexpr int64_t kT = 11, kH = 6, kI = 4;

MoeWeights random_weights(int64_t experts, uint64_t seed) {
  at::manual_seed(seed);
  MoeWeights w;
  w.router = at::randn({experts, kH});
  w.gate = at::randn({experts, kI, kH}) * 0.5;
  w.up = at::randn({experts, kI, kH}) * 0.5;
  w.down = at::randn({experts, kH, kI}) * 0.5;
  return w;
}

// Σ_k weight · SwiGLU_e(x_t), token by token: the definition, no sorting.
at::Tensor per_token(const at::Tensor& x, const MoeWeights& w, const Routing& r) {
  at::Tensor y = at::zeros_like(x);
  for (int64_t t = 0; t < x.size(0); ++t)
    for (int64_t k = 0; k < r.experts.size(1); ++k) {
      const int64_t e = r.experts[t][k].item<int64_t>();
      y[t] += r.weights[t][k] * swiglu(x[t].unsqueeze(0), w.gate[e], w.up[e], w.down[e])[0];
    }
  return y;
}

TEST(Moe, SortedExpertsEqualThePerTokenDefinition) {
  RouterOptions o;
  o.experts = 5;
  o.top_k = 2;
  const MoeWeights w = random_weights(o.experts, 1);
  const at::Tensor x = at::randn({kT, kH});
  const MoeOutput out = moe_forward(x, w, o);
  EXPECT_TRUE(at::allclose(out.y, per_token(x, w, out.routing), 1e-6, 1e-6));
  // Softmax scores, the top 2 renormalised: the weights sum to 1.
  EXPECT_TRUE(at::allclose(out.routing.weights.sum(-1), at::ones({kT}), 1e-6, 1e-6));
}

TEST(Moe, PermuteThenCombineIsTheIdentityWithOneHotWeights) {
  const at::Tensor experts = at::tensor({3, 0, 0, 2, 3, 3, 1, 0}, at::kLong).view({4, 2});
  const Permutation d = sort_by_expert(experts, 4);
  EXPECT_TRUE(at::equal(d.counts, at::tensor({3, 1, 1, 3}, at::kLong)));
  // Sorted by expert, stably: expert 0's rows come from tokens 0, 1, 3 in that order.
  EXPECT_TRUE(at::equal(d.token, at::tensor({0, 1, 3, 3, 1, 0, 2, 2}, at::kLong)));
  const at::Tensor x = at::randn({4, kH});
  const at::Tensor rows = permute(x, d);
  for (int64_t j = 0; j < rows.size(0); ++j) EXPECT_TRUE(at::equal(rows[j], x[d.token[j].item<int64_t>()]));
  const at::Tensor first_slot = at::tensor({1.f, 0.f}).repeat({4, 1});
  EXPECT_TRUE(at::equal(unpermute(rows, first_slot, d, 4), x));
}

TEST(Moe, ExpertsWithNoTokensAndOneExpertWithEveryToken) {
  RouterOptions o;
  o.experts = 6;
  o.top_k = 1;
  MoeWeights w = random_weights(o.experts, 2);
  // A large positive bias on expert 4 (choice only): every token picks it.
  w.bias = at::zeros({o.experts});
  w.bias[4] = 100.0;
  const at::Tensor x = at::randn({kT, kH});
  const MoeOutput out = moe_forward(x, w, o);
  EXPECT_TRUE(at::equal(out.routing.experts, at::full({kT, 1}, 4, at::kLong)));
  // The bias chose; the weight is expert 4's own softmax score, renormalised over k = 1: exactly 1.
  EXPECT_TRUE(at::equal(out.routing.weights, at::ones({kT, 1})));
  EXPECT_TRUE(at::allclose(out.y, swiglu(x, w.gate[4], w.up[4], w.down[4]), 1e-6, 1e-6));
  const Permutation d = sort_by_expert(out.routing.experts, o.experts);
  EXPECT_TRUE(at::equal(d.counts, at::tensor(std::vector<int64_t>{0, 0, 0, 0, kT, 0})));
}

// The experts' four leaves: the sorted rows and the three stacked weights.
struct Leaves {
  at::Tensor rows, gate, up, down;
};
Leaves leaves_of(const at::Tensor& rows, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down) {
  return Leaves{rows.clone().requires_grad_(), gate.clone().requires_grad_(), up.clone().requires_grad_(),
                down.clone().requires_grad_()};
}

// `experts` run under a W queue armed to defer (NOTE [I/W split]): the rows' gradient comes at once,
// the weights' only when the W runs, each equal bit for bit to `undeferred`'s.
template <typename F>
void expect_weight_grads_defer_to_w(F experts, const Leaves& deferred, const at::Tensor& gy, const Leaves& undeferred) {
  WeightGradQueue q;
  at::Tensor yd;
  {
    WeightGradScope scope(&q);
    yd = experts(deferred);
  }
  q.arm(true);
  (yd * gy).sum().backward();
  EXPECT_TRUE(at::equal(deferred.rows.grad(), undeferred.rows.grad()));
  EXPECT_FALSE(deferred.gate.grad().defined());  // waits for W
  EXPECT_EQ(q.size(), 1u);
  q.run();
  EXPECT_TRUE(at::equal(deferred.gate.grad(), undeferred.gate.grad()));
  EXPECT_TRUE(at::equal(deferred.up.grad(), undeferred.up.grad()));
  EXPECT_TRUE(at::equal(deferred.down.grad(), undeferred.down.grad()));
}

// NOTE [experts on the CPU]: the written-out backward against autograd through
// the definition (per expert three linears, concatenated), in float64, an
// expert without rows among them; and its weight gradients deferred to a W,
// equal bit for bit to the undeferred ones.
TEST(Moe, ExpertsBackwardIsTheDefinitionsAndDefersToW) {
  at::manual_seed(7);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const std::vector<int64_t> n = {4, 0, 6, 3};
  const int64_t rows_n = 13, e = static_cast<int64_t>(n.size());
  const at::Tensor rows0 = at::randn({rows_n, kH}, f64), gy = at::randn({rows_n, kH}, f64);
  const at::Tensor gate0 = at::randn({e, kI, kH}, f64), up0 = at::randn({e, kI, kH}, f64),
                   down0 = at::randn({e, kH, kI}, f64);
  const at::Tensor counts = at::tensor(n, at::kLong);
  const auto leaves = [&] { return leaves_of(rows0, gate0, up0, down0); };
  Leaves want = leaves(), got = leaves(), deferred = leaves();
  std::vector<at::Tensor> parts;
  for (int64_t x = 0, b = 0; x < e; b += n[x], ++x)
    if (n[x] > 0) {
      const at::Tensor r = want.rows.narrow(0, b, n[x]);
      parts.push_back(at::linear(at::silu(at::linear(r, want.gate[x])) * at::linear(r, want.up[x]), want.down[x]));
    }
  (at::cat(parts, 0) * gy).sum().backward();
  const at::Tensor y = experts_swiglu(got.rows, counts, got.gate, got.up, got.down);
  EXPECT_TRUE(at::allclose(y, at::cat(parts, 0).detach(), 1e-12, 1e-12));
  (y * gy).sum().backward();
  for (auto [a, b, name] : {std::tuple{want.rows, got.rows, "rows"}, {want.gate, got.gate, "gate"},
                            {want.up, got.up, "up"}, {want.down, got.down, "down"}}) {
    ASSERT_TRUE(b.grad().defined()) << name;
    EXPECT_TRUE(at::allclose(b.grad(), a.grad(), 1e-12, 1e-12)) << name;
  }
  EXPECT_TRUE(at::equal(got.gate.grad()[1], at::zeros({kI, kH}, f64)));  // the expert without rows
  expect_weight_grads_defer_to_w(
      [&](const Leaves& l) { return experts_swiglu(l.rows, counts, l.gate, l.up, l.down); }, deferred, gy, got);
}

// NOTE [grouped experts]: the grouped-GEMM path (CUDA's, run here on the CPU's
// at::_grouped_mm, fp32 with 16-byte aligned widths) against the per-expert
// GEMMs, experts without rows among them (first, inside and last); its weight
// gradients deferred to a W, equal bit for bit to its undeferred ones.
TEST(Moe, GroupedExpertsEqualThePerExpertGemmsAndDeferToW) {
  at::manual_seed(11);
  const int64_t h = 8, inner = 12;
  const std::vector<int64_t> n = {0, 5, 0, 7, 1, 0};
  const int64_t rows_n = 13, e = static_cast<int64_t>(n.size());
  const at::Tensor rows0 = at::randn({rows_n, h}), gy = at::randn({rows_n, h});
  const at::Tensor gate0 = at::randn({e, inner, h}), up0 = at::randn({e, inner, h}), down0 = at::randn({e, h, inner});
  const at::Tensor counts = at::tensor(n, at::kLong);
  ASSERT_TRUE(grouped_experts_fit(rows0, gate0));
  EXPECT_FALSE(grouped_experts_fit(at::randn({rows_n, kH}), at::randn({e, kI, kH})));  // 6 floats: not aligned
  EXPECT_FALSE(grouped_experts_fit(rows0.to(at::kDouble), gate0.to(at::kDouble)));
  const auto leaves = [&] { return leaves_of(rows0, gate0, up0, down0); };
  Leaves per = leaves(), grouped = leaves(), deferred = leaves();
  const at::Tensor y = experts_swiglu(per.rows, counts, per.gate, per.up, per.down);
  const at::Tensor yg = experts_swiglu_grouped(grouped.rows, counts, grouped.gate, grouped.up, grouped.down);
  EXPECT_TRUE(at::allclose(yg, y, 1e-5, 1e-5));
  (y * gy).sum().backward();
  (yg * gy).sum().backward();
  for (auto [a, b, name] : {std::tuple{per.rows, grouped.rows, "rows"}, {per.gate, grouped.gate, "gate"},
                            {per.up, grouped.up, "up"}, {per.down, grouped.down, "down"}}) {
    ASSERT_TRUE(b.grad().defined()) << name;
    EXPECT_TRUE(at::allclose(b.grad(), a.grad(), 1e-4, 1e-5)) << name;
  }
  for (int64_t x : {0, 2, 5}) {  // the experts without rows
    EXPECT_TRUE(at::equal(grouped.gate.grad()[x], at::zeros({inner, h}))) << x;
    EXPECT_TRUE(at::equal(grouped.down.grad()[x], at::zeros({h, inner}))) << x;
  }

  expect_weight_grads_defer_to_w(
      [&](const Leaves& l) { return experts_swiglu_grouped(l.rows, counts, l.gate, l.up, l.down); }, deferred, gy,
      grouped);
  EXPECT_THROW(experts_swiglu_grouped(rows0.to(at::kDouble), counts, gate0.to(at::kDouble), up0.to(at::kDouble),
                                      down0.to(at::kDouble)),
               std::invalid_argument);
}

TEST(Moe, TiesGoToTheLowerExpert) {
  RouterOptions o;
  o.experts = 7;
  o.top_k = 3;
  MoeWeights w = random_weights(o.experts, 3);
  w.router.zero_();  // every expert scores 1/7 for every token
  const MoeOutput out = moe_forward(at::randn({kT, kH}), w, o);
  EXPECT_TRUE(at::equal(out.routing.experts, at::tensor({0, 1, 2}, at::kLong).repeat({kT, 1})));
}

TEST(Moe, GroupLimitedChoiceStaysInTheBestGroups) {
  RouterOptions o;
  o.experts = 8;
  o.top_k = 2;
  o.score = "sigmoid";
  o.n_group = 4;
  o.topk_group = 1;
  o.routed_scaling_factor = 2.0;
  // Logits chosen by hand: group 1 (experts 2, 3) has the best pair (sum of its two),
  // though expert 6 alone scores highest.
  const at::Tensor logits = at::tensor({0.f, 0.f, 2.f, 2.f, 0.f, 0.f, 3.f, -5.f}).unsqueeze(0);
  MoeWeights w = random_weights(o.experts, 4);
  const at::Tensor x = at::eye(kH).narrow(0, 0, 1);  // x = e_0: logits = router[:, 0]
  w.router.zero_();
  w.router.select(1, 0).copy_(logits[0]);
  const Routing r = route(x, w.router, w.bias, o);
  EXPECT_TRUE(at::equal(r.experts, at::tensor({2, 3}, at::kLong).unsqueeze(0)));
  // Sigmoid scores renormalised over the chosen two, then scaled: 1 each.
  EXPECT_TRUE(at::allclose(r.weights, at::full({1, 2}, 1.0f), 1e-6, 1e-6));
  o.n_group = 1;  // without the group limit expert 6 wins
  EXPECT_EQ(route(x, w.router, w.bias, o).experts[0][0].item<int64_t>(), 6);
}

// Node-limited routing (DeepSeek-V3's, each token's experts on at most M
// devices) is the group limit with one group per expert-parallel rank: at
// ep = 4 the 8 experts are 4 groups of 2 (rank j holds experts 2j, 2j+1, NOTE
// [expert dispatch]), and moe_router_group_topk = M bounds the ranks each
// token's rows go to.
TEST(Moe, NodeLimitedRoutingSendsEachTokenToAtMostMRanks) {
  RouterOptions o;
  o.experts = 8;
  o.top_k = 4;
  at::manual_seed(3);
  const at::Tensor x = at::randn({64, kH});
  MoeWeights w = random_weights(o.experts, 4);
  auto most_ranks = [&](const RouterOptions& opt) {
    const at::Tensor ranks = route(x, w.router, w.bias, opt).experts.div(2, "floor");  // the EP rank of each choice
    int64_t most = 0;
    for (int64_t t = 0; t < ranks.size(0); ++t) most = std::max(most, std::get<0>(at::_unique(ranks[t])).size(0));
    return most;
  };
  EXPECT_GT(most_ranks(o), 2);  // without the limit some token's 4 experts sit on 3 or 4 ranks
  o.n_group = 4;
  for (int64_t m : {2, 3}) {
    o.topk_group = m;
    EXPECT_LE(most_ranks(o), m) << "M = " << m;
  }
  o.topk_group = 1;  // one rank's 2 experts cannot hold a token's 4
  EXPECT_THROW(check_router_options(o), std::invalid_argument);
}

TEST(Moe, BalancingLossesFromTheirDefinitions) {
  RouterOptions o;
  o.experts = 4;
  o.top_k = 2;
  const MoeWeights w = random_weights(o.experts, 5);
  const Routing r = route(at::randn({8, kH}), w.router, w.bias, o);
  // Switch: E · Σ_e f_e P_e with f_e the fraction of the T·K assignments, P_e the mean score.
  const at::Tensor f = at::one_hot(r.experts.reshape({-1}), 4).to(at::kFloat).mean(0);
  const at::Tensor p = r.scores.mean(0);
  EXPECT_NEAR(switch_aux_loss(r, 2).item<double>(), 4.0 * (f * p).sum().item<double>(), 1e-6);
  // One sequence: the sequence-level loss is the batch loss; two: the mean of the halves'.
  EXPECT_NEAR(seq_aux_loss(r, 2, 1).item<double>(), switch_aux_loss(r, 2).item<double>(), 1e-6);
  const auto half = [&](int64_t i) {
    Routing h;
    h.aux_scores = r.aux_scores.narrow(0, 4 * i, 4);
    h.aux_experts = r.aux_experts.narrow(0, 4 * i, 4);
    return switch_aux_loss(h, 2).item<double>();
  };
  EXPECT_NEAR(seq_aux_loss(r, 2, 2).item<double>(), (half(0) + half(1)) / 2, 1e-6);
  EXPECT_NEAR(z_loss(r).item<double>(), r.logits.logsumexp(-1).pow(2).mean().item<double>(), 1e-7);
  // Balanced routing with uniform scores: every balancing loss's minimum, 1.
  Routing even;
  even.aux_scores = at::full({4, 4}, 0.25f);
  even.aux_experts = at::tensor({0, 1, 2, 3, 0, 1, 2, 3}, at::kLong).view({4, 2});
  EXPECT_NEAR(switch_aux_loss(even, 2).item<double>(), 1.0, 1e-6);
}

// NOTE [balancing losses over real tokens]: with padding weighed 0, each loss (value and gradient
// in the scores and logits) is the loss of the routing restricted to the real rows; per sequence,
// of each sequence's real rows (2 of 4 in one, 3 of 4 in the other: unequal numbers). The pooled
// counts are those of the real rows too.
TEST(Moe, BalancingLossesCountOnlyRealTokens) {
  RouterOptions o;
  o.experts = 4;
  o.top_k = 2;
  const MoeWeights w = random_weights(o.experts, 6);
  const at::Tensor x = at::randn({8, kH});
  const at::Tensor real = at::tensor({1, 0, 0, 1, 0, 1, 1, 1}, at::kFloat);
  const at::Tensor kept = at::tensor({0, 3, 5, 6, 7}, at::kLong);
  const auto restrict = [&](const Routing& r, const at::Tensor& rows) {
    Routing h;
    h.logits = r.logits.index_select(0, rows);
    h.aux_scores = r.aux_scores.index_select(0, rows);
    h.aux_experts = r.aux_experts.index_select(0, rows);
    return h;
  };
  using Loss = std::function<at::Tensor(const Routing&, bool)>;
  const std::vector<std::pair<const char*, Loss>> losses = {
      {"switch", [&](const Routing& r, bool weighed) { return weighed ? switch_aux_loss(r, 2, nullptr, real)
                                                                       : switch_aux_loss(restrict(r, kept), 2); }},
      {"seq", [&](const Routing& r, bool weighed) {
         if (weighed) return seq_aux_loss(r, 2, 2, nullptr, real);
         return (switch_aux_loss(restrict(r, kept.narrow(0, 0, 2)), 2) +
                 switch_aux_loss(restrict(r, kept.narrow(0, 2, 3)), 2)) / 2;
       }},
      {"z", [&](const Routing& r, bool weighed) { return weighed ? z_loss(r, nullptr, real) : z_loss(restrict(r, kept)); }},
  };
  for (const auto& [name, loss] : losses) {
    at::Tensor grads[2];
    double values[2];
    for (int weighed = 0; weighed < 2; ++weighed) {
      const at::Tensor gate = w.router.clone().requires_grad_(true);
      const at::Tensor l = loss(route(x, gate, w.bias, o), weighed == 1);
      l.backward();
      values[weighed] = l.item<double>(), grads[weighed] = gate.grad();
    }
    EXPECT_NEAR(values[1], values[0], 1e-6) << name;
    EXPECT_TRUE(at::allclose(grads[1], grads[0], 1e-5, 1e-7)) << name;
  }
  const Routing r = route(x, w.router, w.bias, o);
  EXPECT_TRUE(at::equal(pooled_counts(r, real), pooled_counts(restrict(r, kept))));
}

// NOTE [aux loss in the backward]: the router's gradient from y's backward with
// the aux loss attached equals that of backward(sum(y · g) + scale · aux), the
// loss written out; the forward value is y's, bit for bit.
TEST(Moe, AttachedAuxLossReachesTheRouterInTheLayersBackward) {
  RouterOptions o;
  o.experts = 4;
  o.top_k = 2;
  MoeWeights w = random_weights(o.experts, 6);
  w.router.requires_grad_(true);
  const at::Tensor x = at::randn({kT, kH}), g = at::randn({kT, kH});
  const double scale = 0.01 / 3;  // coefficient / micro-batches
  const auto grad = [&](bool attached) {
    w.router.mutable_grad() = at::Tensor();
    const MoeOutput out = moe_forward(x, w, o);
    const at::Tensor aux = switch_aux_loss(out.routing, o.top_k);
    if (attached) {
      const at::Tensor y = attach_aux_loss(out.y, aux, scale);
      EXPECT_TRUE(at::equal(y, out.y));
      y.backward(g);
    } else {
      ((out.y * g).sum() + scale * aux).backward();
    }
    return w.router.grad().clone();
  };
  const at::Tensor with = grad(true), written = grad(false);
  EXPECT_TRUE(at::allclose(with, written, 1e-6, 1e-7)) << (with - written).abs().max().item<float>();
  // And the aux loss matters: without it the router's gradient differs.
  w.router.mutable_grad() = at::Tensor();
  moe_forward(x, w, o).y.backward(g);
  EXPECT_GT((w.router.grad() - written).abs().max().item<float>(), 1e-6);
}

// NOTE [pooled aux loss]: three layers' routers, each layer's attached loss
// reading the counts of all three, written in after the forwards (as the
// executor writes the totals received from later stages): the routers'
// gradients are those of pooled_aux_loss (transformers' load_balancing_loss_func,
// tests/reference/test_moe_reference.cpp) through autograd.
TEST(Moe, PooledAuxLossFromLateTotalsIsTheWholeLossesGradient) {
  RouterOptions o;
  o.experts = 5;
  o.top_k = 2;
  const int64_t layers = 3;
  const double coeff = 0.02, scale = 0.5;  // coefficient, 1 / micro-batches
  std::vector<at::Tensor> routers, xs;
  for (int64_t l = 0; l < layers; ++l) {
    routers.push_back(random_weights(o.experts, 20 + static_cast<uint64_t>(l)).router.requires_grad_(true));
    xs.push_back(at::randn({kT, kH}));
  }
  const auto grads = [&] {
    std::vector<at::Tensor> out;
    for (at::Tensor& r : routers) out.push_back(r.grad().clone()), r.mutable_grad() = at::Tensor();
    return out;
  };
  std::vector<at::Tensor> logits;
  for (int64_t l = 0; l < layers; ++l) logits.push_back(route(xs[l], routers[l], at::Tensor(), o).logits);
  (pooled_aux_loss(logits, o.top_k) * (coeff * scale)).backward();
  const std::vector<at::Tensor> want = grads();

  // Each layer attached with `totals` still zero, which is then filled in: with the
  // three layers' counts (the executor's totals), or with the first layer's alone.
  const auto attached = [&](bool all_layers) {
    const at::Tensor totals = at::zeros({o.experts});
    at::Tensor counted = at::zeros({o.experts}), first;
    const at::Tensor y = at::zeros({kT, kH}).requires_grad_();
    at::Tensor out = y;
    for (int64_t l = 0; l < layers; ++l) {
      const Routing r = route(xs[l], routers[l], at::Tensor(), o);
      counted += pooled_counts(r);
      if (l == 0) first = counted.clone();
      const double nt = static_cast<double>(layers * kT);
      out = attach_pooled_aux_loss(out, r.aux_scores.sum(0), totals, coeff * scale * o.experts / (nt * nt));
    }
    EXPECT_EQ(counted.sum().item<double>(), static_cast<double>(layers * kT * o.top_k));
    totals.copy_(all_layers ? counted : first);
    out.backward(at::ones_like(out));
    EXPECT_TRUE(at::equal(y.grad(), at::ones_like(y)));  // y passes through unchanged
    return grads();
  };
  const std::vector<at::Tensor> got = attached(true);
  for (int64_t l = 0; l < layers; ++l)
    EXPECT_TRUE(at::allclose(got[l], want[l], 1e-5, 1e-8)) << l << ": " << (got[l] - want[l]).abs().max().item<float>();
  // Each layer's gradient needs every layer's counts: the first layer's alone give another one.
  const std::vector<at::Tensor> own = attached(false);
  EXPECT_GT((own[1] - want[1]).abs().max().item<float>(), 1e-4 * want[1].abs().max().item<float>());
  const at::Tensor y = at::zeros({kT, kH});
  EXPECT_THROW(attach_pooled_aux_loss(y, at::zeros({o.experts}), at::Tensor(), 1.0), std::invalid_argument);
}

TEST(Moe, RouterOptionsThatCannotRouteAreRefused) {
  const auto error = [](RouterOptions o) {
    try {
      check_router_options(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  RouterOptions o;
  o.experts = 8;
  o.top_k = 9;
  EXPECT_NE(error(o).find("model.moe_top_k (9)"), std::string::npos) << error(o);
  o.top_k = 2;
  o.n_group = 3;
  EXPECT_NE(error(o).find("model.moe_router_groups (3) must divide model.experts (8)"), std::string::npos) << error(o);
  o.n_group = 4;
  o.topk_group = 5;
  EXPECT_NE(error(o).find("model.moe_router_group_topk (5)"), std::string::npos) << error(o);
  o.topk_group = 2;
  o.score = "relu";
  EXPECT_NE(error(o).find("\"relu\""), std::string::npos) << error(o);
  o.score = "sigmoid";
  EXPECT_EQ(error(o), "accepted");
  // NOTE [MoE router]: groups of one expert route, each group's score its expert's.
  o.n_group = 8;
  o.topk_group = 2;
  EXPECT_EQ(error(o), "accepted");
  const Routing r = route(at::eye(8).narrow(0, 0, 3) * 4, at::eye(8), at::Tensor(), o);
  EXPECT_TRUE(at::equal(r.experts.select(1, 0), at::arange(3, at::kLong)));
}

}  // namespace
}  // namespace trident

namespace trident {
namespace {

at::Tensor flags(const std::vector<int64_t>& v) { return at::tensor(v, at::kLong).to(at::kBool); }

// NOTE [expert capacity]: 4 tokens, top-1 of 2 experts, capacity factor 1:
// each expert takes ceil(4 x 1 / 2 x 1) = 2. Expert 0 is chosen by tokens
// 0, 1, 2 (weights 0.2, 0.9, 0.5) and keeps its two best, or its two
// earliest by position; ties go to the earlier token; a dropped assignment is
// not dispatched and adds nothing to its token.
TEST(MoeCapacity, ExpertsKeepTheirBestOrEarliestAssignments) {
  Routing r;
  r.experts = at::tensor({0, 0, 0, 1}, at::kLong).view({4, 1});
  r.weights = at::tensor({0.2f, 0.9f, 0.5f, 0.7f}).view({4, 1});
  RouterOptions o;
  o.experts = 2, o.top_k = 1, o.capacity_factor = 1.0;
  const at::Tensor by_probs = keep_within_capacity(r, o);
  EXPECT_TRUE(at::equal(by_probs.view({-1}), flags({0, 1, 1, 1}))) << by_probs;
  o.drop_by_position = true;
  EXPECT_TRUE(at::equal(keep_within_capacity(r, o).view({-1}), flags({1, 1, 0, 1})));
  o.drop_by_position = false;
  r.weights = at::tensor({0.5f, 0.5f, 0.5f, 0.7f}).view({4, 1});  // a tie: the earlier tokens
  EXPECT_TRUE(at::equal(keep_within_capacity(r, o).view({-1}), flags({1, 1, 0, 1})));
  o.capacity_factor = 0.5;  // ceil(1) = 1 each
  EXPECT_TRUE(at::equal(keep_within_capacity(r, o).view({-1}), flags({1, 0, 0, 1})));
  // Dispatch and combine without the dropped: token 0's row is empty.
  const Permutation d = sort_by_expert(r.experts, 2, by_probs);
  EXPECT_TRUE(at::equal(d.counts, at::tensor({2, 1}, at::kLong))) << d.counts;
  EXPECT_TRUE(at::equal(d.token, at::tensor({1, 2, 3}, at::kLong))) << d.token;
  const at::Tensor rows = at::ones({3, 2});
  const at::Tensor y = unpermute(rows, r.weights, d, 4);
  EXPECT_TRUE(at::equal(y[0], at::zeros({2}))) << y;
  EXPECT_FLOAT_EQ(y[3][0].item<float>(), 0.7f);
}

}  // namespace
}  // namespace trident
