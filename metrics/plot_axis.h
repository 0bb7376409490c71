// Round axis ticks for the SVG plots (loss.svg, bubble.svg, throughput.svg):
// steps of 1, 2 or 5 times a power of ten. Pure C++.
#pragma once

#include <string>
#include <vector>

namespace trident {

struct Axis {
  double lo = 0, hi = 1;      // the axis range: from the first tick to the last
  double step = 1;            // the distance between ticks: 1, 2 or 5 x 10^k
  std::vector<double> ticks;  // lo, lo + step, ..., hi (each k * step, not a running sum)
};

// The axis over data in [lo, hi]: step is the smallest 1, 2 or 5 x 10^k for which
// [floor(lo / step) * step, ceil(hi / step) * step] holds at most max_intervals
// steps; with integer_steps the step is at least 1 (an axis of step numbers).
// lo == hi widens to a unit around the value; a non-finite bound gives [0, 1].
// E.g. (1, 1268, 5) -> 0, 500, 1000, 1500; (2.31, 5.62, 5) -> 2, 3, 4, 5, 6.
Axis round_axis(double lo, double hi, int max_intervals = 5, bool integer_steps = false);

// A tick's label: the digits its step needs and no more (0.25 steps: "0.25";
// 0.2: "0.4"; 500: "1500"; 2e6 steps: "4e+06" only past 1e6).
std::string tick_label(double value, double step);

}  // namespace trident
