// Simulator: closed-form bubbles, interleaving and zero-bubble reductions, peak
// in-flight activations, latency, and the renderers' output shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "schedules/generators.h"
#include "schedules/render.h"
#include "schedules/simulate.h"
#include "schedules/split.h"
#include "../schedule_helpers.h"

using namespace trident::sched;

namespace {

TimelineStats run(const std::string& kind, int p, int m, int v, const Costs& c) {
  return stats(simulate(trident::testing::placed(kind, p, m, v), c));
}

Costs costs(double f, double b, double w) {
  Costs c;
  c.forward = f, c.backward = b, c.weight = w;
  return c;
}

const Costs kCostSets[] = {costs(1, 2, 1), costs(1, 1, 0.5), costs(2, 3, 1), costs(0.7, 1.9, 0.3)};

// Per rank: time from its first compute to its last, minus its compute. The
// zero-bubble papers count this ("parallelogram") idle: with their optimizer
// post-validation a rank starts the next step when it is done, so the
// pipeline's fill and drain overlap the neighbouring steps.
double max_span_idle(const Timeline& t) {
  const TimelineStats st = stats(t);
  double worst = 0;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    double first = -1, last = 0;
    for (const TimedAction& a : t.ranks[r])
      if (is_compute(a.action.kind)) {
        if (first < 0) first = a.start;
        last = a.end;
      }
    worst = std::max(worst, last - first - st.busy[r]);
  }
  return worst;
}

}  // namespace

TEST(ScheduleSimulate, GpipeAndOneFOneBMatchClosedForm) {
  for (const Costs& c : kCostSets)
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m) {
        const double closed = (p - 1.0) / (m + p - 1.0);
        EXPECT_NEAR(run("gpipe", p, m, 1, c).bubble_fraction, closed, 1e-12) << "p=" << p << " m=" << m;
        const TimelineStats st = run("1f1b", p, m, 1, c);
        EXPECT_NEAR(st.bubble_fraction, closed, 1e-12) << "p=" << p << " m=" << m;
        EXPECT_NEAR(st.step_time, (m + p - 1) * (c.forward + c.backward), 1e-9);
        for (double b : st.busy) EXPECT_NEAR(b, m * (c.forward + c.backward), 1e-9);
      }
}

TEST(ScheduleSimulate, InterleavedCutsIdleTimeByChunks) {
  for (const Costs& c : kCostSets)
    for (int p : {2, 3, 4, 8})
      for (int m : {p, p + 1, 2 * p, 2 * p + 1, 4 * p, 5 * p - 1})  // rounds of unequal size too
        for (int v : {2, 3}) {
          const TimelineStats base = run("1f1b", p, m, 1, c), il = run("interleaved", p, m, v, c);
          const double work = m * (c.forward + c.backward);
          // Idle per rank is (p-1)(F+B)/v: bubble = (p-1) / (v*m + p-1).
          EXPECT_NEAR(il.step_time - work, (base.step_time - work) / v, 1e-9) << "p=" << p << " m=" << m << " v=" << v;
          EXPECT_NEAR(il.bubble_fraction, (p - 1.0) / (v * m + p - 1.0), 1e-12);
          EXPECT_LT(il.bubble_fraction, base.bubble_fraction);
        }
}

TEST(ScheduleSimulate, ZbH1AtMostHalfOfOneFOneBWhenFEqualsIEqualsW) {
  const Costs c = costs(1, 2, 1);  // F = I = W = 1
  for (int p = 2; p <= 8; ++p)
    for (int m = 1; m <= 24; ++m) {
      const TimelineStats zb = run("zb-h1", p, m, 1, c), base = run("1f1b", p, m, 1, c);
      if (m >= p) {
        // Idle per rank is (p-1)(F+I-W) = p-1 against 1F1B's 3(p-1).
        EXPECT_LE(zb.bubble_fraction, 0.5 * base.bubble_fraction) << "p=" << p << " m=" << m;
        EXPECT_NEAR(zb.bubble_fraction, (p - 1.0) / (3.0 * m + p - 1.0), 1e-12) << "p=" << p << " m=" << m;
      } else {
        // Too few micro-batches to hide the I chain: only the step time shrinks.
        EXPECT_LT(zb.step_time, base.step_time) << "p=" << p << " m=" << m;
      }
    }
}

TEST(ScheduleSimulate, PeakInflight) {
  const Costs c;
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 12; ++m) {
      const TimelineStats g = run("gpipe", p, m, 1, c), o = run("1f1b", p, m, 1, c), z = run("zb-h1", p, m, 1, c);
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(g.peak_inflight[r], m);
        EXPECT_EQ(o.peak_inflight[r], std::min(p - r, m)) << "p=" << p << " m=" << m << " r=" << r;
        EXPECT_LE(z.peak_inflight[r], o.peak_inflight[r]);
      }
    }
}

