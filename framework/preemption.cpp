// Preemption signals (preemption.h).
#include "framework/preemption.h"

#include <atomic>
#include <stdexcept>

namespace trident {

namespace {
volatile sig_atomic_t g_received = 0;
std::atomic<bool> g_installed{false};

void on_signal(int sig) {
  if (g_received == 0) g_received = sig;
}
}  // namespace

PreemptionSignals::PreemptionSignals() {
  if (g_installed.exchange(true)) throw std::logic_error("PreemptionSignals: already installed in this process");
  g_received = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESETHAND: a second signal is not caught, so it ends the process as it
  // would have without a checkpoint dir ("stop now"). SA_RESTART: the blocking
  // calls of a collective in flight continue instead of failing with EINTR.
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  ::sigaction(SIGTERM, &sa, &old_term_);
  ::sigaction(SIGUSR1, &sa, &old_usr1_);
}

PreemptionSignals::~PreemptionSignals() {
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGUSR1, &old_usr1_, nullptr);
  g_installed = false;
}

int PreemptionSignals::received() { return g_received; }

const char* preemption_signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

}  // namespace trident
