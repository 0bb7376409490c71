// Hang diagnosis at p = 4: TRIDENT_FAULT_ACTION makes one rank of a gpt-tiny
// pipeline stall (or exit) before a given action; the launcher must exit
// non-zero and print the chain of waits ending at that rank. The expected
// chains follow from the 1F1B lists (schedules/generators), independently of
// the diagnosis code.
#include <gtest/gtest.h>

#include "tests/run_helpers.h"

namespace trident {
namespace {

testing::RunResult run_with_fault(const std::string& fault) {
  return testing::run_command("TRIDENT_FAULT_ACTION=" + fault + " " + testing::bin("trident") +
                              " launch --nproc-per-node 4 --master-port 0 --grace 1 -- " + testing::bin("trident") + " train --config " +
                              testing::src("configs/gpt-tiny.toml") +
                              " --set parallel.pp=4 --set training.steps=2 --set parallel.timeout_s=6"
                              " --set logging.dir=" + testing::temp_dir() + "trident_hang");
}

// Rank 3 (the last stage) stalls before F1 of step 1. 1F1B at p = 4, rank 3:
// RF0 F0 B0 SB0 RF1 F1 ...; the executor posts the communication between two
// computes when it reaches the next one (NOTE [pair order]), so the group
// {SB0, RF1} is never posted: rank 2, whose group after F1 holds RB0 from
// rank 3, waits for it; rank 1 and rank 0 wait for their RB0 from the next
// rank the same way. Receives time out after parallel.timeout_s.
TEST(HangDiagnosis, StalledRankEndsTheChainOfWaits) {
  const auto r = run_with_fault("3:F1:stall");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("trident launch: diagnosis: rank 0 waits RB0 from rank 1 · rank 1 waits RB0 from rank 2 · "
                          "rank 2 waits RB0 from rank 3 · rank 3 has made no progress since F1 (step 1, list index 5) for"),
            std::string::npos)
      << r.output;
}

// Rank 2 dies before its B0 (list index 7). Rank 3 can go no further than
// the next activation from rank 2, so some chain ends at the dead rank.
TEST(HangDiagnosis, DeadRankIsNamed) {
  const auto r = run_with_fault("2:B0:exit");
  EXPECT_EQ(r.status, 86) << r.output;
  EXPECT_NE(r.output.find("from rank 2 · rank 2 died (exited with status 86) at B0 (step 1, list index 7)"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace trident
