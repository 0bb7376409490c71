// Fault injection for the fault-matrix tests (tests/multinode): one
// environment variable, read in one place (`trident train`), so a test can make
// a chosen rank die, stall or leave early in the middle of a real run:
//   TRIDENT_FAULT="rank=R,step=S,kind=kill|stall|exit0[,attempt=A]"
// The fault fires on global rank R once <logging.dir>/metrics.jsonl, which rank 0
// appends to after every step, has S lines (S = 0: before training starts), so
// it lands inside step S + 1 of a multi-rank run. It lives outside the trainer:
// see launch/README.md for the hook a step-exact fault would need. A restarted
// job runs with the same environment, so the fault fires only in attempt A
// (default 0, the first; TORCHELASTIC_RESTART_COUNT / TRIDENT_RESTART_COUNT
// name the attempt): otherwise every attempt would die at the same step.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <thread>

namespace trident::launch {

struct FaultSpec {
  int rank = 0;
  int step = 0;
  std::string kind;  // "kill" (SIGKILL itself), "stall" (SIGSTOP itself), "exit0" (_exit(0))
  int attempt = 0;   // the restart attempt it fires in
};

// Parses TRIDENT_FAULT's value; throws LaunchError naming a bad or missing field.
FaultSpec parse_fault(const std::string& text);

// Arms the fault of TRIDENT_FAULT (if set and meant for `rank`) on a watcher
// thread; the destructor stops and joins it, so a run that ends first leaves
// nothing behind. `steps` (training.steps) bounds S so a fault cannot silently
// never fire.
class FaultInjector {
 public:
  // `attempt`: this process's restart attempt (WorldEnv::restart).
  FaultInjector(int rank, int attempt, const std::string& metrics_dir, long long steps);
  ~FaultInjector();
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;
  bool armed() const { return thread_.joinable(); }

 private:
  void watch(FaultSpec spec, std::string metrics_path);
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace trident::launch
