// Correctness contract for data parallelism: gpt-tiny trained for 20 steps at
// dp = 2 (alone, and with pp and tp) logs every step's loss and grad norm
// within a relative 1e-5 of the single-process reference: the same global
// batch, split over replicas whose gradients are averaged.
#include <gtest/gtest.h>

#include "regression_util.h"

namespace trident::testing {
namespace {

constexpr double kRelTol = 1e-5;

// Compares a run with the single-process one; `split` overrides are given to
// both (see NOTE [larger micro-batches under TP] in test_tp_regression.cpp).
void expect_matches(int nproc, std::vector<std::string> sets, const std::vector<std::string>& split = {}) {
  const TrainRun ref = cached_reference(split);  // NOTE [reference cache]
  ASSERT_TRUE(completed(ref));
  TempDir dir("dp");
  sets.insert(sets.end(), split.begin(), split.end());
  const TrainRun run = train_tiny(dir.path(), nproc, sets);
  EXPECT_TRUE(matches_reference(ref.rows, run, kRelTol));
  EXPECT_EQ(static_cast<int>(param_lines(run.result.output).size()), nproc) << run.result.output;
}

TEST(DpRegression, Dp2) { expect_matches(2, {"parallel.dp=2"}); }

TEST(DpRegression, Dp2Pp2) { expect_matches(4, {"parallel.dp=2", "parallel.pp=2"}); }

// The 3D layout of the roadmap's main job: tp2 x pp2 x dp2 on 8 ranks.
// 2 micro-batches of 4 per replica keep its TP all-reduces few.
TEST(DpRegression, Tp2Pp2Dp2) {
  expect_matches(8, {"parallel.tp=2", "parallel.pp=2", "parallel.dp=2"}, {"training.micro_batch_size=4"});
}

}  // namespace
}  // namespace trident::testing