TEST(ScheduleSimulate, LatencyDelaysEveryBoundary) {
  Costs c = costs(1, 2, 1);
  c.latency = {0.5};
  EXPECT_NEAR(run("gpipe", 2, 1, 1, c).step_time, 2 * 3 + 2 * 0.5, 1e-12);
  c.latency = {0.5, 0.25, 0.0};  // per boundary of p*v-1 = 3
  EXPECT_NEAR(run("gpipe", 4, 1, 1, c).step_time, 4 * 3 + 2 * 0.75, 1e-12);
  c.latency = {1, 2};
  EXPECT_THROW(simulate(generate("gpipe", 4, 1), c), ScheduleError);
  EXPECT_THROW(simulate(generate("gpipe", 2, 1), costs(1, 1, 1)), ScheduleError);  // B must exceed W
  // One rank with two chunks hands over locally: no latency.
  c = costs(1, 2, 1);
  c.latency = {5};
  EXPECT_NEAR(run("interleaved", 1, 2, 2, c).step_time, 6, 1e-12);
  // The turn of a V stays on one rank: of its 3 boundaries 2 cross ranks,
  // against all 3 under loop placement; one micro-batch crosses each twice.
  const Costs c0 = costs(1, 2, 1);
  EXPECT_NEAR(run("zb-v", 2, 1, 2, c).step_time - run("zb-v", 2, 1, 2, c0).step_time, 2 * 2 * 5, 1e-12);
  EXPECT_NEAR(run("interleaved", 2, 2, 2, c).step_time - run("interleaved", 2, 2, 2, c0).step_time, 2 * 3 * 5, 1e-12);
  c.stage_scale = {1, 2};
  EXPECT_THROW(simulate(generate("gpipe", 4, 1), c), ScheduleError);  // one per virtual stage
}

TEST(ScheduleSimulate, PerStageCostsAreUsedAsGiven) {
  // Per-stage costs that are the uniform ones times a stage's multiplier
  // simulate exactly like stage_scale (interleaved p=2 v=2: chunk costs are
  // the full-stage costs / v, and stage_costs are not divided again).
  Costs scaled = costs(2, 4, 1), given = costs(2, 4, 1);
  scaled.stage_scale = {1, 1.5, 1, 3};
  for (double k : scaled.stage_scale) given.stage_costs.push_back({k * 2 / 2, k * 4 / 2, k * 1 / 2});
  for (const char* kind : {"interleaved"}) {
    const TimelineStats a = run(kind, 2, 6, 2, scaled), b = run(kind, 2, 6, 2, given);
    EXPECT_DOUBLE_EQ(a.step_time, b.step_time);
    EXPECT_DOUBLE_EQ(a.bubble_fraction, b.bubble_fraction);
  }
  // Stages with their own F:B ratio: 1F1B p=2 m=1 is F0 F1 B1 B0 in a row.
  Costs own = costs(1, 2, 1);
  own.stage_costs = {{1, 5, 2}, {3, 4, 0}};
  EXPECT_DOUBLE_EQ(run("1f1b", 2, 1, 1, own).step_time, 1 + 3 + 4 + 5);
  EXPECT_DOUBLE_EQ(run("zb-h1", 2, 1, 1, own).step_time, 1 + 3 + 4 + 3 + 2);  // rank 0: I = 3 then W = 2
  own.stage_scale = {1, 1};
  EXPECT_THROW(run("1f1b", 2, 1, 1, own), ScheduleError);  // both ways at once
  own.stage_scale = {};
  own.stage_costs = {{1, 5, 2}};
  EXPECT_THROW(run("1f1b", 2, 1, 1, own), ScheduleError);  // one per virtual stage
  own.stage_costs = {{1, 2, 2}, {1, 2, 0}};
  EXPECT_THROW(run("1f1b", 2, 1, 1, own), ScheduleError);  // B > W
}

TEST(ScheduleSimulate, RecvRecordsItsWait) {
  const Timeline t = simulate(generate("gpipe", 2, 1), costs(1, 2, 1));
  ASSERT_EQ(t.ranks[1].front().action, (Action{ActionKind::RECV_F, 0, 0}));
  EXPECT_EQ(t.ranks[1].front().start, 0);  // posted at 0
  EXPECT_EQ(t.ranks[1].front().end, 1);    // its data came at 1
  EXPECT_EQ(t.ranks[1][1].start, 1);       // and F0 waited for it
}

