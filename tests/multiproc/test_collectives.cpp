// Drives mp_collectives through `trident launch`: on 8 ranks (tp2 x pp2 x dp2)
// every collective helper gives exact results on every group; and a
// collective that cannot complete fails within seconds with an error naming
// the operation, the group and the rank, the launcher exiting non-zero.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>

#include "../run_helpers.h"

namespace trident::testing {
namespace {

std::string launch(int nproc, const std::string& mode) {
  return bin("trident") + " launch --nproc-per-node " + std::to_string(nproc) + " --master-port 0 -- " +
         bin("mp_collectives") + " " + mode;
}

TEST(Collectives, EveryGroupOfTp2Pp2Dp2IsExact) {
  const RunResult r = run_command(launch(8, "check"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (int rank = 0; rank < 8; ++rank)
    for (const char* check : {"all_reduce tp", "all_reduce dp", "all_reduce pp", "all_reduce model_parallel",
                              "all_reduce embedding", "all_reduce world", "send_recv pp", "all_gather tp",
                              "broadcast dp", "all_reduce_max world", "all"}) {
      const std::string line = "[rank " + std::to_string(rank) + "] PASS " + check + "\n";
      EXPECT_NE(r.output.find(line), std::string::npos) << "missing: " << line << "output:\n" << r.output;
    }
  EXPECT_EQ(r.output.find("error"), std::string::npos) << r.output;
}

TEST(Collectives, StalledAllReduceFailsWithinSecondsNamingGroupAndRank) {
  const auto start = std::chrono::steady_clock::now();
  const RunResult r = run_command(launch(4, "stall"));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LT(secs, 30.0) << r.output;
  // e.g. "all_reduce on group 'tp' (members 2 3), global rank 2 failed: ... timed out"
  static const std::regex re(R"(all_reduce on group 'tp' \(members (\d+) (\d+)\), global rank (\d+) .*timed out)",
                             std::regex::icase);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, re)) << r.output;
  EXPECT_EQ(m[3].str(), m[1].str()) << "the rank that called all_reduce is its group's index 0";
  EXPECT_EQ(std::stoi(m[2].str()), std::stoi(m[1].str()) + 1);
  EXPECT_EQ(r.output.find("returned without its partner"), std::string::npos) << r.output;
  std::cout << "stalled all_reduce failed after " << secs << " s" << std::endl;
}

}  // namespace
}  // namespace trident::testing
