// Validator: the checks and the run live in engine.cpp (NOTE [message
// matching]); this file keeps the public entry point and the error grid.
#include "schedules/validate.h"

#include <algorithm>

#include "schedules/engine.h"
#include "schedules/generators.h"
#include "schedules/pair_order.h"

namespace trident::sched {

std::string context_grid(const Schedule& s, int pos, const std::vector<std::pair<int, int>>& marks) {
  const int lo = std::max(0, pos - 5), hi = pos + 6;  // window of list positions [lo, hi)
  size_t width = 4;
  for (const auto& list : s.ranks)
    for (int i = lo; i < hi && i < static_cast<int>(list.size()); ++i) width = std::max(width, to_token(list[i]).size() + 3);
  auto cell = [&](std::string t) { return t + std::string(width > t.size() ? width - t.size() : 1, ' '); };
  std::string out = "  position  ";
  for (int i = lo; i < hi; ++i) out += cell(std::to_string(i));
  while (out.back() == ' ') out.pop_back();
  out += "\n";
  for (int r = 0; r < s.pipeline_ranks; ++r) {
    std::string row = "  rank " + std::to_string(r);
    row += std::string(row.size() < 12 ? 12 - row.size() : 1, ' ');
    for (int i = lo; i < hi && i < static_cast<int>(s.ranks[r].size()); ++i) {
      const bool marked = std::find(marks.begin(), marks.end(), std::make_pair(r, i)) != marks.end();
      const std::string t = to_token(s.ranks[r][i]);
      row += cell(marked ? "[" + t + "]" : t);
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  return out;
}

ValidationReport validate(const Schedule& s) {
  ValidationReport report = detail::run(s, nullptr, false).report;
  // NOTE [pair order]: what runs is the explicit list, or add_communication() of a compute-only one.
  check_pair_order(report.communication_added ? add_communication(s) : s);
  return report;
}

}  // namespace trident::sched
