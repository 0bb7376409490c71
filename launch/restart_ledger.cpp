// The restart ledger (restart_ledger.h).
#include "launch/restart_ledger.h"

#include <algorithm>
#include <cstdio>

namespace trident::launch {

namespace {
std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", s);
  return text;
}
std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}
}  // namespace

// NOTE [restart accounting]
// A restart recomputes the steps its predecessor had completed after the
// checkpoint it resumes from: completed - resumed (the launcher reads
// `completed` from the ranks' progress records, the step being run minus one,
// and `resumed` from rank 0's note, NOTE [resumed step for the launcher]). The
// time it loses runs from the failure until the restarted job is first seen
// running a step past `completed` (the launcher looks every 200 ms), or until
// that attempt ends if it never gets there: detection, teardown, start-up,
// rendezvous, loading and the recomputed steps together.
void RestartLedger::failed(int attempt, const std::string& failure, int64_t completed, double failed_s) {
  failures_.push_back({attempt, failure, completed, failed_s});
  most_completed_ = std::max(most_completed_, completed);
}

void RestartLedger::restarted(double s) {
  Run r;
  r.failed_s = failures_.empty() ? s : failures_.back().at_s;
  r.started_s = s;
  r.lost_from = most_completed_;
  runs_.push_back(r);
}

void RestartLedger::resumed(int64_t step) {
  if (!runs_.empty()) runs_.back().resumed = step;
}

void RestartLedger::caught_up(double s) {
  if (!runs_.empty() && !runs_.back().caught_up_s) runs_.back().caught_up_s = s;
}

int64_t RestartLedger::steps_recomputed() const {
  int64_t n = 0;
  for (const Run& r : runs_)
    if (r.resumed && r.lost_from > *r.resumed) n += r.lost_from - *r.resumed;
  return n;
}

double RestartLedger::seconds_lost() const {
  double s = 0;
  for (size_t i = 0; i < runs_.size(); ++i) {
    const Run& r = runs_[i];
    // An attempt that never caught up lost all its time, up to the next failure or the end.
    const double until = r.caught_up_s ? *r.caught_up_s
                         : i + 1 < failures_.size() ? failures_[i + 1].at_s
                                                    : last_end_s_;
    s += std::max(0.0, until - r.failed_s);
  }
  return s;
}

std::vector<std::string> RestartLedger::report(bool finished) const {
  std::vector<std::string> lines;
  lines.push_back(std::string(finished ? "the job finished" : "the job failed") + " after " +
                  plural(restarts(), "restart", "restarts") + ": " +
                  plural(steps_recomputed(), "step", "steps") + " recomputed, " + seconds(seconds_lost()) + " lost");
  for (size_t i = 0; i < runs_.size(); ++i) {
    const Run& r = runs_[i];
    const Failure& f = failures_[i];
    std::string line = "restart " + std::to_string(i + 1) + ": after " + f.what;
    if (f.completed >= 0) line += " with " + plural(f.completed, "step", "steps") + " done";
    line += "; ranks restarted " + seconds(r.started_s - r.failed_s) + " after the failure";
    if (r.resumed) line += ", resumed from step " + std::to_string(*r.resumed);
    if (r.caught_up_s && r.lost_from >= 0)
      line += ", past step " + std::to_string(r.lost_from) + " " + seconds(*r.caught_up_s - r.failed_s) +
              " after the failure";
    lines.push_back(line);
  }
  return lines;
}

namespace {
std::string attempt_text(int attempt, const std::string& what) {
  return "attempt " + std::to_string(attempt) + ": " + what;
}
}  // namespace

std::string RestartLedger::failures() const {
  std::string s;
  for (const Failure& f : failures_) s += (s.empty() ? "" : "; ") + attempt_text(f.attempt, f.what);
  return s;
}

std::string RestartLedger::last_failure() const {
  return failures_.empty() ? "" : attempt_text(failures_.back().attempt, failures_.back().what);
}

}  // namespace trident::launch