TEST(ScheduleSimulate, EarlyPostedReceiveIsNotAWait) {
  // Rank 1 posts mb 1's receive before computing mb 0: the receive waits in
  // the background, the rank does not (it would, if receives blocked).
  const Schedule s = parse_text(
      "pipeline p=2 m=2 v=1\n"
      "0: F0 SF0 F1 SF1 RB0 B0 RB1 B1 RD\n"
      "1: RF0 RF1 F0 B0 SB0 F1 B1 SB1 RD\n");
  const Timeline t = simulate(s, costs(1, 2, 1));
  EXPECT_EQ(t.ranks[1][1].start, 0);
  EXPECT_EQ(t.ranks[1][1].end, 2);  // RF1's data came when rank 0 finished F1
  EXPECT_NEAR(stats(t).step_time, stats(simulate(generate("1f1b", 2, 2), costs(1, 2, 1))).step_time, 1e-12);
}

TEST(ScheduleSimulate, StatsWithoutTimelineAgree) {
  for (const std::string& kind : schedule_kinds())
    for (int p : {1, 2, 3, 5})
      for (int m : {2 * p, 2 * p + 3}) {
        const int v = kind == "interleaved" ? 3 : default_chunks(kind);
        Costs c = costs(0.7, 1.9, 0.3);
        c.latency = {0.1};
        const TimelineStats full = stats(simulate(trident::testing::placed(kind, p, m, v), c));
        const TimelineStats lean = simulate_stats(generate_compute(kind, p, m, v), c);
        EXPECT_NEAR(lean.step_time, full.step_time, 1e-9) << kind << " p=" << p << " m=" << m;
        EXPECT_NEAR(lean.bubble_fraction, full.bubble_fraction, 1e-12) << kind;
        EXPECT_EQ(lean.peak_inflight, full.peak_inflight) << kind;
      }
}

TEST(ScheduleSimulate, ZbVFillsEverythingButThePipelineFill) {
  // F = I = W. Qi et al. (ICLR 2024, and the authors' comparison table)
  // give ZB-V a bubble rate of 0 at 1F1B's activation memory: counted per
  // rank from its first to its last action, there is no idle at all. Each
  // rank still starts r chunk-forwards late and ends p-1-r early, so with all
  // ranks starting together the step is m(F+B) + (p-1)F/2: bubble
  // (p-1)/(6m+p-1), against 1F1B's (p-1)/(m+p-1) and ZB-H1's (p-1)/(3m+p-1).
  const Costs c = costs(1, 2, 1);
  for (int p = 2; p <= 8; ++p)
    for (int m = 2 * p; m <= 24; ++m) {
      const Timeline t = simulate(trident::testing::placed("zb-v", p, m, 2), c);
      const TimelineStats st = stats(t), base = run("1f1b", p, m, 1, c);
      EXPECT_NEAR(max_span_idle(t), 0.0, 1e-9) << "p=" << p << " m=" << m;
      EXPECT_NEAR(st.step_time, 3.0 * m + (p - 1) * 0.5, 1e-9) << "p=" << p << " m=" << m;
      EXPECT_NEAR(st.bubble_fraction, (p - 1.0) / (6.0 * m + p - 1.0), 1e-12);
      // Activations: a (mb, chunk) pair is half a stage's; never more than 1F1B's peak.
      const int peak = *std::max_element(st.peak_inflight.begin(), st.peak_inflight.end());
      EXPECT_LE(peak, 2 * *std::max_element(base.peak_inflight.begin(), base.peak_inflight.end()));
    }
  // Fewer micro-batches still beat 1F1B.
  for (int p = 2; p <= 8; ++p)
    for (int m = 1; m < 2 * p; ++m) EXPECT_LT(run("zb-v", p, m, 2, c).step_time, run("1f1b", p, m, 1, c).step_time);
}

TEST(ScheduleSimulate, DualPipeVMatchesDeepSeekBubble) {
  // DeepSeek-V3 report, table 2: DualPipe's bubble is (PP/2-1)(F&B + B - 3W)
  // per device, with chunk costs and F&B an overlapped pair's cost. DualPipeV
  // on p ranks is DualPipe on PP = 2p cut in half. Trident runs each of
  // DualPipe's pairs as the F and then the B (NOTE [no overlapped pairs]),
  // each waiting only for its own input. With F = I = W (chunk F = 0.5,
  // B = 1, W = 0.5) the worst rank's idle is exactly (p-1)/2: the table's
  // figure with F&B = 1, the fully overlapped pair's cost. (Priced as one
  // step that waits for both inputs, as the IR's pairs were, one after the
  // other gave p-1: the F waited for the B's gradient.)
  for (int p = 2; p <= 8; ++p)
    for (int m = 2 * p; m <= 2 * p + 9; ++m) {
      const TimelineStats st = run("dualpipev", p, m, 2, costs(1, 2, 1));
      double worst = 0;
      for (double b : st.busy) worst = std::max(worst, st.step_time - b);
      EXPECT_NEAR(worst, (p - 1) * (1.0 + 1.0 - 3 * 0.5), 1e-9) << "p=" << p << " m=" << m;
    }
}

