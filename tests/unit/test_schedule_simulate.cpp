// Simulator: closed-form bubbles, interleaving and zero-bubble reductions, peak
// in-flight activations, latency, and the renderers' output shape.
#include <gtest/gtest.h>

#include "schedules/generators.h"
#include "schedules/render.h"
#include "schedules/simulate.h"

using namespace trident::sched;

namespace {

TimelineStats run(const std::string& kind, int p, int m, int v, const Costs& c) {
  return stats(simulate(generate(kind, p, m, v), c));
}

const Costs kCostSets[] = {{1, 2, 1, {}}, {1, 1, 0.5, {}}, {2, 3, 1, {}}, {0.7, 1.9, 0.3, {}}};

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
      for (int m : {p, 2 * p, 4 * p})
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
  const Costs c{1, 2, 1, {}};  // F = I = W = 1
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
  Costs c{1, 2, 1, {0.5}};
  EXPECT_NEAR(run("gpipe", 2, 1, 1, c).step_time, 2 * 3 + 2 * 0.5, 1e-12);
  c.latency = {0.5, 0.25, 0.0};  // per boundary of p*v-1 = 3
  EXPECT_NEAR(run("gpipe", 4, 1, 1, c).step_time, 4 * 3 + 2 * 0.75, 1e-12);
  c.latency = {1, 2};
  EXPECT_THROW(simulate(generate("gpipe", 4, 1), c), ScheduleError);
  EXPECT_THROW(simulate(generate("gpipe", 2, 1), Costs{1, 1, 1, {}}), ScheduleError);  // B must exceed W
  // One rank with two chunks hands over locally: no latency.
  EXPECT_NEAR(run("interleaved", 1, 2, 2, Costs{1, 2, 1, {5}}).step_time, 6, 1e-12);
}

TEST(ScheduleSimulate, RecvRecordsItsWait) {
  const Timeline t = simulate(generate("gpipe", 2, 1), Costs{1, 2, 1, {}});
  ASSERT_EQ(t.ranks[1].front().action, (Action{ActionKind::RECV_F, 0, 0}));
  EXPECT_EQ(t.ranks[1].front().start, 0);
  EXPECT_EQ(t.ranks[1].front().end, 1);
}

TEST(ScheduleRender, OutputsHaveTheirShape) {
  const Timeline t = simulate(generate("zb-h1", 3, 4), Costs{});
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
