// The launcher's plumbing: see relay.h.
#include "launch/relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <cstring>

#include "launch/launcher.h"

namespace trident::launch {

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

std::pair<UniqueFd, UniqueFd> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw LaunchError(std::string("cannot create a pipe: ") + std::strerror(errno));
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

LineRelay::LineRelay(UniqueFd fd, int out_fd, std::string prefix)
    : fd_(std::move(fd)), out_fd_(out_fd), prefix_(std::move(prefix)) {
  ::fcntl(fd_.get(), F_SETFL, ::fcntl(fd_.get(), F_GETFL) | O_NONBLOCK);
}

bool LineRelay::pump() {
  char buf[65536];
  const ssize_t n = ::read(fd_.get(), buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  if (n <= 0) {
    close_and_flush();
    return false;
  }
  pending_.append(buf, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1)
    emit(pending_.data() + start, nl - start);
  pending_.erase(0, start);
  if (pending_.size() >= kMaxLine) {  // progress bars, binary
    emit(pending_.data(), pending_.size());
    pending_.clear();
  }
  return true;
}

void LineRelay::close_and_flush() {
  if (!pending_.empty()) emit(pending_.data(), pending_.size());
  pending_.clear();
  fd_.reset();
}

void LineRelay::emit(const char* line, size_t size) {
  std::string out;
  out.reserve(prefix_.size() + size + 1);
  out.append(prefix_).append(line, size).push_back('\n');
  write_all(out_fd_, out.data(), out.size());
}

namespace {

int g_signal_write_fd = -1;  // the self-pipe's write end while a SignalRelay exists

extern "C" void relay_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  const ssize_t n = ::write(g_signal_write_fd, &byte, 1);  // a full pipe drops it: the loop is awake anyway
  (void)n;
  errno = saved;
}

}  // namespace

SignalRelay::SignalRelay() {
  assert(g_signal_write_fd < 0 && "one SignalRelay at a time");
  auto [r, w] = make_pipe();
  read_ = std::move(r);
  write_ = std::move(w);
  for (int fd : {read_.get(), write_.get()}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  g_signal_write_fd = write_.get();
  struct sigaction sa {};
  sa.sa_handler = relay_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // SIGCHLD on stop too: a SIGSTOPped rank is reported (Supervisor::reap)
  for (size_t i = 0; i < kRelayed.size(); ++i) ::sigaction(kRelayed[i], &sa, &saved_[i]);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &saved_pipe_);
}

SignalRelay::~SignalRelay() {
  for (size_t i = 0; i < kRelayed.size(); ++i) ::sigaction(kRelayed[i], &saved_[i], nullptr);
  ::sigaction(SIGPIPE, &saved_pipe_, nullptr);
  g_signal_write_fd = -1;
}

std::vector<int> SignalRelay::drain() {
  std::vector<int> sigs;
  unsigned char buf[64];
  ssize_t n;
  while ((n = ::read(read_.get(), buf, sizeof buf)) > 0) sigs.insert(sigs.end(), buf, buf + n);
  return sigs;
}

}  // namespace trident::launch
