// The rendezvous: environment parsing, the address to listen on, the store
// connection and the join check (see rendezvous.h and NOTE [rendezvous]).
#include "parallel/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/errors.h"
#include "core/free_port.h"

namespace trident {
namespace {

const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int parse_int_env(const char* name, const char* value) {
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < 0 || v > (1L << 30))
    throw ConfigError(std::string("environment variable ") + name + "='" + value +
                             "' is not a non-negative integer");
  return static_cast<int>(v);
}

// Reads (rank, size, local) from one family of variables; false if absent.
bool read_family(const char* rank_var, const char* size_var, const char* local_var, WorldEnv& env) {
  const char* r = env_or_null(rank_var);
  const char* s = env_or_null(size_var);
  if (!r && !s) return false;
  if (!r || !s)
    throw ConfigError(std::string("environment sets ") + (r ? rank_var : size_var) +
                             " but not " + (r ? size_var : rank_var));
  env.rank = parse_int_env(rank_var, r);
  env.world_size = parse_int_env(size_var, s);
  const char* l = env_or_null(local_var);
  env.local_rank = l ? parse_int_env(local_var, l) : env.rank;
  return true;
}

// torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
// together. A rank started by hand with only some of them would fail much
// later (a rendezvous that never completes), so the missing ones are named now.
// A world of one needs no peers: RANK and WORLD_SIZE are enough.
void check_torchrun_variables() {
  const char* size = env_or_null("WORLD_SIZE");
  if (!size && !env_or_null("RANK")) return;
  const bool alone = size && std::string(size) == "1";
  std::string set, missing;
  for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    const char* v = env_or_null(name);
    if (v)
      set += (set.empty() ? "" : " ") + std::string(name) + "=" + v;
    else if (!alone || std::string(name) == "RANK" || std::string(name) == "WORLD_SIZE")
      missing += (missing.empty() ? "" : ", ") + std::string(name);
  }
  if (!missing.empty())
    throw ConfigError("the environment sets " + set + " but not " + missing +
                             ": a rank started without a launcher needs all of RANK, LOCAL_RANK, WORLD_SIZE, "
                             "MASTER_ADDR and MASTER_PORT (as torchrun sets them), or start the ranks with "
                             "`trident launch`");
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

using Clock = std::chrono::steady_clock;

std::string store_address(const WorldEnv& env) { return env.master_addr + ":" + std::to_string(env.master_port); }

// An exception's message, without the backtrace c10 errors append.
std::string message_of(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

std::string seconds_text(std::chrono::milliseconds t) {
  std::ostringstream os;
  os << static_cast<double>(t.count()) / 1000.0 << " s";
  return os.str();
}

// "4-7" / "1, 3, 5-6": a rank list made short enough for one line.
std::string rank_ranges(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += std::to_string(ranks[i]);
    if (j > i) s += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

std::string store_text(c10d::Store& store, const std::string& key) {
  const std::vector<uint8_t> v = store.get(key);
  return std::string(v.begin(), v.end());
}

// A TCP socket connected to host:port, its sends, receives and the connect itself bounded
// by `limit`; -1 when the name does not resolve or nothing accepts the connection.
int connect_tcp(const std::string& host, int port, timeval limit) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) return -1;
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(found, ::freeaddrinfo);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);  // also bounds a blocking connect()
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether host:port accepts a TCP connection within a second (closed at once).
bool accepts_tcp(const std::string& host, int port) {
  const int fd = connect_tcp(host, port, timeval{1, 0});
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// Whether what listens at host:port drops a client that sends one byte that begins no
// message of the store's protocol (a four-byte validation word) and no launcher's "hello":
// node 0's launcher channel closes such a connection at once; a store waits for the rest
// (and sees the client go). False when nothing listens or the connection stays open.
bool closes_on_probe(const std::string& host, int port) {
  const int fd = connect_tcp(host, port, timeval{0, 300 * 1000});  // bounds the wait for the peer's close
  if (fd < 0) return false;
  bool closed = false;
  const char probe = '\x7f';
  char byte = 0;
  if (::send(fd, &probe, 1, MSG_NOSIGNAL) == 1) {
    const ssize_t n = ::recv(fd, &byte, 1, 0);
    closed = n == 0 || (n < 0 && errno == ECONNRESET);
  }
  ::close(fd);
  return closed;
}

// Whether another socket holds `port` on this node: binding it, as the store's
// server does (any address), fails with EADDRINUSE.
bool port_in_use(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // as the store does: TIME_WAIT is no use
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool in_use = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return in_use;
}

// Whether a store took TRIDENT_STORE_FD's socket (it may be handed over once).
std::atomic<bool> store_fd_taken{false};

c10::intrusive_ptr<c10d::Store> connect_store(const WorldEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(env.master_port);
  opts.isServer = env.rank == 0 && !env.agent_store;
  opts.numWorkers = env.world_size;
  opts.waitWorkers = false;  // join_rendezvous checks who arrived, not just how many
  opts.timeout = timeout;
  // NOTE [held store port]: the socket goes to the first store only (it closes it when it ends).
  if (opts.isServer && env.store_fd >= 0 && !store_fd_taken.exchange(true)) opts.masterListenFd = env.store_fd;
  if (!opts.isServer && closes_on_probe(env.master_addr, env.master_port))
    throw std::runtime_error(describe_place(env) + " reached " + store_address(env) +
                             ", but what listens there is not the rendezvous store (it closed the connection at a "
                             "one-byte probe); is --master-port the same on every node? (Node 0's launcher listens on "
                             "--launcher-port, by default --master-port + 1.)");
  std::string why;
  const Clock::time_point start = Clock::now();
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (const std::exception& e) {
    why = message_of(e);
  }
  // A port in use and a WORLD_SIZE other than rank 0's are the launch's settings, not the run's
  // failure: ConfigError, exit 2 (NOTE [exit statuses] in launch/options.h).
  if (opts.isServer && port_in_use(env.master_port))
    throw ConfigError(describe_place(env) + " cannot host the rendezvous store: port " +
                             std::to_string(env.master_port) + " is already in use on this node (MASTER_PORT=" +
                             std::to_string(env.master_port) + ", which `trident launch --master-port` sets; pick "
                             "another port, or --master-port 0 for a free one on a single node)");
  if (opts.isServer)
    throw std::runtime_error(describe_place(env) + " could not host the rendezvous store at " + store_address(env) +
                             " (it gave up after " +
                             seconds_text(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start)) +
                             "; is MASTER_ADDR this node's address?): " + why);
  // libtorch 2.x's client completes a handshake inside the constructor and
  // retries it until the timeout, so a port where something else listens (node
  // 0's launcher channel, say) ends here too: it still accepts a plain TCP
  // connection, which a port with nothing behind it does not.
  if (accepts_tcp(env.master_addr, env.master_port))
    throw std::runtime_error(describe_place(env) + " reached " + store_address(env) +
                             ", but what listens there is not the rendezvous store (it accepts connections but did "
                             "not answer the store's handshake within " + seconds_text(timeout) +
                             "; is --master-port node 0's store port?): " + why);
  throw std::runtime_error(describe_place(env) + " could not reach the rendezvous store at " + store_address(env) +
                           " within " + seconds_text(timeout) +
                           " (is node 0 up, and are --master-addr and --master-port node 0's?): " + why);
}

// A fresh random name (16 hex digits) for this meeting or this rank's arrival.
std::string random_token() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

// The rendezvous as one rank sees it: its store, its place and the deadline.
// Keys: "trident/rdzv/hello/<rank>" (overwritten by every attempt),
// "trident/rdzv/ack/<rank>/<token>" (unique to one arrival) and, under the
// meeting's fresh name, "trident/rdzv/<epoch>/{joined/<rank>,abort,verdict}":
// nothing an earlier attempt left can be mistaken for this one's (NOTE [restart attempts]).
struct Rendezvous {
  c10d::Store& store;
  const WorldEnv& env;
  std::chrono::milliseconds timeout;
  Clock::time_point deadline;
  std::string epoch;  // rank 0 draws it; the others learn it from their acknowledgement

