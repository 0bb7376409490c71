// The SDPA attention core (models/common/attention.h) against softmax(QKᵀ/√d)V written
// out: forward and gradients in fp32 within fp32 rounding, the causal mask
// (a change to a later key leaves earlier queries alone), the head slice a
// tensor-parallel rank computes, recomputation, and bf16 through the same path.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include "models/common/attention.h"
#include "parallel/recompute.h"

namespace trident {
namespace {

struct Qkv {
  at::Tensor q, k, v;
};

// (batch 2, heads 4, seq 16, head_dim 8), seeded, requiring grad.
Qkv random_qkv(at::ScalarType dtype, int64_t seed = 7) {
  at::manual_seed(seed);
  auto make = [&] { return at::randn({2, 4, 16, 8}).to(dtype).requires_grad_(true); };
  Qkv t;
  t.q = make();
  t.k = make();
  t.v = make();
  return t;
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).abs().max() / b.to(at::kDouble).abs().max()).item<double>();
}

// Gradients of sum(out * w) for a fixed random w, for q, k and v.
std::vector<at::Tensor> grads(const at::Tensor& out, const Qkv& t) {
  at::manual_seed(99);
  at::Tensor w = at::randn(out.sizes()).to(out.scalar_type());
  return torch::autograd::grad({(out * w).sum()}, {t.q, t.k, t.v});
}

TEST(Attention, SdpaEqualsExplicitSoftmaxInFp32) {
  Qkv t = random_qkv(at::kFloat);
  at::Tensor fused = causal_attention(t.q, t.k, t.v, 0.0);
  at::Tensor explicit_ = causal_attention_explicit(t.q, t.k, t.v);
  // fp32 rounding of sums over 16 keys of 8-wide dot products: a few ulps of 1.
  EXPECT_LT(max_rel(fused, explicit_), 1e-6);
  auto gf = grads(fused, t), ge = grads(explicit_, t);
  for (int i = 0; i < 3; ++i) EXPECT_LT(max_rel(gf[i], ge[i]), 1e-5) << "grad " << i;
  // Not a vacuous comparison: without the causal mask the results differ.
  at::Tensor full = at::scaled_dot_product_attention(t.q, t.k, t.v, {}, 0.0, /*is_causal=*/false);
  EXPECT_GT(max_rel(full, explicit_), 1e-2);
}

// Grouped-query attention (NOTE [grouped heads]): 4 query heads over 2
// key/value heads, against the written-out attention over keys and values
// repeated per group by repeat_interleave (query heads 0, 1 read head 0;
// 2, 3 read head 1); the gradients of the 2 key/value heads sum over their groups.
TEST(Attention, GroupedHeadsReadTheirGroupsKeyValueHead) {
  at::manual_seed(11);
  const at::Tensor q = at::randn({2, 4, 16, 8}).requires_grad_(true);
  const at::Tensor k = at::randn({2, 2, 16, 8}).requires_grad_(true);
  const at::Tensor v = at::randn({2, 2, 16, 8}).requires_grad_(true);
  const at::Tensor grouped = causal_attention(q, k, v, 0.0);
  const at::Tensor reference =
      causal_attention_explicit(q, at::repeat_interleave(k, 2, 1), at::repeat_interleave(v, 2, 1));
  ASSERT_EQ(grouped.sizes(), reference.sizes());
  EXPECT_LT(max_rel(grouped, reference), 1e-6);
  at::manual_seed(99);
  const at::Tensor w = at::randn(grouped.sizes());
  const auto gg = torch::autograd::grad({(grouped * w).sum()}, {q, k, v});
  const auto gr = torch::autograd::grad({(reference * w).sum()}, {q, k, v});
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(gg[i].sizes(), gr[i].sizes()) << "grad " << i;
    EXPECT_LT(max_rel(gg[i], gr[i]), 1e-5) << "grad " << i;
  }
  // Not vacuous: query heads paired with key/value heads the other way (i % 2) differ.
  const at::Tensor tiled = causal_attention_explicit(q, k.repeat({1, 2, 1, 1}), v.repeat({1, 2, 1, 1}));
  EXPECT_GT(max_rel(tiled, reference), 1e-2);
}

TEST(Attention, CausalMaskHidesLaterKeys) {
  Qkv t = random_qkv(at::kFloat);
  at::Tensor before = causal_attention(t.q, t.k, t.v, 0.0).detach();
  at::NoGradGuard no_grad;
  at::Tensor k2 = t.k.clone(), v2 = t.v.clone();
  k2.narrow(2, 10, 6).add_(3.0);  // keys and values of positions 10..15 change
  v2.narrow(2, 10, 6).mul_(-2.0);
  at::Tensor after = causal_attention(t.q, k2, v2, 0.0);
  EXPECT_TRUE(at::equal(before.narrow(2, 0, 10), after.narrow(2, 0, 10)));  // queries 0..9 see none of it
  EXPECT_FALSE(at::allclose(before.narrow(2, 10, 6), after.narrow(2, 10, 6)));
}

TEST(Attention, HeadSliceIsATensorParallelRanksShare) {
  // tp = 2: rank r holds heads [2r, 2r + 2); its output is that slice of the full one.
  Qkv t = random_qkv(at::kFloat);
  at::Tensor full = causal_attention(t.q, t.k, t.v, 0.0);
  for (int64_t r = 0; r < 2; ++r) {
    at::Tensor part = causal_attention(t.q.narrow(1, 2 * r, 2), t.k.narrow(1, 2 * r, 2), t.v.narrow(1, 2 * r, 2), 0.0);
    EXPECT_LT(max_rel(part, full.narrow(1, 2 * r, 2)), 1e-6) << "rank " << r;
  }
}

TEST(Attention, RecomputedGradientsAreBitIdentical) {
  Qkv t = random_qkv(at::kFloat);
  at::Tensor packed = at::stack({t.q, t.k, t.v});  // recompute() takes one input tensor
  auto core = [](const at::Tensor& x) { return causal_attention(x[0], x[1], x[2], 0.0); };
  at::Tensor plain = core(packed), again = recompute(core, packed);
  EXPECT_TRUE(at::equal(plain, again));
  auto gp = grads(plain, t), gr = grads(again, t);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(at::equal(gp[i], gr[i])) << "grad " << i;
}

TEST(Attention, Bf16ThroughTheSamePath) {
  // bf16 has an 8-bit mantissa (relative rounding 2^-8 = 3.9e-3); the fused
  // kernel accumulates in fp32, so its error against the fp32 result is a few
  // bf16 roundings of the inputs and output, and no worse than the explicit
  // bf16 path's.
  Qkv t32 = random_qkv(at::kFloat), t16 = random_qkv(at::kBFloat16);
  at::Tensor truth = causal_attention_explicit(t32.q, t32.k, t32.v);
  at::Tensor fused = causal_attention(t16.q, t16.k, t16.v, 0.0);
  ASSERT_EQ(fused.scalar_type(), at::kBFloat16);
  const double err_fused = max_rel(fused, truth);
  const double err_explicit = max_rel(causal_attention_explicit(t16.q, t16.k, t16.v), truth);
  EXPECT_LT(err_fused, 3e-2);
  EXPECT_LT(err_fused, 1.5 * err_explicit + 4e-3);
}

}  // namespace
}  // namespace trident
