// The launchers' channel: node 0 listens, the others connect, lines of
// "<kind> <node> <unix ms> <text>" travel both ways.
#include "launch/job_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "launch/launcher.h"

namespace trident::launch {

// NOTE [job channel]
// Each node's launcher supervises only its own ranks; the ranks meet through rank 0's
// store, which the launchers cannot read (no libtorch here). Alone, a launcher learns of
// a remote failure only when its own ranks fail on a closed connection or a collective
// timeout, and then names its own rank as the cause. So the launchers keep a channel:
// node 0's listens on --launcher-port (master port + 1), the others connect and each
// reports its first failed rank, ranks stopped by a signal, a launcher interrupted by a
// signal, and its exit. Node 0 forwards every report to the others (replaying earlier
// ones to a launcher that connects late). A connection that closes before its launcher's
// "done" means that launcher or its machine went away: a failure too. On any failure
// every launcher stops its ranks at once, waits up to a second for the other nodes'
// reports, then prints the job's earliest failure by the reporters' wall clocks (assumed,
// as NTP keeps them, to agree well within the time a failure takes to spread). A channel
// that cannot be made costs only the cross-node reports: the ranks' timeouts still end the job.

namespace {

constexpr int64_t kRetryMs = 200;  // between connection attempts to node 0

const char* kind_word(JobEvent::Kind k) {
  switch (k) {
    case JobEvent::Kind::kHello: return "hello";
    case JobEvent::Kind::kFailed: return "failed";
    case JobEvent::Kind::kStopped: return "stopped";
    case JobEvent::Kind::kExited0: return "exited0";
    case JobEvent::Kind::kLost: return "lost";
    case JobEvent::Kind::kDone: return "done";
    case JobEvent::Kind::kProgress: return "progress";
  }
  return "?";
}

std::string one_decimal(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", seconds);
  return text;
}

}  // namespace

std::string encode(const JobEvent& e) {
  std::string text = e.text;
  std::replace(text.begin(), text.end(), '\n', ' ');
  return std::string(kind_word(e.kind)) + " " + std::to_string(e.node) + " " + std::to_string(e.unix_ms) + " " +
         text + "\n";
}

std::optional<JobEvent> decode(const std::string& line) {
  char word[16] = {};
  int node = -1;
  long long ms = -1;
  int used = 0;
  if (std::sscanf(line.c_str(), "%15s %d %lld %n", word, &node, &ms, &used) < 3 || node < 0 || ms < 0) return {};
  JobEvent e;
  bool known = false;
  for (auto k : {JobEvent::Kind::kHello, JobEvent::Kind::kFailed, JobEvent::Kind::kStopped,
                 JobEvent::Kind::kExited0, JobEvent::Kind::kLost, JobEvent::Kind::kDone, JobEvent::Kind::kProgress})
    if (std::strcmp(word, kind_word(k)) == 0) {
      e.kind = k;
      known = true;
    }
  if (!known) return {};
  e.node = node;
  e.unix_ms = ms;
  // %n stops before the text; a text-less line ("hello 1 5") may end right there.
  e.text = used > 0 && static_cast<size_t>(used) <= line.size() ? line.substr(static_cast<size_t>(used)) : "";
  return e;
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void JobVerdict::add(const JobEvent& e) {
  const bool in_range = e.node >= 0 && static_cast<size_t>(e.node) < reported_.size();
  switch (e.kind) {
    case JobEvent::Kind::kFailed:
      if (!first_ || e.unix_ms < first_->unix_ms) first_ = e;
      break;
    case JobEvent::Kind::kLost:
      if (!first_ || e.unix_ms < first_->unix_ms) first_ = e;
      [[fallthrough]];
    case JobEvent::Kind::kDone:  // its last word: progress records and all come before it
      if (in_range) reported_[static_cast<size_t>(e.node)] = true;
      break;
    case JobEvent::Kind::kStopped:
    case JobEvent::Kind::kExited0: notes_.push_back(e); break;
    case JobEvent::Kind::kHello:
    case JobEvent::Kind::kProgress: break;
  }
}

std::vector<JobEvent> JobVerdict::notes_before_first() const {
  std::vector<JobEvent> notes;
  for (const auto& note : notes_)
    if (first_ && note.unix_ms <= first_->unix_ms) notes.push_back(note);
  return notes;
}

std::vector<int> JobVerdict::silent_nodes(int self) const {
  std::vector<int> silent;
  for (size_t n = 0; n < reported_.size(); ++n)
    if (static_cast<int>(n) != self && !reported_[n]) silent.push_back(static_cast<int>(n));
  return silent;
}

std::string JobVerdict::describe() const {
  if (!first_) return "";
  std::string s = first_->text;
  // The failed node's own launcher already names its stopped and exited ranks.
  int named = 0, more = 0;
  for (const auto& note : notes_) {
    if (note.node == first_->node || note.unix_ms > first_->unix_ms) continue;
    if (named == 3) {
      ++more;
      continue;
    }
    ++named;
    s += "; " + note.text + " " + one_decimal(static_cast<double>(first_->unix_ms - note.unix_ms) / 1000) +
         " s earlier";
  }
  if (more > 0) s += "; and " + std::to_string(more) + " more";
  return s;
}

struct JobChannel::Peer {
  UniqueFd fd;
  bool connecting = false;  // a non-blocking connect() in progress (other nodes only)
  int node = -1;            // known after its hello: until then it may be anything listening on the port
  bool done = false;        // its launcher said it is exiting: a close is no loss
  std::string pending;      // bytes after the last newline
  std::vector<std::string> unsent;  // lines published before the connection was up
};

JobChannel::JobChannel(int node_rank, int nnodes, const std::string& master_addr, int port,
                       double connect_timeout_s)
    : node_rank_(node_rank), nnodes_(nnodes), master_addr_(master_addr), port_(port) {
  if (nnodes_ <= 1) return;
  if (node_rank_ == 0) {
    listener_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listener_.valid()) throw LaunchError(std::string("cannot create the launchers' socket: ") + std::strerror(errno));
    const int one = 1;
    ::setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener_.get(), 64) != 0)
      throw LaunchError("cannot listen for the other nodes' launchers on port " + std::to_string(port_) +
                        " (--launcher-port): " + std::strerror(errno));
    return;
  }
  connect_deadline_ms_ = unix_ms_now() + static_cast<int64_t>(connect_timeout_s * 1000);
  peers_.push_back(std::make_unique<Peer>());  // node 0's launcher; its node is set by its hello
  try_connect();
}