  std::string key(const std::string& what) const { return "trident/rdzv/" + epoch + "/" + what; }
  std::chrono::milliseconds left() const {
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                    std::chrono::milliseconds(1));
  }
  void post(const std::string& key, const std::string& text) const {
    store.set(key, std::vector<uint8_t>(text.begin(), text.end()));
  }
};

// A mismatched WORLD_SIZE, worded the same whichever side sees it first.
std::string world_mismatch(const std::string& who, int world, const WorldEnv& env, int world0) {
  return who + " has WORLD_SIZE " + std::to_string(world) + " but rank 0 at " + store_address(env) + " has " +
         std::to_string(world0) + ": --nnodes or --nproc-per-node differ between the nodes";
}

// Ranks other than 0: announce this arrival under a fresh token and wait for
// rank 0's acknowledgement of exactly it, which names the meeting and carries
// rank 0's WORLD_SIZE, so a node launched with another --nnodes finds out at
// once and tells rank 0 through the meeting's abort key.
void join_as_peer(Rendezvous& rv, const std::string& address) {
  const WorldEnv& env = rv.env;
  const std::string token = random_token();
  const std::string ack = "trident/rdzv/ack/" + std::to_string(env.rank) + "/" + token;
  try {
    rv.post("trident/rdzv/hello/" + std::to_string(env.rank), std::to_string(env.world_size) + " " +
                                                                  std::to_string(env.node_rank) + " " + address +
                                                                  " " + token);
    rv.store.wait({ack}, rv.left());
  } catch (const std::exception& e) {
    // A store keeps its clients' connections; a failure well before the
    // deadline means something else listens on that port.
    if (rv.deadline - Clock::now() > std::chrono::milliseconds(500))
      throw std::runtime_error(
          describe_place(env) + " reached " + store_address(env) +
          ", but what listens there is not the rendezvous store (it dropped the connection: " + message_of(e) +
          "); is --master-port the same on every node? (Node 0's launcher listens on --launcher-port, by "
          "default --master-port + 1.)");
    throw std::runtime_error(describe_place(env) + " reached the rendezvous store at " + store_address(env) +
                             " but rank 0 did not register within " + seconds_text(rv.timeout));
  }
  std::istringstream in(store_text(rv.store, ack));
  int world0 = 0;
  in >> rv.epoch >> world0;
  if (world0 != env.world_size) {
    const std::string error = world_mismatch(describe_place(env), env.world_size, env, world0);
    rv.post(rv.key("abort"), error);
    // Rank 0 names the mismatch too, once it has read the abort: wait (briefly) for its
    // verdict, so this rank's exit, which the launchers turn into stopping every rank at
    // once, does not cut rank 0 off before it says so.
    try {
      rv.store.wait({rv.key("verdict")}, std::min(rv.left(), std::chrono::milliseconds(2000)));
    } catch (const std::exception&) {
      // rank 0 gone or slow: this rank's own message says it all
    }
    throw ConfigError(error);
  }
  rv.post(rv.key("joined/" + std::to_string(env.rank)), "1");
}

