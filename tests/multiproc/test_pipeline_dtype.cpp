// parallel.pipeline_dtype (NOTE [pipeline dtype] in runtime/executor.h): under
// bf16 training the default ("auto" = bf16) sends the hidden state and its
// gradient between stages as bf16. gpt-tiny at pp = 2, 1f1b, 3 steps:
//  - every rank's peak_boundary_bytes (rank summary) is exactly half the
//    "fp32" run's, and a whole number of bf16 (mbs, seq, hidden) tensors;
//  - losses and gradient norms are bit-identical to the "fp32" run's, since
//    bf16 -> fp32 -> bf16 is exact (and test_bf16_regression holds the bf16
//    pp = 2 run bit-identical to pp = 1).
#include <gtest/gtest.h>

#include <map>

#include "tests/run_helpers.h"

namespace trident {
namespace {

struct TrainRun {
  std::vector<testing::StepRow> rows;
  std::vector<int64_t> boundary_bytes;  // per rank
  std::string output;
};

TrainRun train(const std::string& pipeline_dtype) {
  const std::string dir = testing::temp_dir() + "trident_pipeline_dtype_" + pipeline_dtype;
  auto r = testing::run_command(testing::bin("trident") + " launch --master-port 0 --nproc-per-node 2 -- " +
                                testing::bin("trident") + " train --config " + testing::src("configs/gpt-tiny.toml") +
                                " --set parallel.pp=2 --set training.precision=bf16 --set training.steps=3"
                                " --set training.warmup_steps=0 --set parallel.pipeline_dtype=" + pipeline_dtype +
                                " --set logging.dir=" + dir);
  EXPECT_EQ(r.status, 0) << r.output;
  TrainRun run{testing::read_metrics(dir + "/metrics.jsonl"), {}, r.output};
  for (const auto& s : testing::rank_summaries(dir))  // NOTE [rank summary]
    run.boundary_bytes.push_back(testing::field(s, "peak_boundary_bytes"));
  return run;
}

TEST(PipelineDtype, Bf16HalvesTheBoundaryBytesAndChangesNoResult) {
  const TrainRun bf16 = train("auto"), fp32 = train("fp32");
  ASSERT_EQ(bf16.boundary_bytes.size(), 2u) << bf16.output;
  ASSERT_EQ(fp32.boundary_bytes.size(), 2u) << fp32.output;
  const int64_t tensor = 2 * 32 * 64 * 2;  // one bf16 (mbs, seq, hidden) of gpt-tiny
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_GT(bf16.boundary_bytes[r], 0) << "rank " << r;
    EXPECT_EQ(bf16.boundary_bytes[r] % tensor, 0) << "rank " << r << ": " << bf16.boundary_bytes[r];
    EXPECT_EQ(2 * bf16.boundary_bytes[r], fp32.boundary_bytes[r]) << "rank " << r;
  }
  ASSERT_EQ(bf16.rows.size(), 3u) << bf16.output;
  ASSERT_EQ(fp32.rows.size(), 3u) << fp32.output;
  for (size_t i = 0; i < 3; ++i)
    for (const char* key : {"loss", "grad_norm"})
      EXPECT_EQ(bf16.rows[i].at(key), fp32.rows[i].at(key)) << key << " at step " << i + 1;
}

}  // namespace
}  // namespace trident
