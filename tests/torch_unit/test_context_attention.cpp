// Attention over a context-parallel sequence (models/common/context_attention.h)
// against causal attention over the whole sequence on one rank: each rank's
// output rows and its dq, dk, dv equal the whole sequence's at its chunks'
// positions (NOTE [context split]), within 1e-6 of the largest value (fp32
// against the fp64 answer), for every cp_comm kind, grouped-query heads,
// cp 2 and 4, under Gloo and under NCCL's rules (the ring's coalesced steps:
// NOTE [ring order]).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/context_split.h"
#include "models/common/attention.h"
#include "models/common/context_attention.h"
#include "parallel/thread_group.h"

namespace trident {
namespace {

struct Whole {
  at::Tensor q, k, v, w, out, dq, dk, dv;
};

// (b, heads, s, d) fp32 inputs, a fixed output weighting, and the whole
// sequence's output and gradients of sum(out * w), computed in fp64 from the
// same values: the exact answer the fp32 kinds are held to.
Whole whole(int64_t s, int64_t heads, int64_t kv) {
  at::manual_seed(11);
  Whole x;
  x.q = at::randn({2, heads, s, 8});
  x.k = at::randn({2, kv, s, 8});
  x.v = at::randn({2, kv, s, 8});
  x.w = at::randn({2, heads, s, 8});
  const at::Tensor q = x.q.to(at::kDouble).requires_grad_(), k = x.k.to(at::kDouble).requires_grad_(),
                   v = x.v.to(at::kDouble).requires_grad_();
  // softmax(q kᵀ / √d, causal) v in fp64 throughout, each key/value head read by its query group.
  const int64_t group = heads / kv;
  const auto rep = [&](const at::Tensor& t) { return t.repeat_interleave(group, 1); };
  const at::Tensor future = at::ones({s, s}, at::kBool).triu(1);
  const at::Tensor p = at::softmax(
      (at::matmul(q, rep(k).transpose(-2, -1)) / std::sqrt(8.0)).masked_fill(future, -INFINITY), -1);
  const at::Tensor out = at::matmul(p, rep(v));
  (out * x.w.to(at::kDouble)).sum().backward();
  x.out = out.detach(), x.dq = q.grad(), x.dk = k.grad(), x.dv = v.grad();
  return x;
}

// max |got - want| / max |want|: within 1e-6 is fp32's rounding of the whole.
::testing::AssertionResult near(const at::Tensor& got, const at::Tensor& want, const char* what, int rank) {
  const double err = (got.to(at::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
  if (err <= 1e-6) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ", rank " << rank << ": relative max difference " << err;
}

// kernel: the ring's step kernel (NOTE [ring step kernels]); context_attention's own choice when unset.
void check(const std::string& comm, int cp, const std::string& backend, int64_t heads = 4, int64_t kv = 2,
           std::optional<RingKernel> kernel = std::nullopt) {
  const int64_t s = 8 * cp;
  const Whole x = whole(s, heads, kv);
  const auto errors = run_thread_group("cp", cp, std::chrono::milliseconds(30000), [&](Group& g) {
    const CpContext ctx{&g, parse_cp_comm(comm)};
    const at::Tensor pos = at::tensor(context_positions(s, cp, g.rank), at::kLong);
    const auto mine = [&](const at::Tensor& t) { return t.detach().index_select(2, pos).contiguous(); };
    const at::Tensor q = mine(x.q).requires_grad_(), k = mine(x.k).requires_grad_(), v = mine(x.v).requires_grad_();
    const at::Tensor out = kernel ? ring_attention(ctx, q, k, v, *kernel) : context_attention(ctx, q, k, v);
    (out * mine(x.w)).sum().backward();
    EXPECT_TRUE(near(out, mine(x.out), "out", g.rank));
    EXPECT_TRUE(near(q.grad(), mine(x.dq), "dq", g.rank));
    EXPECT_TRUE(near(k.grad(), mine(x.dk), "dk", g.rank));
    EXPECT_TRUE(near(v.grad(), mine(x.dv), "dv", g.rank));
  }, backend);
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(ContextAttention, RingEqualsWholeSequenceCp2) { check("p2p", 2, "gloo"); }
TEST(ContextAttention, RingEqualsWholeSequenceCp4) { check("p2p", 4, "gloo"); }
TEST(ContextAttention, RingEqualsWholeSequenceUnderNcclRules) { check("p2p", 4, "nccl-rules"); }
// The step kernels both ways: the CPU's fused flash kernel (context_attention's
// choice here) and the explicit fp32 products every other device runs.
TEST(ContextAttention, RingStepKernelsBothEqualWholeSequence) {
  check("p2p", 4, "gloo", 4, 2, RingKernel::kFused);
  check("p2p", 4, "gloo", 4, 2, RingKernel::kExplicit);
  check("p2p", 2, "gloo", 4, 4, RingKernel::kExplicit);
}
TEST(ContextAttention, AllGatherEqualsWholeSequence) {
  check("all_gather", 2, "gloo");
  check("all_gather", 4, "gloo", 4, 4);
}
TEST(ContextAttention, UlyssesEqualsWholeSequence) {
  check("a2a", 2, "gloo");
  check("a2a", 2, "nccl-rules", 4, 4);
}

// NOTE [context split]: rank r keeps chunks r and 2cp-1-r; the gather order
// puts every rank's pieces back in sequence order.
TEST(ContextAttention, SplitKeepsChunksRAndMirror) {
  EXPECT_EQ(context_positions(8, 2, 0), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(context_positions(8, 2, 1), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(context_positions(4, 1, 0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(context_gather_order(8, 2), (std::vector<int64_t>{0, 1, 4, 5, 6, 7, 2, 3}));
}

}  // namespace
}  // namespace trident
