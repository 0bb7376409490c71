// NOTE [idle attribution] (runtime/idle_attribution.h) against closed forms:
// timelines of 1F1B on 2 ranks and 2 micro-batches written out by hand from
// chosen F and B times and a chosen link latency L (every transfer arriving L
// after its send), not made by the simulator the attribution uses. With
// balanced stages the schedule's own idle is (p - 1)(F + B) per rank and the
// latency adds 2L; with uneven stages the slow stage sets the step, F0 + m(F1
// + B1) + B0, and the fast one waits for the difference.
#include <gtest/gtest.h>

#include "runtime/idle_attribution.h"
#include "schedules/generators.h"

namespace trident {
namespace {

using sched::ActionKind;

struct Span {
  ActionKind kind;
  int mb;
  double start_ms, end_ms;
};

// One rank's timeline (us) from its compute spans, in list order.
std::vector<sched::TimedAction> timeline(const std::vector<Span>& spans) {
  std::vector<sched::TimedAction> t;
  for (const Span& s : spans) t.push_back({sched::Action(s.kind, s.mb), s.start_ms * 1000, s.end_ms * 1000});
  return t;
}

// The two ranks of 1F1B, p = 2, m = 2, stage r taking f[r] and b[r] ms, each
// transfer arriving `lat` ms after its send; both ranks start at 0 and sync for `sync` s.
PipelineStep one_f_one_b(const double f[2], const double b[2], double lat, double sync = 0) {
  const sched::Schedule s = sched::generate("1f1b", 2, 2, 1);
  // Rank 1 (the last stage): F0 as soon as its input arrives, then B0, F1, B1 back to back unless waiting.
  const double r1_f0 = f[0] + lat, r1_b0 = r1_f0 + f[1], r1_f1 = std::max(r1_b0 + b[1], 2 * f[0] + lat),
               r1_b1 = r1_f1 + f[1];
  // Rank 0: F0, F1 (warm-up and steady state), then each B when its gradient arrives.
  const double r0_b0 = std::max(2 * f[0], r1_b0 + b[1] + lat), r0_b1 = std::max(r0_b0 + b[0], r1_b1 + b[1] + lat);
  const std::vector<Span> r0 = {{ActionKind::F, 0, 0, f[0]},
                                {ActionKind::F, 1, f[0], 2 * f[0]},
                                {ActionKind::B, 0, r0_b0, r0_b0 + b[0]},
                                {ActionKind::B, 1, r0_b1, r0_b1 + b[0]}};
  const std::vector<Span> r1 = {{ActionKind::F, 0, r1_f0, r1_f0 + f[1]},
                                {ActionKind::B, 0, r1_b0, r1_b0 + b[1]},
                                {ActionKind::F, 1, r1_f1, r1_f1 + f[1]},
                                {ActionKind::B, 1, r1_b1, r1_b1 + b[1]}};
  // The hand timeline keeps the generator's order of compute actions on each rank.
  for (int r = 0; r < 2; ++r) {
    std::vector<sched::Action> compute;
    for (const sched::Action& a : s.ranks[static_cast<size_t>(r)])
      if (sched::is_compute(a.kind)) compute.push_back(a);
    const auto& spans = r == 0 ? r0 : r1;
    EXPECT_EQ(compute.size(), spans.size());
    for (size_t i = 0; i < std::min(compute.size(), spans.size()); ++i)
      EXPECT_EQ(compute[i], sched::Action(spans[i].kind, spans[i].mb)) << "rank " << r << " action " << i;
  }
  std::vector<RankStep> ranks;
  for (const auto& spans : {r0, r1}) ranks.push_back(rank_step(timeline(spans), 0, spans.back().end_ms * 1000, 1, sync));
  return attribute_idle(s, ranks);
}

constexpr double kTol = 1e-9;  // seconds

TEST(IdleParts, BalancedStagesIdleTheSchedulesOwnBubbleAndTheLatencyWaitsOnTransfers) {
  const double f[2] = {1, 1}, b[2] = {2, 2};  // ms
  for (double lat : {0.0, 0.5, 1.5}) {
    const PipelineStep st = one_f_one_b(f, b, lat, 0.25);
    // Step: 3 (F + B) + 2L (rank 0's last backward); each rank computes 2 (F + B).
    EXPECT_NEAR(st.span_s, (9 + 2 * lat) / 1e3, kTol);
    EXPECT_NEAR(st.bubble, 1 - 2 * 6 / (2 * (9 + 2 * lat)), 1e-12);
    ASSERT_EQ(st.idle.size(), 2u);
    for (int r = 0; r < 2; ++r) {
      const IdleParts& p = st.idle[static_cast<size_t>(r)];
      EXPECT_NEAR(st.stage_busy_s[static_cast<size_t>(r)], 6e-3, kTol);
      EXPECT_NEAR(p.inherent, 3e-3, kTol) << "(p - 1)(F + B), rank " << r << ", L = " << lat;
      EXPECT_NEAR(p.imbalance, 0.0, kTol) << "rank " << r << ", L = " << lat;
      EXPECT_NEAR(p.transfers, 2 * lat / 1e3, kTol) << "2L, rank " << r << ", L = " << lat;
      EXPECT_NEAR(p.sync, 0.25, kTol);
      EXPECT_NEAR(p.total, (3 + 2 * lat) / 1e3 + 0.25, kTol);
    }
  }
}

TEST(IdleParts, TransfersGrowWithAnInjectedDelayAndNothingElseDoes) {
  // Uneven stages (below) with each transfer delayed by L: the step grows by 2L (the first
  // activation and the last gradient cross the link on its critical path), and on both stages
  // all of that is waiting on transfers; the slow stage's own 3 ms stay inherent.
  const double f[2] = {1, 3}, b[2] = {2, 6};
  const PipelineStep none = one_f_one_b(f, b, 0);
  double last = -1;
  for (double lat : {0.25, 1.0, 4.0}) {
    const PipelineStep st = one_f_one_b(f, b, lat);
    EXPECT_NEAR(st.span_s, (21 + 2 * lat) / 1e3, kTol);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_NEAR(st.idle[r].transfers, 2 * lat / 1e3, kTol) << "rank " << r << ", L = " << lat;
      EXPECT_NEAR(st.idle[r].inherent, none.idle[r].inherent, kTol) << "rank " << r << ", L = " << lat;
      EXPECT_NEAR(st.idle[r].imbalance, none.idle[r].imbalance, kTol) << "rank " << r << ", L = " << lat;
    }
    EXPECT_GT(st.idle[1].transfers, last);
    last = st.idle[1].transfers;
  }
}

TEST(IdleParts, TheFastStageOfAnUnevenSplitWaitsAsImbalance) {
  // Stage 1 three times stage 0: the step is F0 + m (F1 + B1) + B0 = 1 + 2 x 9 + 2 = 21 ms.
  const double f[2] = {1, 3}, b[2] = {2, 6};
  const PipelineStep st = one_f_one_b(f, b, 0);
  EXPECT_NEAR(st.span_s, 21e-3, kTol);
  // Balanced, every stage F = 2, B = 4: (p - 1)(F + B) = 6 ms of each rank's idle is the schedule's.
  // Stage 0 computes 6 ms and idles 15: 6 inherent, the other 9 the imbalance.
  EXPECT_NEAR(st.idle[0].inherent, 6e-3, kTol);
  EXPECT_NEAR(st.idle[0].imbalance, 9e-3, kTol);
  EXPECT_NEAR(st.idle[0].transfers, 0.0, kTol);
  // Stage 1 computes 18 ms and idles 3 (F0 before its first forward, B0 after its last backward):
  // less than the balanced schedule's 6, so all of it is inherent.
  EXPECT_NEAR(st.idle[1].inherent, 3e-3, kTol);
  EXPECT_NEAR(st.idle[1].imbalance, 0.0, kTol);
  EXPECT_NEAR(st.idle[1].transfers, 0.0, kTol);
}

}  // namespace
}  // namespace trident

