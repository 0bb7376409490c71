// The launcher's pure parts: option checks, the ranks' environment, port
// picking and wait-status wording (see launcher.h). No processes are started here.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/free_port.h"
#include "launch/launcher.h"

namespace trident::launch {

namespace {
// "60", "2.5": the shortest text that reads back as the same seconds.
std::string format_seconds(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}
}  // namespace

void check_launch_options(const LaunchOptions& o) {
  auto fail = [](const std::string& msg) { throw LaunchError(msg); };
  if (o.nproc_per_node < 1)
    fail("--nproc-per-node must be at least 1, got " + std::to_string(o.nproc_per_node));
  if (o.nnodes < 1) fail("--nnodes must be at least 1, got " + std::to_string(o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    fail("--node-rank " + std::to_string(o.node_rank) + " is out of range [0, " +
         std::to_string(o.nnodes) + ") for --nnodes " + std::to_string(o.nnodes));
  if (o.master_port < 0 || o.master_port > 65535)
    fail("--master-port " + std::to_string(o.master_port) +
         " is not a TCP port: expected 1..65535, or 0 to pick a free one");
  if (o.master_port == 0 && o.nnodes > 1)
    fail("--master-port 0 needs --nnodes 1: the other " + std::to_string(o.nnodes - 1) +
         " node(s) could not learn the picked port");
  if (o.launcher_port < 0 || o.launcher_port > 65535)
    fail("--launcher-port " + std::to_string(o.launcher_port) +
         " is not a TCP port: expected 1..65535, or 0 for --master-port + 1");
  if (o.nnodes > 1 && o.launcher_port == 0 && o.master_port == 65535)
    fail("--master-port 65535 leaves no port for the launchers (--master-port + 1): set --launcher-port");
  if (o.nnodes > 1 && o.launcher_port != 0 && o.launcher_port == o.master_port)
    fail("--launcher-port " + std::to_string(o.launcher_port) +
         " equals --master-port: the launchers' channel and the ranks' store need two ports");
  if (o.master_addr.empty()) fail("--master-addr is empty: expected a host name or IP address");
  if (o.command.empty() || o.command[0].empty())
    fail("missing command: expected `trident launch [options] -- CMD ARGS...`");
  if (!(o.grace_seconds >= 0)) fail("grace period must be >= 0 s, got " + std::to_string(o.grace_seconds));
  if (!(o.rdzv_timeout_seconds > 0) || o.rdzv_timeout_seconds > 1e6)
    fail("--rdzv-timeout must be a positive number of seconds, got " + std::to_string(o.rdzv_timeout_seconds));
  if (o.max_restarts < 0) fail("--max-restarts must be >= 0, got " + std::to_string(o.max_restarts));
  if (o.max_restarts > 0 && o.nnodes > 1 && o.launcher_port != 0) {
    // Attempt k meets on --master-port + 2k and --launcher-port + 2k (NOTE [restarts across nodes]):
    // the two ranges must not meet.
    const int span = 2 * o.max_restarts;
    if (std::abs(o.launcher_port - o.master_port) % 2 == 0 && std::abs(o.launcher_port - o.master_port) <= span)
      fail("--launcher-port " + std::to_string(o.launcher_port) + " with --master-port " +
           std::to_string(o.master_port) + " and --max-restarts " + std::to_string(o.max_restarts) +
           ": attempt k uses both ports + 2k, so one attempt's rendezvous port would be another's launcher port; "
           "choose ports an odd distance apart");
  }
  if (o.max_restarts > 0 && o.nnodes > 1 && std::max(o.master_port, launcher_port(o, o.master_port)) +
                                                    2 * o.max_restarts > 65535)
    fail("--master-port " + std::to_string(o.master_port) + " with --max-restarts " + std::to_string(o.max_restarts) +
         ": attempt k uses the ports + 2k, past 65535");
  if (o.min_nodes != 0) {
    const std::string m = "--min-nodes " + std::to_string(o.min_nodes);
    if (o.nnodes < 2) fail(m + " needs --nnodes > 1: a single node cannot shrink");
    if (o.max_restarts < 1) fail(m + " needs --max-restarts > 0: it says on how many nodes a restart may go on");
    if (o.min_nodes < 1 || o.min_nodes >= o.nnodes)
      fail(m + " with --nnodes " + std::to_string(o.nnodes) + ": expected 1.." + std::to_string(o.nnodes - 1) +
           " (--min-nodes " + std::to_string(o.nnodes) + " would allow no shrinking)");
    if (!o.ranks.empty()) fail(m + " with --ranks: a shrunken job renumbers its ranks, which --ranks fixes");
  }
  if (!o.ranks.empty()) {
    const int world = o.nnodes * o.nproc_per_node;
    if (static_cast<int>(o.ranks.size()) != o.nproc_per_node)
      fail("--ranks lists " + std::to_string(o.ranks.size()) + " rank(s) but --nproc-per-node is " +
           std::to_string(o.nproc_per_node) + ": expected one global rank per local process");
    std::vector<bool> seen(static_cast<size_t>(world), false);
    for (int r : o.ranks) {
      if (r < 0 || r >= world)
        fail("--ranks entry " + std::to_string(r) + " is out of range [0, " + std::to_string(world) +
             ") for --nnodes " + std::to_string(o.nnodes) + " x --nproc-per-node " + std::to_string(o.nproc_per_node));
      if (seen[static_cast<size_t>(r)]) fail("--ranks lists rank " + std::to_string(r) + " twice");
      seen[static_cast<size_t>(r)] = true;
    }
  }
}

std::vector<int> parse_rank_list(const std::string& text) {
  std::vector<int> ranks;
  size_t i = 0;
  while (i <= text.size()) {
    const size_t comma = std::min(text.find(',', i), text.size());
    const std::string item = text.substr(i, comma - i);
    size_t used = 0;
    int value = -1;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || value < 0)
      throw LaunchError("--ranks '" + text + "': '" + item +
                        "' is not a non-negative integer (expected a comma-separated list, e.g. 0,1,6,7)");
    ranks.push_back(value);
    i = comma + 1;
  }
  return ranks;
}

int global_rank(const LaunchOptions& o, int local_rank) {
  assert(local_rank >= 0 && local_rank < o.nproc_per_node);
  return o.ranks.empty() ? o.node_rank * o.nproc_per_node + local_rank : o.ranks[static_cast<size_t>(local_rank)];
}

int launcher_port(const LaunchOptions& o, int master_port) {
  return o.launcher_port != 0 ? o.launcher_port + 2 * o.restart : master_port + 1;
}

int attempt_master_port(const LaunchOptions& o) {
  return o.nnodes > 1 ? o.master_port + 2 * o.restart : o.master_port;
}

int pick_free_port() {
  try {
    return trident::pick_free_port();
  } catch (const std::runtime_error& e) {
    throw LaunchError(e.what());
  }
}

Environment rank_environment(const LaunchOptions& o, int local_rank, int master_port) {
  const int rank = global_rank(o, local_rank);
  Environment env = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc_per_node)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"NODE_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(master_port)},
      {"TRIDENT_RDZV_TIMEOUT_S", format_seconds(o.rdzv_timeout_seconds)},
  };
  // Ranks share the cores; one OpenMP thread each unless the user chose otherwise.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) env.emplace_back("OMP_NUM_THREADS", "1");
  if (o.max_restarts > 0) env.emplace_back("TRIDENT_RESTART_COUNT", std::to_string(o.restart));
  if (!o.progress_dir.empty()) env.emplace_back("TRIDENT_PROGRESS_DIR", o.progress_dir);
  return env;
}

std::string signal_name(int sig) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},   {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},
      {SIGCONT, "SIGCONT"},
  };
  for (const auto& [number, name] : kNames)
    if (number == sig) return name;
  return "signal " + std::to_string(sig);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    std::string s = "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
#ifdef WCOREDUMP
    if (WCOREDUMP(status)) s += ", core dumped";
#endif
    return s;
  }
  return "stopped with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace trident::launch