JobChannel::~JobChannel() = default;

void JobChannel::try_connect() {
  Peer& hub = *peers_.front();
  const int64_t now = unix_ms_now();
  if (now > connect_deadline_ms_) {
    gave_up_ = true;
    notices_.push_back("cannot reach node 0's launcher at " + master_addr_ + ":" + std::to_string(port_) +
                       " (--launcher-port); failures on other nodes will not be reported here");
    peers_.clear();
    return;
  }
  next_connect_ms_ = now + kRetryMs;
  hub.pending.clear();
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(master_addr_.c_str(), std::to_string(port_).c_str(), &hints, &found) != 0 || !found) return;
  hub.fd = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const int rc = hub.fd.valid() ? ::connect(hub.fd.get(), found->ai_addr, found->ai_addrlen) : -1;
  const int err = errno;
  ::freeaddrinfo(found);
  if (rc == 0 || err == EINPROGRESS) {
    hub.connecting = rc != 0;
    if (rc == 0) say_hello(hub);
  } else {
    hub.fd.reset();
  }
}

void JobChannel::say_hello(Peer& hub) {
  // The hello goes first: node 0 ignores a connection's lines before it.
  const std::string hello = encode({JobEvent::Kind::kHello, node_rank_, unix_ms_now(), ""});
  (void)::send(hub.fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  send_to(hub, "");  // then what was published while connecting
}

void JobChannel::send_to(Peer& peer, const std::string& line) {
  if (!peer.fd.valid() || peer.connecting) {
    if (!line.empty()) peer.unsent.push_back(line);
    return;
  }
  for (const auto& l : peer.unsent)  // a few short lines: they fit the socket buffer
    (void)::send(peer.fd.get(), l.data(), l.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  peer.unsent.clear();
  if (!line.empty()) (void)::send(peer.fd.get(), line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

int JobChannel::add_poll_fds(std::vector<pollfd>& fds) const {
  if (listener_.valid()) fds.push_back({listener_.get(), POLLIN, 0});
  int wait_ms = -1;
  for (const auto& p : peers_) {
    if (p->fd.valid()) fds.push_back({p->fd.get(), static_cast<short>(p->connecting ? POLLOUT : POLLIN), 0});
    else if (!gave_up_) wait_ms = static_cast<int>(std::clamp<int64_t>(next_connect_ms_ - unix_ms_now(), 0, kRetryMs));
  }
  return wait_ms;
}

void JobChannel::drop(Peer& peer, const std::string& why, std::vector<JobEvent>& out) {
  peer.fd.reset();
  if (peer.node < 0) return;  // closed before its hello: another attempt may reach the launcher
  if (node_rank_ != 0) gave_up_ = true;  // node 0's launcher is gone or finished: no reconnecting
  if (peer.done) return;
  JobEvent lost{JobEvent::Kind::kLost, peer.node, unix_ms_now(), ""};
  lost.text = node_rank_ == 0 ? "node " + std::to_string(peer.node) + "'s launcher went away (" + why + ")"
                              : "node 0's launcher at " + master_addr_ + ":" + std::to_string(port_) +
                                    " went away (" + why + ")";
  out.push_back(lost);
  if (node_rank_ == 0) publish(lost);  // forwarded as node 0's news about that node
}

void JobChannel::accept_peers() {
  if (!listener_.valid()) return;
  for (int fd; (fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;) {
    auto p = std::make_unique<Peer>();
    p->fd = UniqueFd(fd);
    peers_.push_back(std::move(p));
  }
}

void JobChannel::advance_hub_connection() {
  if (node_rank_ == 0 || gave_up_ || peers_.empty()) return;
  Peer& hub = *peers_.front();
  if (!hub.fd.valid() && unix_ms_now() >= next_connect_ms_) {
    try_connect();
  } else if (hub.connecting) {
    pollfd pfd{hub.fd.get(), POLLOUT, 0};
    if (::poll(&pfd, 1, 0) <= 0) return;
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(hub.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      hub.fd.reset();  // refused (node 0 not up yet): retry later
    } else {
      hub.connecting = false;
      say_hello(hub);
    }
  }
}

std::optional<std::string> JobChannel::read_available(Peer& peer) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(peer.fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::nullopt;
    if (n <= 0) return n == 0 ? "its connection closed before it finished" : std::string(std::strerror(errno));
    peer.pending.append(buf, static_cast<size_t>(n));
  }
}

// Not a launcher of this job (a store client on the wrong port, a scanner, a
// proxy): forget the connection, which the other side sees closed at once
// instead of waiting for an answer.
void JobChannel::forget_stray(Peer& peer, const std::string& what) {
  if (node_rank_ != 0) {
    gave_up_ = true;
    notices_.push_back("something other than node 0's launcher answers at " + master_addr_ + ":" +
                       std::to_string(port_) + " (--launcher-port): '" + what.substr(0, 80) +
                       "'; failures on other nodes will not be reported here");
  }
  peer.fd.reset();
}

bool JobChannel::handle_line(Peer& peer, const std::string& line, std::vector<JobEvent>& out) {
  const auto e = decode(line);
  const bool valid = e && e->node < nnodes_ && e->node != node_rank_ &&
                     (node_rank_ == 0 || e->node == 0 || e->kind != JobEvent::Kind::kHello);
  if (!valid && peer.node < 0) return false;
  if (!valid) {
    notices_.push_back("ignoring a malformed message from another launcher: '" + line.substr(0, 80) + "'");
    return true;
  }
  if (e->kind == JobEvent::Kind::kHello) {
    for (const auto& other : peers_)
      if (other.get() != &peer && other->node == e->node && other->fd.valid())
        notices_.push_back("two launchers say they are node " + std::to_string(e->node) +
                           ": is --node-rank the same on two nodes?");
    peer.node = e->node;
    if (node_rank_ == 0) {  // answer, so that it knows a launcher listens here, then tell what it missed
      send_to(peer, encode({JobEvent::Kind::kHello, 0, unix_ms_now(), ""}));
      for (const auto& l : history_) send_to(peer, l);
    }
    return true;
  }
  if (peer.node < 0) return true;  // events before the hello: not from a launcher
  if (e->kind == JobEvent::Kind::kDone && e->node == peer.node) peer.done = true;
  out.push_back(*e);
  if (node_rank_ == 0) {
    const std::string fwd = encode(*e);
    history_.push_back(fwd);
    for (auto& other : peers_)
      if (other.get() != &peer && other->node >= 0 && other->fd.valid()) send_to(*other, fwd);
  }
  return true;
}

void JobChannel::serve_peer(Peer& peer, std::vector<JobEvent>& out) {
  std::optional<std::string> closed = read_available(peer);  // handled after its last lines
  const std::string hello = "hello";
  if (peer.node < 0 && peer.pending.compare(0, hello.size(), hello, 0, peer.pending.size()) != 0) {
    forget_stray(peer, peer.pending.substr(0, peer.pending.find('\n')));
    peer.pending.clear();
    return;
  }
  size_t start = 0;
  for (size_t nl; peer.fd.valid() && (nl = peer.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = peer.pending.substr(start, nl - start);
    if (!handle_line(peer, line, out)) {
      forget_stray(peer, line);
      closed.reset();
      break;
    }
  }
  peer.pending.erase(0, start);
  if (closed) drop(peer, *closed, out);
}

std::vector<JobEvent> JobChannel::service() {
  std::vector<JobEvent> out;
  if (nnodes_ <= 1) return out;
  accept_peers();
  advance_hub_connection();
  for (auto& peer : peers_)
    if (peer->fd.valid() && !peer->connecting) serve_peer(*peer, out);
  if (node_rank_ == 0)
    peers_.erase(std::remove_if(peers_.begin(), peers_.end(), [](const auto& p) { return !p->fd.valid(); }),
                 peers_.end());
  return out;
}

void JobChannel::publish(const JobEvent& event) {
  if (nnodes_ <= 1) return;
  const std::string line = encode(event);
  if (node_rank_ == 0) {
    history_.push_back(line);
    for (auto& p : peers_)
      if (p->node >= 0 && p->fd.valid()) send_to(*p, line);
  } else if (!peers_.empty()) {
    send_to(*peers_.front(), line);
  }
}

std::vector<std::string> JobChannel::take_notices() {
  std::vector<std::string> n;
  n.swap(notices_);
  return n;
}

}  // namespace trident::launch
