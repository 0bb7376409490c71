// The executor's measured in-flight micro-batches agree with the simulator's
// prediction on every rank, and the measured activation bytes order the
// schedules as theory says (GPipe holds all m, ZB-H1 no more than 1F1B).
#include <gtest/gtest.h>

#include <map>

#include "tests/run_helpers.h"

namespace trident {
namespace {

struct RankPeak {
  int inflight = -1;
  long long activation_bytes = -1;
};

// Runs gpt-tiny at pp=4 (m = 8) and reads each rank's closing peak line.
std::vector<RankPeak> run_and_measure(const std::string& kind, int chunks) {
  const std::string dir = ::testing::TempDir() + "trident_mem_" + kind;
  auto r = testing::run_command(testing::bin("trident") + " launch --nproc-per-node 4 -- " + testing::bin("trident") +
                                " train --config " + testing::src("configs/gpt-tiny.toml") +
                                " --set parallel.pp=4 --set training.steps=2 --set training.warmup_steps=0"
                                " --set schedule.kind=" + kind + " --set schedule.chunks=" + std::to_string(chunks) +
                                " --set logging.dir=" + dir);
  EXPECT_EQ(r.status, 0) << r.output;
  std::vector<RankPeak> peaks(4);
  for (const auto& s : testing::rank_summaries(dir)) {  // NOTE [rank summary]
    const auto pp = static_cast<size_t>(testing::field(s, "pp"));
    peaks.at(pp) = {static_cast<int>(testing::field(s, "peak_inflight")), testing::field(s, "peak_activation_bytes")};
  }
  for (int pp = 0; pp < 4; ++pp) EXPECT_GE(peaks[pp].inflight, 0) << "no summary for stage " << pp << "\n" << r.output;
  return peaks;
}

// One run per schedule, shared by the tests.
std::vector<RankPeak> measure(const std::string& kind, int chunks) {
  static std::map<std::string, std::vector<RankPeak>> cache;
  auto it = cache.find(kind);
  if (it == cache.end()) it = cache.emplace(kind, run_and_measure(kind, chunks)).first;
  return it->second;
}

// The simulator's per-rank peak_inflight from `trident schedule --format json`.
std::vector<int> simulated(const std::string& kind, int chunks) {
  auto r = testing::run_command(testing::bin("trident") + " schedule --kind " + kind + " -p 4 -m 8 -v " +
                                std::to_string(chunks) + " --format json");
  EXPECT_EQ(r.status, 0) << r.output;
  std::vector<int> out;
  const json::Value schedule = json::parse(r.output, "trident schedule --format json");
  for (int64_t n : json::as_int_array(json::at(schedule, "peak_inflight", "the schedule's JSON"), "peak_inflight"))
    out.push_back(static_cast<int>(n));
  EXPECT_EQ(out.size(), 4u) << r.output;
  return out;
}

TEST(PipelineMemory, MeasuredInFlightEqualsSimulated) {
  for (auto [kind, v] : std::vector<std::pair<std::string, int>>{{"gpipe", 1}, {"1f1b", 1}, {"zb-h1", 1},
                                                                 {"interleaved", 2}}) {
    auto measured = measure(kind, v);
    auto sim = simulated(kind, v);
    ASSERT_EQ(sim.size(), 4u);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(measured[r].inflight, sim[r]) << kind << " rank " << r;
  }
}

// The memory-bounded kinds (schedules/README.md): the executor holds exactly the
// micro-batches (or chunk activations) the simulator predicts, ZB-H2's 2p-1 = 7 on
// rank 0 measured as more activation bytes than 1F1B's 4 there.
TEST(PipelineMemory, MemoryBoundedKindsHoldWhatTheSimulatorPredicts) {
  for (auto [kind, v] : std::vector<std::pair<std::string, int>>{{"zb-h2", 1}, {"v-half", 2}, {"v-min", 2}}) {
    auto measured = measure(kind, v);
    auto sim = simulated(kind, v);
    ASSERT_EQ(sim.size(), 4u);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(measured[r].inflight, sim[r]) << kind << " rank " << r;
  }
  EXPECT_EQ(measure("zb-h2", 1)[0].inflight, 7);
  EXPECT_GT(measure("zb-h2", 1)[0].activation_bytes, measure("1f1b", 1)[0].activation_bytes * 3 / 2);
}

TEST(PipelineMemory, ActivationBytesOrderTheSchedules) {
  auto gpipe = measure("gpipe", 1), ofob = measure("1f1b", 1), zb = measure("zb-h1", 1);
  for (int r = 0; r < 4; ++r) {
    EXPECT_GT(ofob[r].activation_bytes, 0) << r;
    EXPECT_LE(zb[r].activation_bytes, ofob[r].activation_bytes) << "rank " << r;
  }
  // Rank 0 holds all 8 micro-batches under GPipe but only 4 under 1F1B.
  EXPECT_GT(gpipe[0].activation_bytes, ofob[0].activation_bytes * 3 / 2);
}

}  // namespace
}  // namespace trident