namespace trident {
namespace {

// An overlapped pair's F and B overlap in the timeline (NOTE [overlapped
// pairs]): the rank's busy time is the union of its compute spans.
TEST(IdleParts, APairsOverlappingHalvesAreBusyOnce) {
  using sched::ActionKind;
  std::vector<sched::TimedAction> t = {{sched::Action(ActionKind::F, 0), 0, 1000},
                                       {sched::Action(ActionKind::F, 1), 2000, 3000},     // the pair's F ...
                                       {sched::Action(ActionKind::B, 0), 2000, 4500},     // ... and its B
                                       {sched::Action(ActionKind::B, 1), 5000, 7000}};
  const RankStep r = rank_step(t, 0, 7000, 1, 0);
  EXPECT_DOUBLE_EQ(r.busy_us, 1000 + 2500 + 2000);
  EXPECT_DOUBLE_EQ(r.chunks[0].sum[static_cast<int>(ActionKind::B)], 2.5 + 2.0);  // each action's own time
}

// Under expert parallelism the time in the experts' all-to-alls is its own
// part of the idle (the pipeline counted it busy), at most the busy time;
// without, no such part.
TEST(IdleParts, WaitingOnExpertsIsItsOwnPartAtMostTheBusyTime) {
  const sched::Schedule s = sched::generate("1f1b", 1, 2, 1);  // one stage: no pipeline idle at all
  std::vector<sched::TimedAction> t = {{sched::Action(sched::ActionKind::F, 0), 0, 1000},
                                       {sched::Action(sched::ActionKind::B, 0), 1000, 3000},
                                       {sched::Action(sched::ActionKind::F, 1), 3000, 4000},
                                       {sched::Action(sched::ActionKind::B, 1), 4000, 6000}};
  RankStep r = rank_step(t, 0, 6000, 1, 0.0005);
  PipelineStep plain = attribute_idle(s, {r});
  EXPECT_DOUBLE_EQ(plain.idle[0].experts, -1);
  EXPECT_NEAR(plain.idle[0].total, 0.0005, 1e-12);
  r.experts_s = 0.0025;
  PipelineStep ep = attribute_idle(s, {r});
  EXPECT_NEAR(ep.idle[0].experts, 0.0025, 1e-12);
  EXPECT_NEAR(ep.idle[0].total, 0.0005 + 0.0025, 1e-12);
  r.experts_s = 0.01;  // more than the busy 6 ms (overlapped halves both waiting): capped
  EXPECT_NEAR(attribute_idle(s, {r}).idle[0].experts, 0.006, 1e-12);
}

}  // namespace
}  // namespace trident
