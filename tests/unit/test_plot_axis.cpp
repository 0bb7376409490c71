// Plot axes (metrics/plot_axis.h): 1-2-5 ticks in closed-form cases, their
// labels, and loss.svg drawn during a run (RunLog), not only at its end.
#include "metrics/plot_axis.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "metrics/metrics.h"

using trident::round_axis;
using trident::tick_label;

namespace {

std::vector<double> ticks(double lo, double hi, int n = 5, bool integer = false) {
  return round_axis(lo, hi, n, integer).ticks;
}

}  // namespace

// Ticks equal to `expect` up to the last bits of k * step.
static ::testing::AssertionResult near(const std::vector<double>& got, const std::vector<double>& expect) {
  bool same = got.size() == expect.size();
  for (size_t i = 0; same && i < got.size(); ++i) same = std::abs(got[i] - expect[i]) <= 1e-12 * (1 + std::abs(expect[i]));
  if (same) return ::testing::AssertionSuccess();
  std::string text;
  for (double v : got) text += std::to_string(v) + " ";
  return ::testing::AssertionFailure() << "ticks " << text;
}

TEST(RoundAxis, StepsOfOneTwoOrFive) {
  // 1268 steps in at most 5 intervals: 253.6 per interval -> 500.
  EXPECT_EQ(ticks(1, 1268, 5, true), (std::vector<double>{0, 500, 1000, 1500}));
  EXPECT_EQ(round_axis(1, 1268, 5, true).step, 500);
  EXPECT_EQ(ticks(1, 1000, 5, true), (std::vector<double>{0, 200, 400, 600, 800, 1000}));
  EXPECT_EQ(ticks(2.31, 5.62), (std::vector<double>{2, 3, 4, 5, 6}));
  EXPECT_TRUE(near(ticks(0, 0.7), {0, 0.2, 0.4, 0.6, 0.8}));
  EXPECT_EQ(round_axis(0, 0.7).step, 0.2);
  // 0.12 wide: 0.01 and 0.02 give more than 5 intervals, 0.05 gives 3.
  EXPECT_TRUE(near(ticks(5.4, 5.52), {5.4, 5.45, 5.5, 5.55}));
  EXPECT_EQ(ticks(-3, 7), (std::vector<double>{-5, 0, 5, 10}));
  // At most 10 intervals over [-3, 7]: steps of 1 (10 intervals) fit exactly.
  EXPECT_EQ(ticks(-3, 7, 10), (std::vector<double>{-3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}));
  // Integer axes never step below 1; a single point widens to a unit.
  EXPECT_EQ(ticks(1, 3, 5, true), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(ticks(1, 1, 5, true), (std::vector<double>{0, 1, 2}));
  EXPECT_TRUE(near(ticks(4, 4), {3.5, 4, 4.5}));
  // Bounds that are ticks stay ticks (no extra interval from rounding).
  EXPECT_TRUE(near(ticks(0, 1), {0, 0.2, 0.4, 0.6, 0.8, 1}));
  EXPECT_TRUE(near(ticks(NAN, 3), {0, 0.2, 0.4, 0.6, 0.8, 1}));
}

TEST(RoundAxis, LabelsCarryTheStepsDigits) {
  EXPECT_EQ(tick_label(1500, 500), "1500");
  EXPECT_EQ(tick_label(0.6000000000000001, 0.2), "0.6");
  EXPECT_EQ(tick_label(5.45, 0.05), "5.45");
  EXPECT_EQ(tick_label(5.5, 0.05), "5.50");
  EXPECT_EQ(tick_label(-0.0, 1), "0");
  EXPECT_EQ(tick_label(3e7, 1e7), "3e+07");
}

// A run killed after its first logged steps leaves a loss.svg of them.
TEST(RunLog, LossSvgIsDrawnDuringTheRun) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("trident-runlog-" + std::to_string(::getpid()))).string();
  {
    trident::RunLog log(dir, "test run", -1, false);
    trident::StepMetrics m;
    m.step = 1;
    m.loss = 5.5;
    log.append(m);
    std::ifstream in(dir + "/loss.svg");
    const std::string svg((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(svg.find("<polyline"), std::string::npos) << "no loss.svg after the first logged step";
    EXPECT_NE(svg.find(">5.2<"), std::string::npos) << svg;  // the axis 5.0 .. 6.0 in steps of 0.2
    EXPECT_FALSE(std::filesystem::exists(dir + "/loss.svg.tmp"));
  }
  std::filesystem::remove_all(dir);
}
