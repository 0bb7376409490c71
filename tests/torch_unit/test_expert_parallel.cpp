// Expert parallelism's dispatch and combine (parallel/expert_parallel.h,
// NOTE [expert dispatch]) on thread groups: the rows round-trip to the ranks
// of their experts and home again; the MoE layer split over ep ranks gives
// each rank the output and the input gradient of the whole layer on one rank,
// and each rank's experts the sum of every rank's gradient for them; a rank
// whose experts nobody chose, and an expert that takes every token, included.
// Under Gloo and under NCCL's rules (parallel/nccl_rules.h). And the
// experts' gradients averaged over their expert-data-parallel group, not the
// dense data-parallel one, in the bundle of groups the trainer builds.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/free_port.h"
#include "models/common/experts.h"
#include "models/common/moe_layer.h"
#include "models/common/moe_losses.h"
#include "parallel/token_permutation.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/layout.h"
#include "parallel/process_groups.h"
#include "parallel/thread_group.h"

namespace trident {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kH = 6, kI = 4;

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Rows sorted by global expert, each row's first column its expert (the
// rest its source rank and place): after dispatch_rows a rank holds only its
// own experts' rows, sorted by expert, and combine_rows brings every row home.
void round_trip(const std::string& backend) {
  const int64_t experts = 6;  // 3 per rank
  const auto errors = run_thread_group("ep", 2, milliseconds(30000), [&](Group& g) {
    const EpContext ep{&g};
    // Rank 0 sends 2, 0, 1 rows to experts 0..2 and 3, 0, 2 to 3..5; rank 1 none to rank 0's experts.
    const std::vector<int64_t> n = g.rank == 0 ? std::vector<int64_t>{2, 0, 1, 3, 0, 2}
                                               : std::vector<int64_t>{0, 0, 0, 1, 4, 0};
    const at::Tensor counts = at::tensor(n, at::kLong);
    std::vector<at::Tensor> parts;
    for (int64_t e = 0; e < experts; ++e)
      for (int64_t j = 0; j < n[e]; ++j)
        parts.push_back(at::tensor({static_cast<float>(e), static_cast<float>(g.rank), static_cast<float>(j)}));
    const at::Tensor rows = at::stack(parts);
    const ExpertExchange x = plan_exchange(ep, counts);
    const at::Tensor local = dispatch_rows(ep, rows, x);
    const std::vector<int64_t> want_local = g.rank == 0 ? std::vector<int64_t>{2, 0, 1} : std::vector<int64_t>{4, 4, 2};
    EXPECT_TRUE(at::equal(x.local_counts, at::tensor(want_local, at::kLong))) << x.local_counts;
    const at::Tensor ids = local.select(1, 0);
    EXPECT_TRUE(at::equal(std::get<0>(ids.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false)), ids)) << "sorted by expert";
    if (local.size(0) > 0) {
      EXPECT_GE(ids.min().item<float>(), 3 * g.rank);
      EXPECT_LT(ids.max().item<float>(), 3 * g.rank + 3);
    }
    // Within an expert: source rank first, then the source's order.
    if (g.rank == 1) {
      const at::Tensor expert3 = local.narrow(0, 0, 4);
      EXPECT_TRUE(at::equal(expert3.select(1, 1), at::tensor({0.f, 0.f, 0.f, 1.f}))) << local;
    }
    EXPECT_TRUE(at::equal(combine_rows(ep, local, x), rows));
  }, backend);
  expect_no_errors(errors);
}

TEST(ExpertParallel, RowsRoundTripToTheirExpertsRanks) { round_trip("gloo"); }
TEST(ExpertParallel, RowsRoundTripUnderNcclRules) { round_trip("nccl-rules"); }

// NOTE [all-to-all order]: the planted out-of-order all-to-all, with the
// validator's check of the action lists bypassed: rank 1 runs micro-batch 1's
// layer 3 before micro-batch 0's. Under NCCL's rules every rank's first
// exchange fails at once naming both ranks' calls (under NCCL itself, or
// Gloo, the equal-shaped counts would be exchanged between the wrong
// micro-batches without a word).
TEST(ExpertParallel, OutOfOrderAllToAllFailsUnderNcclRulesNamingBothRanks) {
  for (const std::string backend : {"nccl-rules", "gloo"}) {
    const auto errors = run_thread_group("ep", 2, milliseconds(30000), [&](Group& g) {
      EpContext ep{&g};
      ep.layer = 3;
      const at::Tensor counts = at::tensor(std::vector<int64_t>{1, 1}, at::kLong);  // 2 experts, one per rank
      for (int k = 0; k < 2; ++k) {
        const ExpertMicroBatch mb(g.rank == 0 ? k : 1 - k);
        plan_exchange(ep, counts);
      }
    }, backend);
    if (backend == "gloo") {
      expect_no_errors(errors);  // what the check exists for: nothing else notices
      continue;
    }
    for (int r = 0; r < 2; ++r)
      EXPECT_NE(errors[r].find("all-to-all number 0 of this group: group rank " + std::to_string(r) +
                               " issues forward micro-batch " + std::to_string(r) + " layer 3 counts but group rank " +
                               std::to_string(1 - r) + " issues forward micro-batch " + std::to_string(1 - r) +
                               " layer 3 counts"),
                std::string::npos)
          << "rank " << r << ": " << errors[r];
  }
}