// Rank 0: who has arrived, from where (node, address) -> ranks. The node is -1 where the
// launcher named none (no NODE_RANK, GROUP_RANK or SLURM_NODEID: Open MPI, variables set by hand).
struct Arrivals {
  std::vector<int> missing;
  std::map<std::pair<int, std::string>, std::vector<int>> places;
  std::map<int, std::string> acked;  // rank -> the arrival token last acknowledged
  std::string error;
  bool mismatch = false;  // the error is a peer's WORLD_SIZE other than rank 0's (its abort): bad input
};

// Who did arrive, for the "never joined" verdict: the nodes, and by rank those of no named node.
std::string who_joined(const Arrivals& a) {
  std::vector<int> nodes, unplaced;
  for (const auto& [place, ranks] : a.places) {
    if (place.first < 0)
      unplaced.insert(unplaced.end(), ranks.begin(), ranks.end());
    else if (std::find(nodes.begin(), nodes.end(), place.first) == nodes.end())
      nodes.push_back(place.first);
  }
  std::sort(nodes.begin(), nodes.end());
  std::sort(unplaced.begin(), unplaced.end());
  std::string s;
  for (int n : nodes) s += (s.empty() ? "node(s) " : ", ") + std::to_string(n);
  if (!unplaced.empty())
    s += (s.empty() ? "rank(s) " : " and, of no named node, rank(s) ") + rank_ranges(unplaced);
  return s + " did";
}

// Acknowledges every arrival not yet acknowledged (a stale one from an earlier
// attempt too: nobody waits for that), and moves the ranks that joined this
// meeting from `missing` to `places`.
void read_arrivals(const Rendezvous& rv, Arrivals& a) {
  std::vector<int> still;
  for (int r : a.missing) {
    const std::string hello = "trident/rdzv/hello/" + std::to_string(r);
    if (!rv.store.check({hello})) {
      still.push_back(r);
      continue;
    }
    std::istringstream in(store_text(rv.store, hello));
    int world = 0, node = -1;
    std::string addr, token;
    in >> world >> node >> addr >> token;
    if (a.acked[r] != token) {
      rv.post("trident/rdzv/ack/" + std::to_string(r) + "/" + token,
              rv.epoch + " " + std::to_string(rv.env.world_size));
      a.acked[r] = token;
    }
    if (!rv.store.check({rv.key("joined/" + std::to_string(r))})) {
      still.push_back(r);
      continue;
    }
    a.places[{node, addr}].push_back(r);
  }
  a.missing = std::move(still);
}

