// The launchers of a multi-node job tell each other what happened to their
// ranks, so that every node's launcher stops its ranks as soon as any node
// fails and names the job's first failure, not only its own node's.
// See NOTE [job channel] in job_channel.cpp. Pure POSIX sockets, no libtorch.
#pragma once

#include <poll.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch/unique_fd.h"

namespace trident::launch {

// One line on the channel: "<kind> <node> <unix ms> <text>\n".
struct JobEvent {
  enum class Kind {
    kHello,    // a launcher joined (text: empty)
    kFailed,   // the first failed rank on `node` (text: "rank 2 on node 1 (pid 7) was killed by ...")
    kStopped,  // a rank on `node` was stopped by a signal (text says which)
    kExited0,  // a rank on `node` exited with status 0 (normal at the end; a cause if others then fail)
    kLost,     // `node`'s launcher went away without finishing (text says how it was noticed)
    kDone,     // `node`'s launcher is about to exit (text: its exit status)
    kProgress, // after a failure: a rank's last progress record (text: sched::format_record)
  };
  Kind kind = Kind::kHello;
  int node = 0;
  int64_t unix_ms = 0;  // the reporting launcher's wall clock when it happened
  std::string text;     // one line: newlines are replaced by spaces when encoding
};

std::string encode(const JobEvent& event);
// nullopt for anything that is not an encoded event (a stray connection).
std::optional<JobEvent> decode(const std::string& line);
int64_t unix_ms_now();

// The job's story as one launcher knows it: the earliest failure (by the
// reporters' clocks), ranks stopped by a signal, which nodes have reported.
class JobVerdict {
 public:
  explicit JobVerdict(int nnodes) : reported_(static_cast<size_t>(nnodes), false) {}
  void add(const JobEvent& event);
  bool failed() const { return first_.has_value(); }
  const std::optional<JobEvent>& first() const { return first_; }
  // Ranks (of any node) stopped by a signal or exited with status 0 before
  // the first failure.
  std::vector<JobEvent> notes_before_first() const;
  // Nodes other than `self` whose launcher has not yet said it is exiting
  // (nor gone away).
  std::vector<int> silent_nodes(int self) const;
  // "rank 2 on node 1 (pid 7) was killed by signal 9 (SIGKILL)", then up to
  // three stops or exits with status 0 on other nodes before it ("; rank 2 on
  // node 1 (pid 7) was stopped by signal 19 (SIGSTOP) 3.0 s earlier"), the
  // likely causes. Empty when nothing failed.
  std::string describe() const;

 private:
  std::optional<JobEvent> first_;
  std::vector<JobEvent> notes_;  // kStopped and kExited0
  std::vector<bool> reported_;
};

// Node 0's launcher listens on `port`; every other launcher connects to
// `master_addr:port`, retrying until `connect_timeout_s` has passed (node 0 may
// start later). A single-node job has no channel: every call does nothing.
class JobChannel {
 public:
  JobChannel(int node_rank, int nnodes, const std::string& master_addr, int port, double connect_timeout_s);
  ~JobChannel();
  JobChannel(const JobChannel&) = delete;
  JobChannel& operator=(const JobChannel&) = delete;

  // Appends the descriptors to watch; returns the longest the caller may
  // sleep before service() must run again (a pending connection retry), or -1.
  int add_poll_fds(std::vector<pollfd>& fds) const;
  // Accepts, connects, reads whatever is ready. Returns the events of other
  // nodes (node 0 forwards each to the other launchers), including kLost for
  // a launcher whose connection closed before its kDone.
  std::vector<JobEvent> service();
  // Sends this node's event to the other launchers (through node 0).
  void publish(const JobEvent& event);
  // Lines for the launcher to print (a connection that could not be made,
  // a malformed peer); cleared by the call.
  std::vector<std::string> take_notices();

 private:
  struct Peer;
  void try_connect();
  void drop(Peer& peer, const std::string& why, std::vector<JobEvent>& out);
  void say_hello(Peer& hub);
  void send_to(Peer& peer, const std::string& line);  // queued while not connected
  // The parts of service(), in its order.
  void accept_peers();
  void advance_hub_connection();  // other nodes: connect to node 0's launcher, or finish connecting
  void serve_peer(Peer& peer, std::vector<JobEvent>& out);
  // Reads whatever `peer` has sent into its pending text; returns why its connection ended, if it did.
  std::optional<std::string> read_available(Peer& peer);
  // Forgets a connection that is not a launcher of this job.
  void forget_stray(Peer& peer, const std::string& what);
  // One line from `peer`: false when it shows the connection is not a launcher's.
  bool handle_line(Peer& peer, const std::string& line, std::vector<JobEvent>& out);

  int node_rank_, nnodes_;
  std::string master_addr_;
  int port_;
  int64_t connect_deadline_ms_ = 0, next_connect_ms_ = 0;
  UniqueFd listener_;                      // node 0 only
  std::vector<std::unique_ptr<Peer>> peers_;  // node 0: one per launcher; others: node 0's
  std::vector<std::string> history_;      // node 0: every line sent, replayed to late launchers
  std::vector<std::string> notices_;
  bool gave_up_ = false;                  // other nodes: no (more) connection attempts
};

}  // namespace trident::launch
