// Activation recomputation (NOTE [recomputation]) changes no arithmetic: gpt-tiny
// trained for 20 steps with training.recompute = full or selective logs the
// very same losses and grad norms as without it, on one rank and under
// pipeline schedules with the I/W split. And it does what it is for: the measured
// activation bytes of an in-flight micro-batch go down.
#include <gtest/gtest.h>


#include "regression_util.h"

namespace trident::testing {
namespace {

// Rank 0's peak activation bytes, from its rank summary; -1 without one.
long long activation_bytes(const TrainRun& run) {
  const auto ranks = rank_summaries(run.dir);
  return ranks.empty() ? -1 : field(ranks[0], "peak_activation_bytes");
}

const TrainRun& reference() {
  static const TrainRun run = cached_reference();  // NOTE [reference cache]
  return run;
}

TEST(Recompute, FullIsBitIdenticalAndHoldsLessThanAThirdOfTheActivations) {
  const TrainRun run = cached_run(1, {"training.recompute=full"}).run;
  EXPECT_TRUE(matches_reference(reference().rows, run, 0));
  const long long none = activation_bytes(reference()), full = activation_bytes(run);
  std::cout << "activation bytes: none " << none << ", full " << full << std::endl;
  ASSERT_GT(none, 0);
  ASSERT_GT(full, 0);
  // Each block keeps only its (b, s, h) input: measured 2.74 MB -> 0.27 MB.
  EXPECT_LT(full * 3, none);
}

TEST(Recompute, SelectiveIsBitIdenticalAndHoldsLess) {
  const TrainRun run = cached_run(1, {"training.recompute=selective"}).run;
  EXPECT_TRUE(matches_reference(reference().rows, run, 0));
  const long long none = activation_bytes(reference()), sel = activation_bytes(run);
  std::cout << "activation bytes: none " << none << ", selective " << sel << std::endl;
  ASSERT_GT(sel, 0);
  // The MLP's (b, s, ffn) up projection goes (measured 2.22 MB -> 1.76 MB);
  // SDPA's attention core held no (s, s) scores to begin with.
  EXPECT_LT(sel * 10, none * 9);
}

// The I/W split defers linear layers' weight gradients from inside the
// recomputed backward; they must still arrive, in micro-batch order.
TEST(Recompute, FullUnderZeroBubbleSplitIsBitIdentical) {
  EXPECT_TRUE(matches_reference(
      reference().rows, cached_run(2, {"parallel.pp=2", "schedule.kind=zb-h1", "training.recompute=full"}).run, 0));
}

TEST(Recompute, SelectiveUnderZbVIsBitIdentical) {
  EXPECT_TRUE(matches_reference(reference().rows,
                                cached_run(2, {"parallel.pp=2", "schedule.kind=zb-v", "schedule.chunks=2",
                                               "training.recompute=selective"})
                                    .run,
                                0));
}

// Dropout with recomputation is refused (core/config_model.cpp says why), not
// silently run with different masks.
TEST(Recompute, WithDropoutIsAnError) {
  TempDir dir("recompute-dropout");
  const TrainRun run = train_tiny(dir.path(), 1, {"model.dropout=0.1", "training.recompute=full"});
  EXPECT_NE(run.result.status, 0);
  EXPECT_NE(run.result.output.find("training.recompute = \"full\" with model.dropout = 0.1: expected"),
            std::string::npos)
      << run.result.output;
}

}  // namespace
}  // namespace trident::testing
