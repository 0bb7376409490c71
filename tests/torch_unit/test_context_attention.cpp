// Attention over a context-parallel sequence (models/common/context_attention.h)
// against causal attention over the whole sequence on one rank: each rank's
// output rows and its dq, dk, dv equal the whole sequence's at its chunks'
// positions (NOTE [context split]), for every cp_comm kind, grouped-query
// heads, cp 2 and 4, under Gloo and under NCCL's rules (the ring's coalesced
// steps: NOTE [ring order]).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
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

// (b, heads, s, d) inputs, a fixed output weighting, and the whole sequence's
// output and gradients of sum(out * w).
Whole whole(int64_t s, int64_t heads, int64_t kv) {
  at::manual_seed(11);
  Whole x;
  x.q = at::randn({2, heads, s, 8}).requires_grad_();
  x.k = at::randn({2, kv, s, 8}).requires_grad_();
  x.v = at::randn({2, kv, s, 8}).requires_grad_();
  x.w = at::randn({2, heads, s, 8});
  x.out = causal_attention_explicit(x.q, x.k, x.v);
  (x.out * x.w).sum().backward();
  x.dq = x.q.grad(), x.dk = x.k.grad(), x.dv = x.v.grad();
  return x;
}

void check(const std::string& comm, int cp, const std::string& backend, int64_t heads = 4, int64_t kv = 2) {
  const int64_t s = 8 * cp;
  const Whole x = whole(s, heads, kv);
  const auto errors = run_thread_group("cp", cp, std::chrono::milliseconds(30000), [&](Group& g) {
    const CpContext ctx{&g, parse_cp_comm(comm)};
    const at::Tensor pos = at::tensor(context_positions(s, cp, g.rank), at::kLong);
    const auto mine = [&](const at::Tensor& t) { return t.detach().index_select(2, pos).contiguous(); };
    const at::Tensor q = mine(x.q).requires_grad_(), k = mine(x.k).requires_grad_(), v = mine(x.v).requires_grad_();
    const at::Tensor out = context_attention(ctx, q, k, v);
    (out * mine(x.w)).sum().backward();
    const double tol = 2e-6;
    EXPECT_TRUE(at::allclose(out, mine(x.out), tol, tol)) << "out, rank " << g.rank << ": max diff "
                                                          << (out - mine(x.out)).abs().max().item<double>();
    EXPECT_TRUE(at::allclose(q.grad(), mine(x.dq), tol, tol)) << "dq, rank " << g.rank << ": max diff "
                                                              << (q.grad() - mine(x.dq)).abs().max().item<double>();
    EXPECT_TRUE(at::allclose(k.grad(), mine(x.dk), tol, tol)) << "dk, rank " << g.rank << ": max diff "
                                                              << (k.grad() - mine(x.dk)).abs().max().item<double>();
    EXPECT_TRUE(at::allclose(v.grad(), mine(x.dv), tol, tol)) << "dv, rank " << g.rank << ": max diff "
                                                              << (v.grad() - mine(x.dv)).abs().max().item<double>();
  }, backend);
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(ContextAttention, RingEqualsWholeSequenceCp2) { check("p2p", 2, "gloo"); }
TEST(ContextAttention, RingEqualsWholeSequenceCp4) { check("p2p", 4, "gloo"); }
TEST(ContextAttention, RingEqualsWholeSequenceUnderNcclRules) { check("p2p", 4, "nccl-rules"); }
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
