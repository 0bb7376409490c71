// The schedules that trade activation memory for bubble: ZB-H2 (twice 1F1B's
// memory, Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024) and V-Half /
// V-Min (a half and a third of it, Qi et al., "Pipeline Parallelism with
// Controllable Memory", arXiv 2405.15362). Memory is the simulator's peak
// in-flight count: micro-batches for one-chunk kinds, chunk activations (half
// a stage's each) for the V kinds, so 1F1B's peak on rank 0 is p stages' worth.
// The papers' Table 5 bubble rates are checked from the command line in
// tests/reference/test_zero_bubble_paper.py.
#include <gtest/gtest.h>

#include <algorithm>

#include "schedules/generators.h"
#include "schedules/simulate.h"
#include "schedules/validate.h"

using namespace trident::sched;

namespace {

Costs costs(double f, double b, double w) {
  Costs c;
  c.forward = f, c.backward = b, c.weight = w;
  return c;
}

int peak(const TimelineStats& st) { return *std::max_element(st.peak_inflight.begin(), st.peak_inflight.end()); }

// Activation memory relative to 1F1B's peak (p stages' worth on rank 0).
double memory_ratio(const std::string& kind, int p, int m, const Costs& c) {
  const TimelineStats st = simulate_stats(generate_compute(kind, p, m), c);
  return static_cast<double>(peak(st)) / default_chunks(kind) / std::min(p, m);
}

}  // namespace

// ZB-H2's warm-up: rank r runs 2(p-r-1)+1 forwards before its first I, so it
// holds that many micro-batches (rank 0: 2p-1, twice 1F1B's p less one), under
// any costs: the count follows from the list, not the timing.
TEST(ScheduleMemory, ZbH2HoldsTwoPMinusOneOnTheFirstRank) {
  for (const Costs& c : {costs(1, 2, 1), costs(18.522, 27.423, 9.337), costs(2, 3, 0.5)})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 24; ++m) {
        const Schedule s = zb_h2(p, m);
        const TimelineStats st = simulate_stats(s, c);
        for (int r = 0; r < p; ++r) {
          const int warmup = std::min(2 * (p - r - 1) + 1, m);
          EXPECT_EQ(st.peak_inflight[r], warmup) << "p=" << p << " m=" << m << " rank " << r;
          for (int i = 0; i < warmup; ++i) ASSERT_EQ(s.ranks[r][i], Action(ActionKind::F, i, 0));
          EXPECT_EQ(s.ranks[r][warmup].kind, ActionKind::I);
        }
      }
}

// With F = I = W each rank is busy from its first action to its last once m
// covers the warm-up (m >= 2p-1): the paper's parallelogram, span bubble 0.
// The whole step still has ZB-H1's (p-1)/(3m+p-1), the p-1 forwards by which
// the last rank starts late; ZB-H2 pays that idle at the start, where with
// optimizer post-validation the previous step's drain fills it.
TEST(ScheduleMemory, ZbH2IsAParallelogramWhenFEqualsIEqualsW) {
  const Costs c = costs(1, 2, 1);
  for (int p = 1; p <= 8; ++p)
    for (int m = 2 * p - 1; m <= 32; ++m) {
      const TimelineStats st = simulate_stats(zb_h2(p, m), c);
      EXPECT_NEAR(st.span_bubble_fraction, 0.0, 1e-12) << "p=" << p << " m=" << m;
      EXPECT_NEAR(st.bubble_fraction, (p - 1.0) / (3 * m + p - 1), 1e-12) << "p=" << p << " m=" << m;
      const TimelineStats h1 = simulate_stats(zb_h1(p, m), c);
      if (p > 1) {
        EXPECT_GT(h1.span_bubble_fraction, 0.0);  // ZB-H1 is a trapezoid: rank 0 waits in the middle
      }
    }
}

// Unequal costs: ZB-H2 never loses to ZB-H1 (same F/I chain, more room to fill).
TEST(ScheduleMemory, ZbH2NoSlowerThanZbH1) {
  for (const Costs& c : {costs(1, 2, 1), costs(18.522, 27.423, 9.337), costs(29.718, 49.371, 19.927), costs(1, 3, 0.5)})
    for (int p = 2; p <= 8; ++p)
      for (int m : {p, 2 * p, 3 * p + 1, 24})
        EXPECT_LE(simulate_stats(zb_h2(p, m), c).step_time, simulate_stats(zb_h1(p, m), c).step_time + 1e-9)
            << "p=" << p << " m=" << m;
}

