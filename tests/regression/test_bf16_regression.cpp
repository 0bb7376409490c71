// Mixed precision (NOTE [bf16] in models/gpt/gpt.h): gpt-tiny trained 20 steps
// with training.precision = "bf16" follows the fp32 run, and bf16 keeps the
// layout guarantees: pp-only is bit-identical to the bf16 pp = 1 run, tp and
// dp agree with it within the bf16 tolerance.
//
// Tolerances. bf16 keeps 8 significant bits: one rounding is off by up to
// 2^-9 = 2e-3 relative. The loss is a mean over 8 x 2 x 32 tokens per step
// whose rounding errors largely average out (measured: at most 6.8e-5 over 20
// steps against fp32, benchmarks/results/bf16_drift.txt); the gradient norm is
// a single reduction over bf16 products that lost up to 2^-9 each, accumulated
// over 8 layers (measured: at most 6.7e-3). We allow 1e-3 on the loss and 2e-2
// on the grad norm: about 15x and 3x the measured differences, and an fp32/bf16 mix-up that
// left, say, LayerNorm or the cross-entropy in bf16 shows up as more.
#include <gtest/gtest.h>

#include "regression_util.h"

namespace trident::testing {
namespace {

constexpr double kLossTol = kBf16LossTol, kNormTol = kBf16NormTol;

::testing::AssertionResult within_bf16(const std::vector<StepRow>& ref, const TrainRun& run) {
  if (auto c = completed(run); !c) return c;
  if (auto m = steps_match(ref, run.rows, "loss", kLossTol); !m) return m << "\n  in " << run.command;
  if (auto m = steps_match(ref, run.rows, "grad_norm", kNormTol); !m) return m << "\n  in " << run.command;
  std::cout << "max relative difference: loss " << max_rel_diff(ref, run.rows, "loss") << ", grad_norm "
            << max_rel_diff(ref, run.rows, "grad_norm") << std::endl;
  return ::testing::AssertionSuccess();
}

const TrainRun& bf16_reference() {
  static const TrainRun run = cached_reference({"training.precision=bf16"});  // NOTE [reference cache]
  return run;
}

TEST(Bf16, FollowsTheFp32RunWithinTheBf16Tolerance) {
  const TrainRun fp32 = cached_reference();
  ASSERT_TRUE(completed(fp32));
  EXPECT_TRUE(within_bf16(fp32.rows, bf16_reference()));
  // ...and is not simply the fp32 run: bf16 rounding must show somewhere.
  EXPECT_GT(max_rel_diff(fp32.rows, bf16_reference().rows, "grad_norm"), 0);
}

TEST(Bf16, PipelineOnlyIsBitIdentical) {
  EXPECT_TRUE(matches_reference(bf16_reference().rows,
                                cached_run(2, {"training.precision=bf16", "parallel.pp=2", "schedule.kind=1f1b"}).run,
                                0));
}

TEST(Bf16, TensorParallelWithinTheBf16Tolerance) {
  EXPECT_TRUE(within_bf16(bf16_reference().rows, cached_run(2, {"training.precision=bf16", "parallel.tp=2"}).run));
}

TEST(Bf16, DataParallelWithinTheBf16Tolerance) {
  EXPECT_TRUE(within_bf16(bf16_reference().rows, cached_run(2, {"training.precision=bf16", "parallel.dp=2"}).run));
}

// Recomputation stays exact under bf16 too.
TEST(Bf16, FullRecomputeIsBitIdentical) {
  EXPECT_TRUE(matches_reference(bf16_reference().rows,
                                cached_run(1, {"training.precision=bf16", "training.recompute=full"}).run, 0));
}

}  // namespace
}  // namespace trident::testing
