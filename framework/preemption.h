// Preemption: SIGTERM (what Slurm sends before it kills a job, and what
// torchrun and `trident launch` forward) or SIGUSR1 (Slurm's --signal) asks a
// checkpointing run to stop cleanly: every rank finishes the step it is in,
// all agree on the step, save a checkpoint there and exit with 128 + the
// signal's number (NOTE [preemption]). Pure POSIX; the agreement is the caller's.
#pragma once

#include <signal.h>

namespace trident {

// While alive, SIGTERM and SIGUSR1 only record that they arrived; a second
// one of either takes its default action (the process ends at once). The
// destructor restores the handlers it replaced. One at a time per process.
class PreemptionSignals {
 public:
  PreemptionSignals();
  ~PreemptionSignals();
  PreemptionSignals(const PreemptionSignals&) = delete;
  PreemptionSignals& operator=(const PreemptionSignals&) = delete;
  // The first signal that arrived, or 0.
  static int received();

 private:
  struct sigaction old_term_ {}, old_usr1_ {};
};

// "SIGTERM", "SIGUSR1", else "signal N".
const char* preemption_signal_name(int sig);

}  // namespace trident
