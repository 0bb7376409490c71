// The launcher's plumbing: ranks' output relayed line by line with a prefix,
// and signals routed into its poll loop through a self-pipe (NOTE [launcher
// process model] in launcher.cpp). Pure POSIX.
#pragma once

#include <signal.h>

#include <array>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "launch/unique_fd.h"

namespace trident::launch {

// Writes everything, retrying short writes; output to a closed terminal or
// pipe is dropped rather than stopping the supervision of the ranks.
void write_all(int fd, const char* data, size_t size);

// (read end, write end), both close-on-exec: a rank's dup2'ed copies are the
// only ones that survive exec, so no rank holds another rank's pipe open.
std::pair<UniqueFd, UniqueFd> make_pipe();

// One rank's stdout or stderr: reads the pipe and writes each complete line,
// prefixed, to the launcher's own stream with a single write().
class LineRelay {
 public:
  LineRelay(UniqueFd fd, int out_fd, std::string prefix);
  int fd() const { return fd_.get(); }
  bool open() const { return fd_.valid(); }
  // Reads what is available. Returns true if more may come soon (data was
  // read), false when the pipe is empty for now or closed.
  bool pump();
  // Emits a last line without its newline, as a line, and closes the pipe.
  void close_and_flush();

 private:
  static constexpr size_t kMaxLine = 1 << 20;  // bound for output that never ends a line
  void emit(const char* line, size_t size);
  UniqueFd fd_;
  int out_fd_;
  std::string prefix_;
  std::string pending_;  // bytes after the last newline seen
};

// Routes SIGINT, SIGTERM and SIGCHLD into a pipe the poll loop watches, ignores
// SIGPIPE, and restores the previous handlers when it goes. One at a time.
class SignalRelay {
 public:
  SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;
  ~SignalRelay();
  int read_fd() const { return read_.get(); }
  std::vector<int> drain();  // the signals received since the last call

 private:
  static constexpr std::array<int, 3> kRelayed{SIGINT, SIGTERM, SIGCHLD};
  UniqueFd read_, write_;
  std::array<struct sigaction, 3> saved_{};
  struct sigaction saved_pipe_ {};
};

}  // namespace trident::launch
