// `trident bench bubble`: the pipeline bubble three ways for each (schedule,
// p, m, v): the closed form where one exists, the simulator on the real
// action lists, and a measurement of the real executor over real Gloo
// process groups (p ranks as threads) running a synthetic stage whose F, I
// and W take a set time. See NOTE [synthetic stage] in bubble_bench.cpp.
#pragma once

#include <string>
#include <vector>

namespace trident::bench {

struct BubbleCase {
  std::string schedule;
  int p = 2, m = 4, v = 1;
};

struct BubbleRow {
  BubbleCase c;
  double closed_form = -1;  // -1: no closed form for this case
  double simulated = 0;     // simulator, the set costs, no latency
  double measured = 0;      // median over the measured steps
  double step_ms = 0;       // measured pipeline time (slowest rank's executor run), median
  double sim_step_ms = 0;   // simulated step time
  double predicted = 0;     // simulator with the run's measured mean F/B/I/W and link latency
  double latency_ms = 0;    // that measured latency
};

struct StageMs {
  double f = 20, b = 40, w = 20;  // per full stage; I = B - W
};

// Closed forms (zero latency): GPipe/1F1B (p-1)/(m+p-1), interleaved
// (p-1)/(vm+p-1), ZB-H1 with F = I = W and m >= p (p-1)/(3m+p-1); else -1.
double closed_form_bubble(const BubbleCase& c, const StageMs& ms);

// Runs one case: `steps` executor steps after one warm-up step; the measured
// figures are medians over the steps, the predicted one uses their mean costs.
BubbleRow run_bubble_case(const BubbleCase& c, const StageMs& ms, int steps);

std::string bubble_csv(const std::vector<BubbleRow>& rows);
// Bubble against m: one line per (schedule, p), measured solid with dots,
// closed form dashed, simulated as open circles.
std::string bubble_svg(const std::vector<BubbleRow>& rows, const std::string& title);

}  // namespace trident::bench
