// bubble.svg: bubble against micro-batches, one colour per schedule, one
// line per (schedule, p); measured solid with dots, closed form dashed,
// simulated open circles. Pure C++.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "measure/bubble_bench.h"
#include "metrics/plot_axis.h"
#include "schedules/format.h"

namespace trident::bench {
namespace {

std::string f(double v) { return sched::fixed(v, 1); }

const char* colour(const std::string& schedule) {
  if (schedule == "gpipe") return "#d62728";
  if (schedule == "1f1b") return "#1f77b4";
  if (schedule == "interleaved") return "#2ca02c";
  if (schedule == "zb-h1") return "#9467bd";
  return "#555555";
}

}  // namespace

std::string bubble_svg(const std::vector<BubbleRow>& rows, const std::string& title) {
  const double W = 900, H = 560, L = 70, R = 250, T = 50, B = 60;
  std::set<int> ms;
  double ymax = 0.05;
  for (const BubbleRow& r : rows) {
    ms.insert(r.c.m);
    ymax = std::max({ymax, r.measured, r.simulated, r.closed_form});
  }
  const Axis ya = round_axis(0, ymax, 5);  // 1-2-5 ticks, e.g. 0, 10, ..., 50 %
  ymax = ya.hi;
  // m on a log2 axis: the sweeps double it.
  const double lo = std::log2(std::max(1, *ms.begin())), hi = std::log2(std::max(2, *ms.rbegin()));
  auto x = [&](int m) { return L + (hi > lo ? (std::log2(m) - lo) / (hi - lo) : 0.5) * (W - L - R); };
  auto y = [&](double b) { return T + (1 - b / ymax) * (H - T - B); };
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + f(W) + "\" height=\"" + f(H) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + f(L) + "\" y=\"25\" font-size=\"15\">" + title + "</text>\n";
  for (double b : ya.ticks) {
    s += "<line x1=\"" + f(L) + "\" x2=\"" + f(W - R) + "\" y1=\"" + f(y(b)) + "\" y2=\"" + f(y(b)) +
         "\" stroke=\"#ddd\"/><text x=\"" + f(L - 8) + "\" y=\"" + f(y(b) + 4) + "\" text-anchor=\"end\">" +
         tick_label(100 * b, 100 * ya.step) + "%</text>\n";
  }
  for (int m : ms)
    s += "<text x=\"" + f(x(m)) + "\" y=\"" + f(H - B + 18) + "\" text-anchor=\"middle\">" + std::to_string(m) +
         "</text>\n";
  s += "<text x=\"" + f((L + W - R) / 2) + "\" y=\"" + f(H - 15) +
       "\" text-anchor=\"middle\">micro-batches m</text>\n<text x=\"18\" y=\"" + f((T + H - B) / 2) +
       "\" transform=\"rotate(-90 18 " + f((T + H - B) / 2) + ")\" text-anchor=\"middle\">bubble</text>\n";
  std::map<std::pair<std::string, int>, std::vector<const BubbleRow*>> lines;
  for (const BubbleRow& r : rows) lines[{r.c.schedule + (r.c.v > 1 ? " v=" + std::to_string(r.c.v) : ""), r.c.p}].push_back(&r);
  double ly = T + 10;
  for (auto& [key, pts] : lines) {
    std::sort(pts.begin(), pts.end(), [](auto* a, auto* b) { return a->c.m < b->c.m; });
    const std::string col = colour(pts[0]->c.schedule);
    const std::string width = f(0.8 + 0.5 * std::log2(key.second));  // thicker for more stages
    std::string meas, closed;
    for (const BubbleRow* r : pts) {
      meas += (meas.empty() ? "" : " ") + f(x(r->c.m)) + "," + f(y(r->measured));
      if (r->closed_form >= 0) closed += (closed.empty() ? "" : " ") + f(x(r->c.m)) + "," + f(y(r->closed_form));
      s += "<circle cx=\"" + f(x(r->c.m)) + "\" cy=\"" + f(y(r->measured)) + "\" r=\"3\" fill=\"" + col + "\"/>";
      s += "<circle cx=\"" + f(x(r->c.m)) + "\" cy=\"" + f(y(r->simulated)) + "\" r=\"6\" fill=\"none\" stroke=\"" +
           col + "\"/>\n";
    }
    s += "<polyline fill=\"none\" stroke=\"" + col + "\" stroke-width=\"" + width + "\" points=\"" + meas + "\"/>\n";
    if (!closed.empty())
      s += "<polyline fill=\"none\" stroke=\"" + col + "\" stroke-width=\"" + width +
           "\" stroke-dasharray=\"5,4\" opacity=\"0.7\" points=\"" + closed + "\"/>\n";
    s += "<line x1=\"" + f(W - R + 15) + "\" x2=\"" + f(W - R + 45) + "\" y1=\"" + f(ly) + "\" y2=\"" + f(ly) +
         "\" stroke=\"" + col + "\" stroke-width=\"" + width + "\"/><text x=\"" + f(W - R + 52) + "\" y=\"" +
         f(ly + 4) + "\">" + key.first + ", p=" + std::to_string(key.second) + "</text>\n";
    ly += 17;
  }
  s += "<text x=\"" + f(W - R + 15) + "\" y=\"" + f(ly + 10) +
       "\">solid: measured · dashed: closed form</text>\n<text x=\"" + f(W - R + 15) + "\" y=\"" + f(ly + 26) +
       "\">open circles: simulated</text>\n</svg>\n";
  return s;
}

}  // namespace trident::bench
