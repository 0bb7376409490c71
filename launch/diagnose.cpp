// Hang diagnosis: see diagnose.h.
#include "launch/diagnose.h"

#include <map>
#include <set>
#include <sstream>

namespace trident::launch {
namespace {

std::string position(const sched::ProgressRecord& r) {
  if (r.state == "phase") return r.token + " (step " + std::to_string(r.step) + ")";
  return r.token + " (step " + std::to_string(r.step) + ", list index " + std::to_string(r.index) + ")";
}

// How a chain ends at rank r, which is not waiting on a peer.
std::string ending(const std::map<int, sched::ProgressRecord>& by_rank, int r, const FirstFailure& first,
                   int64_t now_ms) {
  const std::string who = "rank " + std::to_string(r);
  auto it = by_rank.find(r);
  if (it == by_rank.end()) return who + " never reported its position";
  const sched::ProgressRecord& rec = it->second;
  const std::string since = std::to_string((now_ms - rec.time_ms + 500) / 1000) + " s";
  if (r == first.rank) return who + " died (" + first.how + ") at " + position(rec);
  if (rec.state == "done") return who + " finished step " + std::to_string(rec.step) + " " + since + " ago";
  if (rec.state == "phase") return who + " has been in " + position(rec) + " for " + since;
  if (rec.state == "wait") return who + " waits in a collective at " + position(rec) + " for " + since;
  return who + " has made no progress since " + position(rec) + " for " + since;
}

}  // namespace

std::string diagnose(const std::vector<sched::ProgressRecord>& records, const FirstFailure& first, int64_t now_ms) {
  std::map<int, sched::ProgressRecord> by_rank;
  for (const auto& r : records) by_rank[r.rank] = r;
  auto waits_on = [&](int r) {
    auto it = by_rank.find(r);
    return it != by_rank.end() && it->second.state == "wait" && it->second.peer >= 0 ? it->second.peer : -1;
  };
  std::set<int> waited_on;
  for (const auto& [r, rec] : by_rank)
    if (waits_on(r) >= 0) waited_on.insert(waits_on(r));
  std::ostringstream out;
  std::set<int> shown;
  // Chains start at a waiting rank nobody waits on; in a cycle every rank is
  // waited on, so the leftovers start chains too.
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& [start, rec] : by_rank) {
      if (waits_on(start) < 0 || shown.count(start) || (pass == 0 && waited_on.count(start))) continue;
      std::vector<std::string> links;
      std::set<int> seen;
      int r = start;
      while (waits_on(r) >= 0 && !seen.count(r)) {
        seen.insert(r);
        shown.insert(r);
        const auto& w = by_rank.at(r);
        links.push_back("rank " + std::to_string(r) + " waits " + w.token + " from rank " + std::to_string(w.peer));
        r = w.peer;
      }
      if (seen.count(r))
        links.push_back("a cycle back to rank " + std::to_string(r) + ": the schedules deadlock");
      else
        links.push_back(ending(by_rank, r, first, now_ms)), shown.insert(r);
      std::string line;
      for (const auto& l : links) line += (line.empty() ? "" : " · ") + l;
      out << line << "\n";
    }
  if (out.str().empty() && first.rank >= 0) out << ending(by_rank, first.rank, first, now_ms) << "\n";
  return out.str();
}

}  // namespace trident::launch
