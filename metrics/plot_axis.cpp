// round_axis and tick_label: see plot_axis.h.
#include "metrics/plot_axis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace trident {

Axis round_axis(double lo, double hi, int max_intervals, bool integer_steps) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  if (hi == lo) {
    const double half = std::max(std::abs(lo) * 0.05, integer_steps ? 1.0 : 0.5);
    lo -= half, hi += half;
  }
  max_intervals = std::max(1, max_intervals);
  Axis a;
  // Candidates 1, 2, 5 x 10^k from a power just below the raw step upwards.
  const double raw = (hi - lo) / max_intervals;
  double power = std::pow(10.0, std::floor(std::log10(raw)) - 1);
  for (;; power *= 10) {
    bool found = false;
    for (double d : {1.0, 2.0, 5.0}) {
      const double step = d * power;
      if (integer_steps && step < 1) continue;
      // A small tolerance keeps a bound that is a multiple of the step (up to
      // rounding in the division) on its tick.
      const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
      if (last - first <= max_intervals) {
        a.step = step;
        a.lo = first * step;
        a.hi = last * step;
        for (double k = first; k <= last; ++k) a.ticks.push_back(k == 0 ? 0.0 : k * step);
        found = true;
        break;
      }
    }
    if (found) break;
  }
  return a;
}

std::string tick_label(double value, double step) {
  // Decimals: those of the step's leading digit (step = d x 10^k, k < 0: -k).
  const int k = static_cast<int>(std::floor(std::log10(step) + 1e-9));
  const int decimals = std::max(0, -k);
  char buf[48];
  if (std::abs(value) >= 1e7)
    std::snprintf(buf, sizeof buf, "%g", value);
  else
    std::snprintf(buf, sizeof buf, "%.*f", decimals, value == 0 ? 0.0 : value);
  return buf;
}

}  // namespace trident
