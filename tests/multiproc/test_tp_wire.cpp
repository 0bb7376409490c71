// Driver for mp_tp_wire: runs the worker at tp = 2 and requires a clean exit
// with every check's PASS line on both ranks (a worker that skipped a check
// fails here). What the checks assert: mp_tp_wire.cpp's header.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/run_helpers.h"

namespace {

using trident::testing::bin;
using trident::testing::run_command;

int count(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t i = hay.find(needle); i != std::string::npos; i = hay.find(needle, i + 1)) ++n;
  return n;
}

TEST(TpWire, CollectivesCarryTheComputeDtypeWithoutCopies) {
  const std::string cmd = bin("trident") + " launch --master-port 0 --nproc-per-node 2 -- " + bin("mp_tp_wire");
  const auto r = run_command(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
  std::vector<std::string> checks = {"gpt_stage/bf16_wire", "gpt_stage/bf16_wire/sp"};
  for (const char* m : {"copy_to_tp", "reduce_from_tp", "gather_seq", "reduce_scatter_seq", "scatter_seq",
                        "gather_last_dim", "scatter_last_dim"}) {
    for (const char* d : {"fp32", "bf16"}) checks.push_back(std::string("wire/") + m + "/" + d);
    for (const char* b : {"b1", "b2"}) checks.push_back(std::string("copies/") + m + "/" + b);
  }
  for (const auto& check : checks)  // "PASS name " with the space: no prefix of a longer name matches
    EXPECT_EQ(count(r.output, "PASS " + check + " "), 2) << "check " << check << "\n" << r.output;
  EXPECT_EQ(count(r.output, "DONE all wire checks"), 2) << r.output;
  EXPECT_EQ(count(r.output, "FAIL"), 0) << r.output;
}

}  // namespace