TEST(ScheduleSimulate, ReduceGradTakesNoTime) {
  // A REDUCE_GRAD is an instant at its rank's clock (the closed-form bubble
  // tests above run with them); a list without them is not a schedule.
  for (const std::string kind : {"1f1b", "zb-h1", "zb-v", "dualpipev"}) {
    const Schedule s = generate_compute(kind, 3, 6, default_chunks(kind));
    Schedule bare = s;
    for (auto& list : bare.ranks)
      list.erase(std::remove_if(list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::REDUCE_GRAD; }),
                 list.end());
    const Timeline t = simulate(s, costs(1, 2, 1));
    for (const auto& list : t.ranks)
      for (const TimedAction& a : list)
        if (a.action.kind == ActionKind::REDUCE_GRAD) {
          EXPECT_EQ(a.start, a.end) << kind;
        }
    EXPECT_THROW(simulate(bare, costs(1, 2, 1)), ScheduleError) << kind;
  }
}

TEST(ScheduleSimulate, BalancedSplitBeatsUniformOnAHeadHeavyModel) {
  // 8 equal layers, an embedding of 0.5 and a head worth 4 layers, p = 4.
  const std::vector<double> layers(8, 1.0);
  const std::vector<int> split = balanced_split(layers, 0.5, 4.0, 4);
  EXPECT_EQ(std::accumulate(split.begin(), split.end(), 0), 8);
  EXPECT_EQ(split.back(), 1);  // the head's stage gets the fewest layers
  const std::vector<double> uniform = split_stage_costs(layers, 0.5, 4.0, {2, 2, 2, 2});
  const std::vector<double> balanced = split_stage_costs(layers, 0.5, 4.0, split);
  EXPECT_NEAR(*std::max_element(uniform.begin(), uniform.end()), 6.0, 1e-12);
  EXPECT_NEAR(*std::max_element(balanced.begin(), balanced.end()), 5.0, 1e-12);  // 1 layer + head: the optimum
  Costs cu = costs(1, 2, 1), cb = cu;
  cu.stage_scale = uniform;
  cb.stage_scale = balanced;
  const TimelineStats u = run("1f1b", 4, 8, 1, cu), b = run("1f1b", 4, 8, 1, cb);
  EXPECT_LT(b.bubble_fraction, u.bubble_fraction);
  EXPECT_LT(b.step_time, u.step_time);
}

TEST(ScheduleSimulate, BalancedSplitIsExact) {
  // Against brute force over every split of 9 layers into 3 stages.
  const std::vector<double> layers = {3, 1, 4, 1, 5, 9, 2, 6, 5};
  for (double emb : {0.0, 2.0})
    for (double head : {0.0, 7.0}) {
      double best = 1e18;
      for (int a = 1; a <= 7; ++a)
        for (int b = 1; a + b <= 8; ++b) {
          const auto c = split_stage_costs(layers, emb, head, {a, b, 9 - a - b});
          best = std::min(best, *std::max_element(c.begin(), c.end()));
        }
      const auto c = split_stage_costs(layers, emb, head, balanced_split(layers, emb, head, 3));
      EXPECT_DOUBLE_EQ(*std::max_element(c.begin(), c.end()), best) << emb << " " << head;
    }
  EXPECT_EQ(balanced_split({1, 1, 1, 1}, 0, 0, 4), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_THROW(balanced_split({1, 1}, 0, 0, 3), ScheduleError);
  EXPECT_THROW(balanced_split({1, -1}, 0, 0, 1), ScheduleError);
  EXPECT_THROW(split_stage_costs({1, 1}, 0, 0, {1}), ScheduleError);
}

TEST(ScheduleRender, OutputsHaveTheirShape) {
  const Timeline t = simulate(trident::testing::placed("zb-h1", 3, 4), Costs{});
  const std::string text = render_text(t, "zb-h1");
  EXPECT_EQ(text.rfind("zb-h1 p=3 m=4 v=1: step", 0), 0u) << text;
  EXPECT_NE(text.find("rank 2"), std::string::npos);
  EXPECT_NE(text.find("W3"), std::string::npos);
  const std::string json = render_json(t, "zb-h1");
  for (const char* key : {"\"bubble_fraction\"", "\"step_time\"", "\"peak_inflight\": [3, 2, 1]", "\"timelines\"",
                          "{\"action\": \"F0\", \"start\": 0, \"end\": 1}"})
    EXPECT_NE(json.find(key), std::string::npos) << key;
  const std::string svg = render_svg(t, "zb-h1");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("bubble"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  const std::string chrome = render_chrome(t, "zb-h1");
  EXPECT_NE(chrome.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(chrome.find("\"name\": \"F0\", \"cat\": \"forward\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": 0, \"dur\": 1000"),
            std::string::npos) << chrome.substr(0, 400);
}
