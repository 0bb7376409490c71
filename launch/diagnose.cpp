// Hang diagnosis: see diagnose.h.
#include "launch/diagnose.h"

#include <cstdio>
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
                   int64_t now_ms, const std::map<int, std::string>& ended) {
  const std::string who = "rank " + std::to_string(r);
  auto it = by_rank.find(r);
  if (it == by_rank.end()) {
    // It failed before its first record: how it failed says more than that it left none
    // (a program that could not be started, a bad argument).
    if (r == first.rank && first.how.rfind("could not be started", 0) == 0) return who + " " + first.how;
    if (r == first.rank) return who + " " + first.how + " before reporting its position";
    return who + " never reported its position";
  }
  const sched::ProgressRecord& rec = it->second;
  const std::string since = std::to_string((now_ms - rec.time_ms + 500) / 1000) + " s";
  if (r == first.rank) return who + " died (" + first.how + ") at " + position(rec);
  if (ended.count(r)) return who + " had " + ended.at(r) + ", last at " + position(rec);
  if (rec.state == "done") return who + " finished step " + std::to_string(rec.step) + " " + since + " ago";
  if (rec.state == "phase") return who + " has been in " + position(rec) + " for " + since;
  if (rec.state == "wait") return who + " waits in a collective at " + position(rec) + " for " + since;
  return who + " has made no progress since " + position(rec) + " for " + since;
}

}  // namespace

FirstFailure parse_failure_line(const std::string& text) {
  int rank = -1, node = -1, pid = -1, used = 0;
  if (std::sscanf(text.c_str(), "rank %d on node %d (pid %d) %n", &rank, &node, &pid, &used) < 3 || used == 0)
    return {};
  const std::string how = text.substr(static_cast<size_t>(used));
  return {rank, how.substr(0, how.find("; "))};
}

std::string diagnose(const std::vector<sched::ProgressRecord>& records, const FirstFailure& first, int64_t now_ms,
                     const std::map<int, std::string>& ended) {
  std::map<int, sched::ProgressRecord> by_rank;
  for (const auto& r : records) by_rank[r.rank] = r;
  // A rank killed by a signal, or one that had exited or been stopped, waits
  // on nobody, whatever its last record says. A rank that failed on its own
  // (a timeout) did wait: the chain goes on through it.
  const bool first_killed = first.how.rfind("was killed", 0) == 0;
  auto waits_on = [&](int r) {
    if ((r == first.rank && first_killed) || ended.count(r)) return -1;
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
        links.push_back(ending(by_rank, r, first, now_ms, ended)), shown.insert(r);
      std::string line;
      for (const auto& l : links) line += (line.empty() ? "" : " · ") + l;
      out << line << "\n";
    }
  // The rank that failed first, wherever it was, if no chain ended there.
  if (first.rank >= 0 && !shown.count(first.rank)) out << ending(by_rank, first.rank, first, now_ms, ended) << "\n";
  return out.str();
}

}  // namespace trident::launch
