// Where a rank is in its step, written where a launcher can read it even when
// the rank hangs: one fixed-size record per rank, overwritten in place
// (pwrite at offset 0) before every action and every wait, in the directory
// named by TRIDENT_PROGRESS_DIR. Also the fault-injection switch
// TRIDENT_FAULT_ACTION that tests use to make one rank stall or die. Pure POSIX.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trident::sched {

// One rank's latest report. `state` is "run" (an action started), "wait" (a
// receive or collective is waiting; `peer` is the global rank waited on, -1
// for a collective), "phase" (a trainer phase such as grad-sync) or "done"
// (the step finished).
struct ProgressRecord {
  int rank = -1;
  int64_t time_ms = 0;  // wall clock (ms since the epoch): comparable across processes
  int64_t step = 0;     // 1-based training step
  int index = -1;       // position in the rank's action list (-1 for a phase)
  std::string token;    // action token (RB3, F5.1) or phase name (grad-sync)
  std::string state;
  int peer = -1;
};

std::string format_record(const ProgressRecord& r);  // one line, no newline
bool parse_record(const std::string& line, ProgressRecord& out);

// TRIDENT_FAULT_ACTION="RANK:TOKEN:MODE": global rank RANK, before its first action
// whose token is TOKEN, stalls forever (MODE = stall) or exits at once with
// status 86 (MODE = exit), as a hung or crashed process would.
struct Fault {
  int rank = -1;
  std::string token;
  std::string mode;
};
Fault parse_fault(const std::string& spec);  // throws std::runtime_error naming the bad part

class Progress {
 public:
  // Reads TRIDENT_PROGRESS_DIR and TRIDENT_FAULT_ACTION; does nothing when neither is set.
  explicit Progress(int global_rank);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool enabled() const { return fd_ >= 0 || fault_.rank == rank_; }
  void set_step(int64_t step) { step_ = step; }
  // Before action `index` of the list runs (and where the fault fires).
  void action(int index, const std::string& token);
  // Before blocking on a receive from global rank `peer`.
  void wait(int index, const std::string& token, int peer);
  void phase(const std::string& name);  // a trainer phase: grad-sync, optimizer, collective
  void done();

 private:
  void write(int index, const std::string& token, const char* state, int peer);
  int rank_;
  int fd_ = -1;
  int64_t step_ = 0;
  Fault fault_;
};

// The files a run's ranks wrote: DIR/rank<R>.txt, read back (ranks without a
// file are absent).
std::vector<ProgressRecord> read_progress_dir(const std::string& dir);

}  // namespace trident::sched
