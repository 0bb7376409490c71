// Measured-pipeline helpers against independent references: the simulator's
// own timelines (whose costs and latency are known) stand in for measured
// ones; progress records and the hang diagnosis on hand-written states.
#include <gtest/gtest.h>

#include "launch/diagnose.h"
#include "schedules/generators.h"
#include "schedules/measure.h"
#include "schedules/progress.h"

namespace trident {
namespace {

using namespace sched;

TEST(Measure, CostsOfASimulatedRunAreTheSetCosts) {
  for (const char* kind : {"1f1b", "zb-h1", "interleaved"}) {
    const int v = std::string(kind) == "interleaved" ? 2 : 1;
    const Schedule s = generate(kind, 4, 8, v);
    const Costs set{3.0, 5.0, 2.0, {}, {}, 0.0};
    const MeasuredCosts m = measured_costs({simulate(s, set)});
    EXPECT_NEAR(m.costs.forward, 3.0, 1e-9) << kind;
    EXPECT_NEAR(m.costs.backward, 5.0, 1e-9) << kind;
    if (std::string(kind) == "zb-h1") {
      EXPECT_NEAR(m.costs.weight, 2.0, 1e-9);
    }
    // The simulator on the measured costs predicts the same bubble.
    EXPECT_NEAR(stats(simulate(s, m.costs)).bubble_fraction, stats(simulate(s, set)).bubble_fraction, 1e-9) << kind;
  }
}

TEST(Measure, LatencyOfASimulatedRunIsTheSetLatency) {
  for (double lat : {0.25, 1.5}) {
    const Schedule s = generate("1f1b", 4, 8, 1);
    EXPECT_NEAR(measured_latency(s, simulate(s, {1.0, 2.0, 1.0, {lat}, {}, 0.0})), lat, 1e-9) << lat;
  }
  const Schedule s = generate("gpipe", 2, 4, 1);
  EXPECT_EQ(measured_latency(s, simulate(s, {1.0, 2.0, 1.0, {}, {}, 0.0})), 0.0);
}

TEST(Measure, RecordingRoundTripsAndRebasesPerRank) {
  RankRecording r{3, 1000.0, {{{ActionKind::RECV_B, 2, 1}, 1500.0, 4000.0}, {{ActionKind::B, 2, 1}, 4000.0, 6000.0}},
                  {{"grad-sync", 6000.0, 6500.0}}};
  const RankRecording back = recording_from_text(to_text(r), 3);
  ASSERT_EQ(back.actions.size(), 2u);
  EXPECT_EQ(back.actions[0].action, (Action{ActionKind::RECV_B, 2, 1}));
  EXPECT_EQ(back.actions[1].end, 6000.0);
  ASSERT_EQ(back.phases.size(), 1u);
  EXPECT_EQ(back.phases[0].name, "grad-sync");
  const Timeline t = to_timeline({back}, 4, 2);
  EXPECT_DOUBLE_EQ(t.ranks[0][1].start, 3.0);  // ms after the rank's origin
  EXPECT_DOUBLE_EQ(stats(t).busy[0], 2.0);
  EXPECT_THROW(recording_from_text("a X3 1 2\n", 0), ScheduleError);
}

TEST(Progress, RecordsRoundTripAndFaultsParse) {
  ProgressRecord r{2, 1234567, 3, 14, "RB3.1", "wait", 3}, back;
  ASSERT_TRUE(parse_record(format_record(r), back));
  EXPECT_EQ(back.token, "RB3.1");
  EXPECT_EQ(back.peer, 3);
  EXPECT_EQ(back.index, 14);
  const Fault f = parse_fault("3:F5:stall");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.token, "F5");
  EXPECT_THROW(parse_fault("3:F5:sleep"), std::runtime_error);
  EXPECT_THROW(parse_fault("x:F5:exit"), std::runtime_error);
  EXPECT_THROW(parse_fault("F5"), std::runtime_error);
}

ProgressRecord rec(int rank, const std::string& state, const std::string& token, int peer, int64_t t = 0) {
  return {rank, t, 1, 7, token, state, peer};
}

TEST(Diagnose, ChainEndsAtTheStalledRank) {
  const std::string d = launch::diagnose({rec(0, "wait", "RB3", 1), rec(1, "wait", "RB3", 2), rec(2, "run", "F5", -1, 1000)},
                                         {0, "exited with status 1"}, 31000);
  EXPECT_EQ(d, "rank 0 waits RB3 from rank 1 · rank 1 waits RB3 from rank 2 · rank 2 has made no progress since F5 "
               "(step 1, list index 7) for 30 s\n");
}

TEST(Diagnose, DeadRankCycleAndSilentRank) {
  EXPECT_EQ(launch::diagnose({rec(0, "wait", "RB0", 1), rec(1, "run", "B0", -1)}, {1, "exited with status 86"}, 0),
            "rank 0 waits RB0 from rank 1 · rank 1 died (exited with status 86) at B0 (step 1, list index 7)\n");
  EXPECT_EQ(launch::diagnose({rec(0, "wait", "RB0", 1), rec(1, "wait", "RF1", 0)}, {}, 0),
            "rank 0 waits RB0 from rank 1 · rank 1 waits RF1 from rank 0 · a cycle back to rank 0: the schedules "
            "deadlock\n");
  EXPECT_EQ(launch::diagnose({rec(0, "wait", "RF0", 3)}, {}, 0),
            "rank 0 waits RF0 from rank 3 · rank 3 never reported its position\n");
}

}  // namespace
}  // namespace trident