// Rank 0 waits for ranks 1..world-1 until the deadline, then posts its verdict.
Arrivals gather_arrivals(const Rendezvous& rv, const std::string& address) {
  const WorldEnv& env = rv.env;
  Arrivals a;
  for (int r = 1; r < env.world_size; ++r) a.missing.push_back(r);
  a.places = {{{env.node_rank, address}, {0}}};
  while (a.error.empty()) {
    if (rv.store.check({rv.key("abort")})) {
      a.error = store_text(rv.store, rv.key("abort"));
      a.mismatch = true;
      break;
    }
    read_arrivals(rv, a);
    if (a.missing.empty()) break;
    if (Clock::now() >= rv.deadline) {
      a.error = "rank(s) " + rank_ranges(a.missing) + " of " + std::to_string(env.world_size) +
                " never joined the rendezvous at " + store_address(env) + " within " + seconds_text(rv.timeout) +
                " (" + who_joined(a) + "; is every node started, with this --master-addr and --master-port?)";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // "mismatch ": the peers that agree with rank 0 exit as bad input too (await_verdict).
  rv.post(rv.key("verdict"), a.error.empty() ? "ok " + std::to_string(env.world_size)
                                             : (a.mismatch ? "mismatch " : "error ") + a.error);
  return a;
}

// Ranks other than 0: rank 0's verdict on the whole rendezvous.
void await_verdict(const Rendezvous& rv) {
  const WorldEnv& env = rv.env;
  try {
    rv.store.wait({rv.key("verdict")}, rv.left());
  } catch (const std::exception&) {
    throw std::runtime_error(describe_place(env) + " reached the rendezvous store at " + store_address(env) +
                             " but rank 0 did not confirm every rank's arrival within " + seconds_text(rv.timeout) +
                             " (a node is missing, or node 0 died)");
  }
  const std::string verdict = store_text(rv.store, rv.key("verdict"));
  if (verdict.rfind("mismatch ", 0) == 0)
    throw ConfigError("rendezvous at " + store_address(env) + " failed, as rank 0 found: " + verdict.substr(9));
  if (verdict.rfind("error ", 0) == 0)
    throw std::runtime_error("rendezvous at " + store_address(env) + " failed, as rank 0 found: " + verdict.substr(6));
  assert(verdict == "ok " + std::to_string(env.world_size));
}

// NOTE [rendezvous]
// A TCPStore server counts connections, not who made them: a late node, a
// wrong port and a node launched with another --nnodes all look like "not
// enough workers yet" or, worse, like enough. So every rank other than 0 posts
// "<WORLD_SIZE> <node> <address> <token>" (a fresh random token) and waits for
// rank 0's acknowledgement of that token, which names the meeting (rank 0's
// fresh random epoch) and carries rank 0's WORLD_SIZE: a rank with another
// WORLD_SIZE fails at once and posts the meeting's abort so rank 0 fails too;
// the others say they joined the meeting. Rank 0 waits for all of them, names
// the missing ones when the rendezvous timeout passes, and posts a verdict that
// the others wait for (bounded by the same deadline). Every rank thus ends
// inside the timeout with a message naming nodes, address and port. Returns
// the meeting's epoch.
std::string join_rendezvous(c10d::Store& store, const WorldEnv& env, const std::string& address,
                            std::chrono::milliseconds timeout) {
  Rendezvous rv{store, env, timeout, Clock::now() + timeout, ""};
  if (env.rank != 0) {
    join_as_peer(rv, address);
    await_verdict(rv);
    return rv.epoch;
  }
  rv.epoch = random_token();
  Arrivals a = gather_arrivals(rv, address);
  if (!a.error.empty() && a.mismatch) throw ConfigError(a.error);
  if (!a.error.empty()) throw std::runtime_error(a.error);
  // One line that shows where every rank listens: on a cluster, the first
  // thing to check when a run across nodes misbehaves.
  std::string where;
  for (auto& [place, ranks] : a.places) {
    std::sort(ranks.begin(), ranks.end());
    where += (where.empty() ? "" : "; ") + (place.first >= 0 ? "node " + std::to_string(place.first) + " at " : "") +
             place.second + ": rank(s) " + rank_ranges(ranks);
  }
  std::cout << "rendezvous at " << store_address(env) << ": " << env.world_size << " ranks joined (" << where << ")"
            << std::endl;
  return rv.epoch;
}

// TRIDENT_STORE_FD: the launcher's socket listening on MASTER_PORT, for rank 0's rendezvous store.
void read_store_fd(WorldEnv& env) {
  if (const char* f = store_fd_taken ? nullptr : env_or_null("TRIDENT_STORE_FD")) {
    // NOTE [held store port]: only the store's host may take it, and only a socket listening on MASTER_PORT.
    const int fd = parse_int_env("TRIDENT_STORE_FD", f);
    if (env.rank != 0 || env.agent_store)
      throw ConfigError(std::string("TRIDENT_STORE_FD=") + f + " is set for rank " + std::to_string(env.rank) +
                        (env.agent_store ? " while the launcher's agent hosts the store" : "") +
                        "; only rank 0, which hosts the rendezvous store, may take the launcher's listening socket");
    int port = 0;
    try {
      port = listening_port(fd);
    } catch (const std::exception& e) {
      throw ConfigError(std::string("TRIDENT_STORE_FD=") + f + " cannot host the rendezvous store: " + e.what());
    }
    if (port != env.master_port)
      throw ConfigError(std::string("TRIDENT_STORE_FD=") + f + " listens on port " + std::to_string(port) +
                        ", not on MASTER_PORT=" + std::to_string(env.master_port));
    env.store_fd = fd;
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // programs this rank starts do not hold the store's port
  }
}

}  // namespace

WorldEnv read_world_env() {
  WorldEnv env;
  check_torchrun_variables();
  if (read_family("RANK", "WORLD_SIZE", "LOCAL_RANK", env))
    env.source = "torchrun";
  else if (read_family("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", env))
    env.source = "ompi";
  else if (read_family("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", env))
    env.source = "slurm";
  if (env.world_size < 1) throw ConfigError("WORLD_SIZE must be >= 1, got " + std::to_string(env.world_size));
  if (env.rank >= env.world_size)
    throw ConfigError("RANK " + std::to_string(env.rank) + " is not below WORLD_SIZE " +
                             std::to_string(env.world_size));
  const char* node = env.source == "torchrun" ? (env_or_null("NODE_RANK") ? env_or_null("NODE_RANK")
                                                                            : env_or_null("GROUP_RANK"))
                    : env.source == "slurm"  ? env_or_null("SLURM_NODEID")
                                             : nullptr;
  if (node) env.node_rank = parse_int_env(env.source == "slurm" ? "SLURM_NODEID" : "NODE_RANK", node);
  if (const char* a = env_or_null("MASTER_ADDR")) {
    env.master_addr = a;
  } else if (env.source == "slurm" && env.world_size > 1) {
    // srun starts the ranks itself and knows no rendezvous host; guessing
    // 127.0.0.1 would make every node rendezvous with itself and time out.
    const char* nnodes = env_or_null("SLURM_NNODES");
    if (!nnodes || std::string(nnodes) != "1")
      throw ConfigError("SLURM_NTASKS is " + std::to_string(env.world_size) +
                               " but MASTER_ADDR is not set: export MASTER_ADDR=$(scontrol show hostnames "
                               "\"$SLURM_JOB_NODELIST\" | head -n1) before srun");
  }
  if (const char* p = env_or_null("MASTER_PORT")) {
    env.master_port = parse_int_env("MASTER_PORT", p);
    if (env.master_port < 1 || env.master_port > 65535)
      throw ConfigError(std::string("MASTER_PORT=") + p + " is not a port in 1..65535");
  } else if (env.world_size > 1 && env.source != "slurm") {
    // Under srun every task sees the same (absent) variable, so torchrun's
    // default port 29500 is agreed on by all; elsewhere the launcher sets it.
    throw ConfigError("WORLD_SIZE is " + std::to_string(env.world_size) +
                             " but MASTER_PORT is not set (use `trident launch`)");
  }
  // torchrun names the attempt; `trident launch --max-restarts` does the same under its own name.
  if (const char* n = env_or_null("TORCHELASTIC_RESTART_COUNT"))
    env.restart = parse_int_env("TORCHELASTIC_RESTART_COUNT", n);
  else if (const char* t = env_or_null("TRIDENT_RESTART_COUNT"))
    env.restart = parse_int_env("TRIDENT_RESTART_COUNT", t);
  else if (const char* s = env.source == "slurm" ? env_or_null("SLURM_RESTART_COUNT") : nullptr)
    env.restart = parse_int_env("SLURM_RESTART_COUNT", s);  // a requeued batch job's run (sbatch --requeue)
  if (const char* a = env_or_null("TORCHELASTIC_USE_AGENT_STORE")) {
    const std::string v = a;
    if (v == "True" || v == "true" || v == "1")
      env.agent_store = true;
    else if (v != "False" && v != "false" && v != "0")
      throw ConfigError("TORCHELASTIC_USE_AGENT_STORE='" + v + "' is not True or False");
  }
  read_store_fd(env);
  if (const char* t = env_or_null("TRIDENT_RDZV_TIMEOUT_S")) {
    char* end = nullptr;
    const double seconds = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(seconds > 0) || seconds > 1e6)
      throw ConfigError(std::string("TRIDENT_RDZV_TIMEOUT_S='") + t +
                               "' is not a positive number of seconds");
    env.rdzv_timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  return env;
}

std::string describe_place(const WorldEnv& env) {
  std::string s = "rank " + std::to_string(env.rank);
  if (env.node_rank >= 0) s += " on node " + std::to_string(env.node_rank);
  return s;
}

std::string local_address_toward(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;  // Gloo's device below is IPv4, like the launcher's addresses
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || !found)
    throw std::runtime_error("MASTER_ADDR '" + host + "' does not resolve to an IPv4 address: " + gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(found, ::freeaddrinfo);
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("cannot create a socket: ") + std::strerror(errno));
  sockaddr_in local{};
  socklen_t len = sizeof local;
  // connect() on UDP only chooses the route and source address; nothing is sent.
  const bool ok = ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok)
    throw std::runtime_error("no route from this host to MASTER_ADDR " + host + ":" + std::to_string(port) + ": " +
                             std::strerror(err));
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  if (!is_loopback(text)) return text;
  // MASTER_ADDR names this host but resolves to loopback (Debian's /etc/hosts
  // maps the host name to 127.0.1.1): listening there would hide this node's
  // ranks from every other node, so take the first non-loopback IPv4 address.
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return text;
  std::string chosen = text;
  for (ifaddrs* i = all; i; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK)) {
      char found_text[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, found_text, sizeof found_text);
      chosen = found_text;
      break;
    }
  ::freeifaddrs(all);
  return chosen;
}

