// Driver for mp_tensor_parallel: runs the worker under `trident launch` at
// tp = 2 and tp = 4 and requires a clean exit with every check's PASS line on
// every rank, so a worker that skipped a check fails here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/run_helpers.h"

namespace {

using trident::testing::bin;
using trident::testing::run_command;

// Every check the worker must report, each once per rank.
const std::vector<std::string> kChecks = {
    "copy_to_tp",
    "reduce_from_tp",
    "scatter_last_dim",
    "gather_last_dim",
    "gather_seq",
    "reduce_scatter_seq",
    "scatter_seq",
    "column_parallel_linear",
    "column_parallel_linear/gather",
    "row_parallel_linear",
    "vocab_parallel_embedding",
    "deferred_weight_grads",
    "gpt_stage_loss",
    "gpt_stage_grads",
    "column_parallel_linear/sp",
    "column_parallel_linear/gather/sp",
    "row_parallel_linear/sp",
    "vocab_parallel_embedding/sp",
    "deferred_weight_grads/sp",
    "gpt_stage_loss/sp",
    "gpt_stage_grads/sp",
    "vocab_parallel_cross_entropy",
    "vocab_parallel_cross_entropy/padded",
    "vocab_parallel_cross_entropy/padded_rank",
};

int count(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t i = hay.find(needle); i != std::string::npos; i = hay.find(needle, i + 1)) ++n;
  return n;
}

void run_at(int tp) {
  const std::string cmd = bin("trident") + " launch --master-port 0 --nproc-per-node " + std::to_string(tp) +
                          " -- " + bin("mp_tensor_parallel");
  const auto r = run_command(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
  for (const auto& check : kChecks)  // "PASS name " with the space: no prefix of a longer name matches
    EXPECT_EQ(count(r.output, "PASS " + check + " max_err="), tp) << "check " << check << "\n" << r.output;
  EXPECT_EQ(count(r.output, "DONE all checks at tp=" + std::to_string(tp)), tp) << r.output;
  EXPECT_EQ(count(r.output, "FAIL"), 0) << r.output;
}

TEST(TensorParallel, MatchesDenseAtTp2) { run_at(2); }
TEST(TensorParallel, MatchesDenseAtTp4) { run_at(4); }

}  // namespace
