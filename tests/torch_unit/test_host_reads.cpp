// NOTE [host reads] (core/host_read.h): a training step reads device
// tensors on the host only where named. A 2-stage pipeline trains 4 steps,
// every second one logged; each rank's summary says how often each kind of
// read happened in one step: a non-logged step reads nothing (clipping and
// the non-finite guard run on the device, NOTE [device guard] in
// framework/trainer.cpp); a logged step reads the gradient norm (with the
// guard's record) once and the reduced loss once. And the deferred weight
// gradients W ran.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../run_helpers.h"

namespace trident::testing {
namespace {

std::map<std::string, int64_t> reads_of(const json::Value& summary, const std::string& kind) {
  std::map<std::string, int64_t> out;
  const json::Value& reads = json::at(summary, "host_reads", "rank summary");
  for (const auto& [what, n] : json::as_object(json::at(reads, kind, "host_reads"), kind))
    out[what] = json::as_int(n, what);
  return out;
}

TEST(HostReads, NoneOnOtherStepsAndTheNormAndLossOnLoggedSteps) {
  char tmpl[] = "/tmp/trident-host-reads-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const RunResult r = run_command(bin("trident") + " launch --nproc-per-node 2 --master-port 0 -- " + bin("trident") +
                                  " train --config " + src("configs/gpt-tiny.toml") +
                                  " --set parallel.pp=2 --set parallel.backend=nccl-rules --set training.steps=4"
                                  " --set logging.log_interval=2 --set training.eval_interval=0"
                                  " --set training.peak_tflops=1 --set logging.dir=" + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto summaries = rank_summaries(dir);
  ASSERT_EQ(summaries.size(), 2u);
  const std::map<std::string, int64_t> none;
  const std::map<std::string, int64_t> norm_and_loss{{"gradient norm", 1}, {"loss", 1}};
  for (const json::Value& s : summaries) {
    EXPECT_EQ(reads_of(s, "other_step"), none) << json::dump(s, 2);
    EXPECT_EQ(reads_of(s, "logged_step"), norm_and_loss) << json::dump(s, 2);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trident::testing

namespace trident::testing {
namespace {

// The rank summary counts the weight-gradient computations W actions ran:
// zb-h1 defers them (I computes none), so W runs them; 1f1b has no W. The
// GPU script reads the same field on CUDA, where deferral depends on the
// queue reaching the autograd engine's device thread (NOTE [I/W split]).
TEST(DeferredWeightGrads, CountedInTheRankSummaryAndChangeNoBits) {
  std::map<std::string, int64_t> count;
  std::map<std::string, std::vector<StepRow>> rows;
  for (const std::string kind : {"1f1b", "zb-h1"}) {
    char tmpl[] = "/tmp/trident-defer-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    const RunResult r = run_command(bin("trident") + " train --config " + src("configs/gpt-tiny.toml") +
                                    " --set schedule.kind=" + kind + " --set training.steps=3"
                                    " --set logging.log_interval=1 --set training.eval_interval=0"
                                    " --set training.peak_tflops=1 --set logging.dir=" + dir);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto summaries = rank_summaries(dir);
    ASSERT_EQ(summaries.size(), 1u);
    count[kind] = field(summaries[0], "deferred_weight_grads");
    rows[kind] = read_metrics(dir + "/metrics.jsonl");
    std::filesystem::remove_all(dir);
  }
  EXPECT_EQ(count["1f1b"], 0);
  EXPECT_GT(count["zb-h1"], 0);
  ASSERT_EQ(rows["1f1b"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rows["zb-h1"].at(i).at("loss"), rows["1f1b"][i].at("loss")) << "step " << i + 1;
    EXPECT_EQ(rows["zb-h1"].at(i).at("grad_norm"), rows["1f1b"][i].at("grad_norm")) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace trident::testing

namespace trident::testing {
namespace {

// NOTE [operation counts] (core/op_count.h): the rank summary's aten_ops. The
// optimizer phase (norm, clipping, guard, AdamW) is a handful of operations
// per step, not some per parameter: gpt-tiny at 8 layers (~100 parameter
// tensors) makes no more of them than at 2 layers, while its forward and
// backward grow with the layers; the phases add up to the total.
std::map<std::string, int64_t> ops_of(int layers) {
  char tmpl[] = "/tmp/trident-ops-XXXXXX";
  EXPECT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const RunResult r = run_command(bin("trident") + " train --config " + src("configs/gpt-tiny.toml") +
                                  " --set model.layers=" + std::to_string(layers) +
                                  " --set training.steps=2 --set training.eval_interval=0"
                                  " --set training.peak_tflops=1 --set logging.dir=" + dir);
  EXPECT_EQ(r.status, 0) << r.output;
  std::map<std::string, int64_t> out;
  const auto summaries = rank_summaries(dir);
  if (summaries.size() == 1)
    for (const auto& [k, v] : json::as_object(json::at(summaries[0], "aten_ops", "rank summary"), "aten_ops")) out[k] = json::as_int(v, k);
  std::filesystem::remove_all(dir);
  return out;
}

TEST(OperationCounts, OptimizerPhaseDoesNotGrowWithTheParameters) {
  const auto small = ops_of(2), big = ops_of(8);
  ASSERT_EQ(big.count("optimizer"), 1u);
  EXPECT_EQ(big.at("step"), 2);
  int64_t sum = 0;
  for (const char* phase : {"forward", "backward", "grad_sync", "optimizer", "other"}) sum += big.at(phase);
  EXPECT_EQ(sum, big.at("total"));
  EXPECT_GT(big.at("forward"), small.at("forward"));
  EXPECT_GT(big.at("backward"), small.at("backward"));
  EXPECT_LE(big.at("optimizer"), small.at("optimizer")) << "optimizer operations grow with the parameters";
  EXPECT_LT(big.at("optimizer"), 50);
}

}  // namespace
}  // namespace trident::testing
