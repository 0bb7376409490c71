// Linked into every GoogleTest executable: a test process that dies of a
// fatal signal first prints which signal and the dying thread's stack on
// stderr (CTest keeps it in the test's output), then dies of that signal as
// before. A crash seen once in a CI log is then a place in the code, not
// only "SEGFAULT".
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

namespace {

void say(const char* s) { (void)!write(STDERR_FILENO, s, std::strlen(s)); }

extern "C" void on_fatal_signal(int sig) {
  say("\n*** test process got ");
  say(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE" : sig == SIGILL ? "SIGILL" : "SIGABRT");
  say("; the stack of the thread it hit:\n");
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

struct InstallAtStart {
  InstallAtStart() {
    void* warm[1];
    backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, on_fatal_signal);
  }
} install_at_start;

}  // namespace
