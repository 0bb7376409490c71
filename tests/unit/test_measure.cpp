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
    const Costs set{3.0, 5.0, 2.0, {}, {}, {}};
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
    EXPECT_NEAR(measured_latency(s, simulate(s, {1.0, 2.0, 1.0, {lat}, {}, {}})), lat, 1e-9) << lat;
  }
  const Schedule s = generate("gpipe", 2, 4, 1);
  EXPECT_EQ(measured_latency(s, simulate(s, {1.0, 2.0, 1.0, {}, {}, {}})), 0.0);
}

// Hand-computed: 1F1B, p = 2, m = 2; stage 0 F = 1, B = 2; stage 1 (the one
// with the head) F = 2, B = 4; link latency 0.5.
//   rank 0: F0 [0,1] F1 [1,2]           B0 [8,10]            B1 [14,16]
//   rank 1:   F0 [1.5,3.5] B0 [3.5,7.5] F1 [7.5,9.5] B1 [9.5,13.5]
// (B0 on rank 0 waits for the gradient sent at 7.5, arriving at 8.) Step 16,
// busy 6 and 12: bubble (10 + 4) / 32. Equal stages at the mean costs (F 1.5,
// B 3) and no latency, the simplest model of a pipeline, give step 13.5 and
// bubble 1/3.
TEST(Measure, PredictionFromPerStageCostsAndLatencyMatchesHandComputed) {
  const Schedule s = generate("1f1b", 2, 2, 1);
  Costs set;
  set.latency = {0.5};
  set.stage_costs = {{1.0, 2.0, 0.0}, {2.0, 4.0, 0.0}};
  Timeline measured = simulate(s, set);
  ASSERT_DOUBLE_EQ(stats(measured).step_time, 16.0);  // the hand computation above
  // The ranks' clocks disagree (other hosts): rank 1 reads 1000 more.
  for (TimedAction& a : measured.ranks[1]) a.start += 1000, a.end += 1000;

  std::vector<KindSums> per_stage(2);
  for (int r = 0; r < 2; ++r)
    for (const TimedAction& a : measured.ranks[r]) per_stage[r].add(a.action.kind, a.end - a.start);
  const LinkLatency lat = measured_link_latency(s, {measured}, 1e-6);
  EXPECT_EQ(lat.links, 1);
  EXPECT_EQ(lat.samples, 3);  // RF0 on rank 1; RB0 and RB1 on rank 0 (RF1's data was there before F1)
  EXPECT_NEAR(lat.mean, 0.5, 1e-9);
  const Costs predicted_costs = costs_from_stage_sums(per_stage, lat.per_boundary);
  ASSERT_EQ(predicted_costs.stage_costs.size(), 2u);
  EXPECT_NEAR(predicted_costs.stage_costs[1].forward, 2.0, 1e-12);
  EXPECT_NEAR(predicted_costs.stage_costs[1].backward, 4.0, 1e-12);
  const TimelineStats predicted = simulate_stats(s, predicted_costs);
  EXPECT_NEAR(predicted.step_time, 16.0, 1e-9);
  EXPECT_NEAR(predicted.bubble_fraction, 14.0 / 32.0, 1e-12);

  // Mean costs on every stage and no latency are far off.
  const TimelineStats equal = simulate_stats(s, Costs{1.5, 3.0, 0.0, {}, {}, {}});
  EXPECT_NEAR(equal.step_time, 13.5, 1e-9);
  EXPECT_NEAR(equal.bubble_fraction, 1.0 / 3.0, 1e-12);
}

// NOTE [measured link latency]: the executor waits for a receive at its consumer, so one posted
// ahead of a compute (rank 0's RB0 before F1, as order_receives() and defer_coupled_sends()
// post them) ends when that compute does if the data came meanwhile. 1F1B, p = 2, m = 2,
// latency 0.5, rank 0's F1 long (8):
//   rank 0: F0 [0,1] SF0 | RB0 posted at 1 | F1 [1,9] SF1 | B0 [9,11] | RB1 posted at 11 | B1 [16,18]
//   rank 1: RF0 [0,1.5] F0 [1.5,3.5] B0 [3.5,7.5] SB0 | RF1 posted 7.5 | F1 [9.5,11.5] B1 [11.5,15.5] SB1
// RB0's data came at 8, during F1: its end (9) minus the send (7.5) is F1's tail, not the
// link's latency. Counted, the latency read 0.75; the waits alone read 0.5.
Timeline early_receive_timeline() {
  Timeline t;
  t.pipeline_ranks = 2, t.microbatches = 2, t.chunks = 1;
  using K = ActionKind;
  t.ranks = {{{{K::F, 0, 0}, 0, 1}, {{K::SEND_F, 0, 0}, 1, 1}, {{K::RECV_B, 0, 0}, 1, 9}, {{K::F, 1, 0}, 1, 9},
              {{K::SEND_F, 1, 0}, 9, 9}, {{K::B, 0, 0}, 9, 11}, {{K::RECV_B, 1, 0}, 11, 16}, {{K::B, 1, 0}, 16, 18}},
             {{{K::RECV_F, 0, 0}, 0, 1.5}, {{K::F, 0, 0}, 1.5, 3.5}, {{K::B, 0, 0}, 3.5, 7.5}, {{K::SEND_B, 0, 0}, 7.5, 7.5},
              {{K::RECV_F, 1, 0}, 7.5, 9.5}, {{K::F, 1, 0}, 9.5, 11.5}, {{K::B, 1, 0}, 11.5, 15.5},
              {{K::SEND_B, 1, 0}, 15.5, 15.5}}};
  return t;
}