struct Full {
  at::Tensor router, gate, up, down;
};

Full full_weights(int64_t experts) {
  at::manual_seed(7);
  return {at::randn({experts, kH}), at::randn({experts, kI, kH}) * 0.5, at::randn({experts, kI, kH}) * 0.5,
          at::randn({experts, kH, kI}) * 0.5};
}

// moe_forward at ep = 2 against ep = 1 on each rank's own tokens: y and dx
// equal, each rank's expert gradients the group's sum of the full ones.
// `bias`: the correction bias that only chooses (undefined: none).
// `allgather`: parallel.moe_dispatcher = "allgather" (NOTE [all-gather dispatch]).
void layer_matches_one_rank(const std::string& backend, const at::Tensor& bias, int64_t top_k, bool rank1_idle,
                            bool allgather = false) {
  const int64_t experts = 4, tokens = 9;
  const Full full = full_weights(experts);
  const auto errors = run_thread_group("ep", 2, milliseconds(30000), [&](Group& g) {
    const EpContext ep{&g, allgather};
    RouterOptions o;
    o.experts = experts;
    o.top_k = top_k;
    at::manual_seed(100 + g.rank);
    const at::Tensor x0 = at::randn({tokens, kH}), dy = at::randn({tokens, kH});

    // One rank, every expert.
    MoeWeights w1;
    w1.router = full.router;
    w1.bias = bias;
    w1.gate = full.gate.clone().requires_grad_(true);
    w1.up = full.up.clone().requires_grad_(true);
    w1.down = full.down.clone().requires_grad_(true);
    const at::Tensor x1 = x0.clone().requires_grad_(true);
    const MoeOutput ref = moe_forward(x1, w1, o);
    (ref.y * dy).sum().backward();

    // Expert parallel: this rank's two experts.
    MoeWeights w2 = w1;
    w2.gate = full.gate.narrow(0, 2 * g.rank, 2).clone().requires_grad_(true);
    w2.up = full.up.narrow(0, 2 * g.rank, 2).clone().requires_grad_(true);
    w2.down = full.down.narrow(0, 2 * g.rank, 2).clone().requires_grad_(true);
    const at::Tensor x2 = x0.clone().requires_grad_(true);
    const MoeOutput out = moe_forward(x2, w2, o, &ep);
    (out.y * dy).sum().backward();

    EXPECT_TRUE(at::allclose(out.y, ref.y, 1e-6, 1e-6)) << "rank " << g.rank;
    EXPECT_TRUE(at::allclose(x2.grad(), x1.grad(), 1e-6, 1e-6)) << "rank " << g.rank;
    for (auto [mine, theirs] : {std::pair{w2.gate, w1.gate}, {w2.up, w1.up}, {w2.down, w1.down}}) {
      at::Tensor sum = theirs.grad().clone();
      all_reduce(g, sum);  // every rank's tokens' gradient for every expert
      ASSERT_TRUE(mine.grad().defined()) << "rank " << g.rank << ": the experts got no gradient";
      EXPECT_TRUE(at::allclose(mine.grad(), sum.narrow(0, 2 * g.rank, 2), 1e-5, 1e-6)) << "rank " << g.rank;
      if (rank1_idle && g.rank == 1) {
        EXPECT_EQ(mine.grad().abs().sum().item<float>(), 0.f);
      }
    }
  }, backend);
  expect_no_errors(errors);
}

TEST(ExpertParallel, LayerAtEp2EqualsOneRankForwardAndBackward) {
  layer_matches_one_rank("gloo", at::Tensor(), 2, false);
}

TEST(ExpertParallel, LayerAtEp2UnderNcclRules) { layer_matches_one_rank("nccl-rules", at::Tensor(), 2, false); }

// The all-gather dispatcher: the same layer, tokens gathered and outputs
// reduce-scattered instead of the all-to-alls; a rank whose experts nobody
// chose included.
TEST(ExpertParallel, AllGatherDispatcherEqualsOneRank) {
  layer_matches_one_rank("gloo", at::Tensor(), 2, false, true);
  layer_matches_one_rank("nccl-rules", at::Tensor(), 2, false, true);
  layer_matches_one_rank("gloo", at::tensor({100.f, 0.f, 0.f, 0.f}), 1, true, true);
}

// The correction bias sends every token to expert 0 (top-1): rank 0 receives
// every row of the group, rank 1 none, and rank 1's experts still get their
// (zero) gradient in the same backward.
TEST(ExpertParallel, OneExpertTakesEveryTokenAndARankGetsNone) {
  layer_matches_one_rank("gloo", at::tensor({100.f, 0.f, 0.f, 0.f}), 1, true);
}

