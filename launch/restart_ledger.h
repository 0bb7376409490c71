// What `trident launch --max-restarts` reports about a restarted job: every
// failure that caused a restart (or the last, that made it give up), the steps
// recomputed and the time lost. Pure bookkeeping; launcher.cpp feeds it times
// and steps (NOTE [restart accounting] in restart_ledger.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trident::launch {

class RestartLedger {
 public:
  // Attempt `attempt` failed with `failure` ("rank 1 on node 0 (pid 7) was killed by
  // signal 9 (SIGKILL)") at `failed_s` (seconds on any one clock), having completed
  // `completed` steps (-1: unknown, e.g. a command that reports no progress).
  void failed(int attempt, const std::string& failure, int64_t completed, double failed_s);
  // The restarted attempt's ranks were started at `s`.
  void restarted(double s);
  // The running attempt resumed from step `step` (0: from scratch).
  void resumed(int64_t step);
  // The running attempt was first seen past every step completed before, at `s`.
  void caught_up(double s);
  // The running attempt ended at `s` (what it lost when it never caught up).
  void ended(double s) { last_end_s_ = s; }
  // The step the running attempt must pass to have recomputed what was lost (-1: none).
  int64_t catch_up_target() const { return most_completed_; }
  bool catching_up() const { return !runs_.empty() && !runs_.back().caught_up_s; }

  int restarts() const { return static_cast<int>(runs_.size()); }
  int64_t steps_recomputed() const;
  double seconds_lost() const;
  // "the job finished after 1 restart: 2 steps recomputed, 3.4 s lost", then one line per restart.
  std::vector<std::string> report(bool finished) const;
  // Every failure, attempt by attempt, for the message that gives up.
  std::string failures() const;
  // The latest failure, "attempt 1: rank 0 exited with status 1" ("" before any).
  std::string last_failure() const;

 private:
  struct Failure {
    int attempt = 0;
    std::string what;
    int64_t completed = -1;
    double at_s = 0;
  };
  struct Run {  // one restart: the attempt after a failure
    double failed_s = 0, started_s = 0;
    int64_t lost_from = -1;               // steps completed before it (the target)
    std::optional<int64_t> resumed;       // the step it resumed from
    std::optional<double> caught_up_s;    // when it passed lost_from
  };
  std::vector<Failure> failures_;
  std::vector<Run> runs_;
  int64_t most_completed_ = -1;
  double last_end_s_ = 0;
};

}  // namespace trident::launch