TEST(Measure, LatencyCountsOnlyReceivesWaitedForAtTheirConsumer) {
  const Schedule s = generate("1f1b", 2, 2, 1);
  Timeline t = early_receive_timeline();
  EXPECT_NEAR(measured_latency(s, t), 0.5, 1e-12);
  for (TimedAction& a : t.ranks[1]) a.start += 1000, a.end += 1000;  // rank 1's own clock
  const LinkLatency lat = measured_link_latency(s, {t}, 1e-6);
  EXPECT_EQ(lat.links, 1);
  EXPECT_EQ(lat.samples, 3);  // RF0, RF1 on rank 1; RB1 on rank 0 (RB0 came during F1)
  EXPECT_NEAR(lat.mean, 0.5, 1e-9);
}

TEST(Measure, LinkLatencyPerBoundaryWithOwnClocks) {
  // Interleaved p = 2, v = 2 crosses ranks at every boundary (0->1 on ranks
  // 0->1, 1->2 on 1->0, 2->3 on 0->1); each boundary's latency is recovered
  // although rank 0's clock reads 250 less.
  const Schedule s = generate("interleaved", 2, 4, 2);
  Costs set;
  set.latency = {0.3, 0.7, 0.2};
  set.stage_costs = {{1, 2, 0}, {1, 2, 0}, {1, 2, 0}, {3, 5, 0}};
  Timeline t = simulate(s, set);
  for (TimedAction& a : t.ranks[0]) a.start -= 250, a.end -= 250;
  const LinkLatency lat = measured_link_latency(s, {t}, 1e-6);
  EXPECT_EQ(lat.links, 3);
  ASSERT_EQ(lat.per_boundary.size(), 3u);
  for (int b = 0; b < 3; ++b) EXPECT_NEAR(lat.per_boundary[b], set.latency[b], 1e-9) << b;
  EXPECT_NEAR(lat.mean, 0.4, 1e-9);
  // A V placement hands over locally at the turn: boundary p-1 -> p gets 0.
  const Schedule v = generate("zb-v", 2, 4, 2);
  const LinkLatency lv = measured_link_latency(v, {simulate(v, Costs{1, 2, 1, {0.5}, {}, {}})}, 1e-6);
  ASSERT_EQ(lv.per_boundary.size(), 3u);
  EXPECT_EQ(lv.per_boundary[1], 0.0);
  EXPECT_NEAR(lv.per_boundary[0], 0.5, 1e-9);
  EXPECT_NEAR(lv.per_boundary[2], 0.5, 1e-9);
  // One rank: no link to measure.
  const Schedule one = generate("gpipe", 1, 4, 1);
  const LinkLatency none = measured_link_latency(one, {simulate(one, Costs{})}, 1e-6);
  EXPECT_EQ(none.links, 0);
  EXPECT_TRUE(none.per_boundary.empty());
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

// Records gathered from several nodes after a failure: a rank killed by a
// signal, or one that had exited or been stopped, ends a chain whatever its
// stale record says; a rank that failed on its own (a timeout) is followed.
TEST(Diagnose, KilledExitedAndStoppedRanksEndTheChain) {
  const std::vector<ProgressRecord> snapshot{rec(0, "wait", "RB0", 2), rec(2, "wait", "RF0", 0)};
  EXPECT_EQ(launch::diagnose(snapshot, {2, "was killed by signal 9 (SIGKILL)"}, 0),
            "rank 0 waits RB0 from rank 2 · rank 2 died (was killed by signal 9 (SIGKILL)) at RF0 (step 1, list index 7)\n");
  EXPECT_EQ(launch::diagnose(snapshot, {0, "exited with status 1"}, 0, {{2, "exited with status 0"}}),
            "rank 0 waits RB0 from rank 2 · rank 2 had exited with status 0, last at RF0 (step 1, list index 7)\n");
  EXPECT_EQ(launch::diagnose(snapshot, {0, "exited with status 1"}, 0,
                             {{2, "been stopped by signal 19 (SIGSTOP)"}}),
            "rank 0 waits RB0 from rank 2 · rank 2 had been stopped by signal 19 (SIGSTOP), last at RF0 (step 1, "
            "list index 7)\n");
  // The failed rank is named even when no chain ends at it.
  EXPECT_EQ(launch::diagnose({rec(0, "run", "F3", -1), rec(1, "wait", "RF3", 0)}, {3, "exited with status 86"}, 0),
            "rank 1 waits RF3 from rank 0 · rank 0 has made no progress since F3 (step 1, list index 7) for 0 s\n"
            "rank 3 exited with status 86 before reporting its position\n");
  // A rank whose program could not be started left no record: the failed exec is named.
  EXPECT_EQ(launch::diagnose({}, {0, "could not be started (cannot run '/no/prog': No such file or directory)"}, 0),
            "rank 0 could not be started (cannot run '/no/prog': No such file or directory)\n");
}

TEST(Diagnose, FailureLinesOfTheLaunchers) {
  const auto f = launch::parse_failure_line("rank 12 on node 3 (pid 4242) was killed by signal 9 (SIGKILL); rank 2 "
                                            "had exited with status 0 0.6 s earlier");
  EXPECT_EQ(f.rank, 12);
  EXPECT_EQ(f.how, "was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(launch::parse_failure_line("node 0's launcher at 10.0.0.1:29501 went away").rank, -1);
  EXPECT_EQ(launch::parse_failure_line("rank x on node 1").rank, -1);
}

}  // namespace
}  // namespace trident