// The whole bundle of process groups of `layout`, one thread per rank (each
// with one intra-op thread) meeting over a TCPStore on a free port, as the
// trainer builds it, then body(groups); returns each rank's error ("" for
// none). Each multi-rank group's first collective is issued under one lock
// and the world's barrier last: libtorch's flight recorder registers a group
// at its first collective in one process-wide map, unlocked (NOTE [first
// collective] in parallel/thread_group.cpp), so no two ranks may do that at
// once, and none goes on before every rank has.
std::vector<std::string> run_layout(const Layout& layout, const std::function<void(ProcessGroups&)>& body) {
  static std::mutex issuing;
  const int port = pick_free_port();
  std::vector<std::string> errors(static_cast<size_t>(layout.world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < layout.world; ++rank)
    threads.emplace_back([&, rank] {
      try {
        at::set_num_threads(1);
        WorldEnv env;
        env.rank = rank, env.local_rank = rank, env.world_size = layout.world, env.master_port = port;
        ProcessGroups pgs(env, layout, "gloo", milliseconds(30000));
        for (const Group* g : {&pgs.dp, &pgs.expert_dp, &pgs.world}) {
          if (!g->pg) continue;
          c10::intrusive_ptr<c10d::Work> first;
          {
            std::lock_guard<std::mutex> lock(issuing);
            first = g->pg->barrier(c10d::BarrierOptions{});
          }
          wait_work(*g, first, "first barrier", -1);
        }
        body(pgs);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

Param grad_param(const std::string& name, bool expert) {
  Param p;
  p.info.name = name;
  p.info.full_shape = {3};
  p.info.expert = expert;
  p.tensor = at::zeros({3}).requires_grad_(true);
  return p;
}

// NOTE [expert grid]: at world 4 = dp 4 with ep 2 the dense gradients average
// over all four ranks, the experts' over their expert-data-parallel group:
// ranks {0, 2} hold experts 0-1, ranks {1, 3} experts 2-3 (the ep groups are
// {0, 1} and {2, 3}). Rank r's gradients are all r + 1: after the sync the
// dense ones are (1+2+3+4)/4 = 2.5, the experts' (1+3)/4 = 1 on ranks 0 and 2
// and (2+4)/4 = 1.5 on ranks 1 and 3 (divided by dp all the same: NOTE
// [gradient buckets]); reduced over dp instead, they would be 2.5 too. The
// norm counts the dense gradient once and each expert set once: 3 · (2.5² +
// 1² + 1.5²) = 28.5. Every gradient is exact in fp32.
TEST(ExpertParallel, ExpertGradientsAverageOverTheirExpertDataParallelGroupNotDp) {
  const Layout layout = Layout::make(4, 1, 1, 4, /*ep=*/2);
  ASSERT_EQ(layout.expert_dp_group(0), (std::vector<int>{0, 2}));
  ASSERT_EQ(layout.expert_dp_group(3), (std::vector<int>{1, 3}));
  const auto errors = run_layout(layout, [&](ProcessGroups& pgs) {
    const int r = pgs.rank();
    Param dense = grad_param("dense", false), experts = grad_param("experts", true);
    DataParallel dp({{&dense, &experts}},
                    DataParallelGroups{&pgs.dp_cp, &pgs.tp, &pgs.model_parallel, &pgs.embedding, &pgs.expert_dp},
                    DataParallelOptions{}, AdamWOptions{}, {}, {{"dense", 0}, {"experts", 1}});
    dp.zero_grads();
    dense.tensor.mutable_grad().fill_(r + 1);
    experts.tensor.mutable_grad().fill_(r + 1);
    dp.finish_grad_sync();
    const std::string who = "rank " + std::to_string(r) + ": ";
    if (!dense.tensor.grad().eq(2.5).all().item<bool>())
      throw std::runtime_error(who + "the dense gradient is not the dp average 2.5");
    const float want = r % 2 == 0 ? 1.0f : 1.5f;
    if (!experts.tensor.grad().eq(want).all().item<bool>()) {
      std::ostringstream os;
      os << who << "the experts' gradient is";
      for (int64_t i = 0; i < 3; ++i) os << ' ' << experts.tensor.grad()[i].item<float>();
      os << ", not their edp group's average " << want << " (2.5: reduced over dp)";
      throw std::runtime_error(os.str());
    }
    // Within 1e-12: each parameter's fp64 norm is squared again (a few roundings of 1e-16).
    const double norm = dp.clip_grads(0).item<double>();
    if (std::abs(norm - std::sqrt(28.5)) > 1e-12 * std::sqrt(28.5))
      throw std::runtime_error(who + "norm " + std::to_string(norm) + ", not sqrt(28.5) = " +
                               std::to_string(std::sqrt(28.5)));
  });
  expect_no_errors(errors);
}

}  // namespace
}  // namespace trident