// The controllable-memory paper's V-Half and V-Min: about 1/2 and 1/3 of 1F1B's
// activation memory, at about 1/2 and 2/3 of its bubble (equal F, I, W). Our
// building block (NOTE [v-half and v-min] in generators_v.cpp) keeps at most
// p+1 chunk activations in flight for V-Half (ratio 1/2, + 1/(2p) for odd p) and
// ceil((4p+2)/6)+1 for V-Min (ratio 1/3 + O(1/p): a micro-batch's chunk
// activations live (4p+2) slots of the 6 a rank spends per micro-batch, plus
// one for starting ahead of the slot when the list runs as soon as it can).
// Bubble tolerances: V-Half within [0.35, 0.65] of 1F1B's, V-Min within
// [0.6, 0.8], for p 4..12 and m 2p..8p (the papers give "about").
TEST(ScheduleMemory, VHalfAndVMinMatchThePaperRatios) {
  const Costs c = costs(1, 2, 1);
  for (int p = 4; p <= 12; ++p)
    for (int m : {2 * p, 4 * p, 8 * p}) {
      const std::string at = "p=" + std::to_string(p) + " m=" + std::to_string(m);
      const TimelineStats base = simulate_stats(one_f_one_b(p, m), c);
      const TimelineStats half = simulate_stats(v_half(p, m), c), vmin = simulate_stats(v_min(p, m), c);
      EXPECT_GE(peak(half), p) << at;
      EXPECT_LE(peak(half), p + 1) << at;
      EXPECT_LE(peak(vmin), (4 * p + 2 + 5) / 6 + 1) << at;
      EXPECT_LE(peak(vmin), peak(half)) << at;  // equal at p = 4 and 6, where rounding meets
      EXPECT_NEAR(memory_ratio("v-half", p, m, c), 0.5, 0.5 / p + 1e-12) << at;
      EXPECT_NEAR(memory_ratio("v-min", p, m, c), 1.0 / 3, 1.2 / p) << at;
      EXPECT_NEAR(memory_ratio("zb-v", p, m, c), 1.0, 1e-12) << at;  // ZB-V keeps 1F1B's
      const double h = half.bubble_fraction / base.bubble_fraction, v = vmin.bubble_fraction / base.bubble_fraction;
      EXPECT_GE(h, 0.35) << at;
      EXPECT_LE(h, 0.65) << at;
      EXPECT_GE(v, 0.6) << at;
      EXPECT_LE(v, 0.8) << at;
    }
}

// Every (p, m) the V kinds accept validates (pair order and NCCL rules
// included) under explicit communication, and the validator agrees with the
// simulator's run; the sweep of test_schedule_generators.cpp covers p 1..8,
// m 1..32 too, this one larger p.
TEST(ScheduleMemory, VHalfAndVMinValidateForLargerP) {
  for (const std::string kind : {"v-half", "v-min", "zb-h2"})
    for (int p : {9, 12, 16})
      for (int m : {1, p - 1, 2 * p + 1, 3 * p}) {
        const Schedule s = generate(kind, p, m);
        EXPECT_NO_THROW(validate(s)) << kind << " p=" << p << " m=" << m;
      }
}

// zb-auto (NOTE [zb-auto]): every list it returns validates and keeps its
// memory limit on every rank; with the limit p it is never worse than ZB-H1 in
// the paper's accounting, with 2p-1 never worse than ZB-H2 (both are in its
// family and are its seeds), whatever the costs.
TEST(ScheduleMemory, ZbAutoKeepsItsLimitAndBeatsItsSeeds) {
  for (const Costs& c : {costs(1, 2, 1), costs(18.522, 27.423, 9.337), costs(29.718, 49.371, 19.927)})
    for (int p = 1; p <= 5; ++p)
      for (int m : {1, p, 2 * p + 1}) {
        const std::string at = "p=" + std::to_string(p) + " m=" + std::to_string(m);
        for (int limit : {1, p, 2 * p - 1}) {
          const Schedule s = zb_auto(p, m, c, limit);
          ASSERT_NO_THROW(validate(add_communication(s))) << at << " limit " << limit;
          EXPECT_LE(peak(simulate_stats(s, c)), limit) << at << " limit " << limit;
        }
        const double h1 = simulate_stats(zb_h1(p, m), c).span_bubble_fraction;
        const double h2 = simulate_stats(zb_h2(p, m), c).span_bubble_fraction;
        EXPECT_LE(simulate_stats(zb_auto(p, m, c, p), c).span_bubble_fraction, h1 + 1e-9) << at;
        if (m >= 2 * p - 1) {
          EXPECT_LE(simulate_stats(zb_auto(p, m, c, 2 * p - 1), c).span_bubble_fraction, h2 + 1e-9) << at;
        }
      }
  EXPECT_THROW(zb_auto(4, 8, costs(1, 2, 1), 0), ScheduleError);
}

// ZbObjective::kStep, what the trainer and the planner search (no optimizer
// post-validation: every rank starts the step together): within the limit p
// its step is never longer than ZB-H1's, with 2p-1 never longer than ZB-H2's,
// also on stages of unequal cost with link latency, where the paper's span
// objective may trade a longer step for a shorter span.
TEST(ScheduleMemory, ZbAutoStepObjectiveNeverLosesToItsSeedsStep) {
  Costs uneven = costs(1, 2, 1);
  uneven.stage_costs = {{1.2, 2.2, 1.0}, {1, 2, 1}, {1, 2, 1}, {1.9, 3.6, 1.6}};
  uneven.latency = {0.15, 0.15, 0.15};
  bool span_lost_a_step = false;
  for (const Costs& c : {costs(1, 2, 1), costs(18.522, 27.423, 9.337), uneven})
    for (int m : {4, 9, 16}) {
      const int p = 4;
      const std::string at = "m=" + std::to_string(m);
      const Schedule step1 = zb_auto(p, m, c, p, ZbObjective::kStep);
      EXPECT_LE(peak(simulate_stats(step1, c)), p) << at;
      EXPECT_LE(simulate_stats(step1, c).step_time, simulate_stats(zb_h1(p, m), c).step_time + 1e-9) << at;
      if (m >= 2 * p - 1) {
        EXPECT_LE(simulate_stats(zb_auto(p, m, c, 2 * p - 1, ZbObjective::kStep), c).step_time,
                  simulate_stats(zb_h2(p, m), c).step_time + 1e-9)
            << at;
      }
      const TimelineStats span1 = simulate_stats(zb_auto(p, m, c, p, ZbObjective::kSpan), c);
      EXPECT_LE(span1.span_bubble_fraction, simulate_stats(step1, c).span_bubble_fraction + 1e-9) << at;
      span_lost_a_step = span_lost_a_step || span1.step_time > simulate_stats(step1, c).step_time + 1e-9;
    }
  EXPECT_TRUE(span_lost_a_step) << "the two objectives never differed: the case proves nothing";
}