std::string listen_address(const WorldEnv& env) {
  return is_loopback(env.master_addr) ? "127.0.0.1" : local_address_toward(env.master_addr, env.master_port);
}

c10::intrusive_ptr<c10d::Store> rendezvous(const WorldEnv& env, const std::string& address,
                                           std::chrono::milliseconds timeout) {
  // One line per node: when a job hangs at start, the first thing to know is
  // which nodes got this far and where they are looking for rank 0.
  if (env.local_rank == 0)
    std::cout << describe_place(env) << " joins the rendezvous at " << store_address(env) << " (listening on "
              << address << ", timeout " << seconds_text(timeout)
              << (env.restart > 0 ? ", restart " + std::to_string(env.restart) : std::string())
              << (env.agent_store ? ", the launcher's store" : "") << ")" << std::endl;
  // NOTE [restart attempts]
  // torchrun's agent hosts the store and keeps it across restarts, so the keys an
  // earlier attempt left (its rendezvous entries and verdict, every group's Gloo
  // addresses) are still there when the restarted ranks arrive: read as they are,
  // they send the new ranks to the dead ranks' ports. The restart count cannot name
  // the attempt: under c10d's rendezvous an agent restarts healthy workers on a
  // membership change without counting it, so nodes disagree on it. So rank 0
  // names each meeting with a fresh random epoch (NOTE [rendezvous]), and every key
  // after the rendezvous (the groups') lives under "run-<epoch>/".
  auto base = connect_store(env, timeout);
  const std::string epoch = join_rendezvous(*base, env, address, timeout);
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::PrefixStore>("run-" + epoch + "/", base);
  return store;
}

}  // namespace trident
