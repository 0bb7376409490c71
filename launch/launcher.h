// The `trident launch` engine: starts one process per local rank with the
// torchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR, ...), prefixes
// their output with the rank, forwards SIGINT/SIGTERM, and stops every rank
// when one fails. Pure POSIX (Linux extras behind #ifdef), no libtorch.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trident::launch {

// Thrown for caller errors (bad options, a command that cannot be started).
class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LaunchOptions {
  int nproc_per_node = 1;                 // ranks started on this node
  int nnodes = 1;                         // nodes in the whole job
  int node_rank = 0;                      // this node's index in [0, nnodes)
  std::string master_addr = "127.0.0.1";  // rendezvous host every rank connects to
  int master_port = 29500;                // rendezvous port; 0 = pick a free one here
  bool prefix_output = true;              // "[rank R] " before each output line
  double grace_seconds = 3.0;             // SIGTERM -> SIGKILL delay when stopping ranks
  double rdzv_timeout_seconds = 60.0;     // bound on the ranks' rendezvous (TRIDENT_RDZV_TIMEOUT_S)
  int launcher_port = 0;                  // multi-node: node 0's launcher listens here; 0 = master port + 1
  // Global ranks this node runs, one per local rank; empty means the block
  // node_rank * nproc_per_node + [0, nproc_per_node). Lets a test (or a
  // cluster with an odd topology) place ranks so that chosen groups span nodes.
  std::vector<int> ranks;
  std::vector<std::string> command;       // program and arguments every rank runs
  // Where ranks write their progress records (TRIDENT_PROGRESS_DIR, see
  // launch/diagnose.h); launch() makes a temporary one when empty.
  std::string progress_dir;
  // Restarts of the whole job after a failure, torchrun's --max-restarts: every
  // rank is stopped and all are started again with TRIDENT_RESTART_COUNT set to
  // the attempt (1, 2, ...), at most this many times; across nodes every
  // node's launcher restarts in step (NOTE [restarts across nodes]).
  int max_restarts = 0;
  // --min-nodes: with --max-restarts across nodes, a restart after other
  // nodes' launchers are gone continues on the survivors when at least this
  // many remain (NOTE [shrinking]); 0: off, the job needs every node.
  int min_nodes = 0;
  int restart = 0;  // the attempt being run (set by launch())
};

// Throws LaunchError naming the offending value and the allowed range.
void check_launch_options(const LaunchOptions& options);

// "0,1,6,7" -> {0, 1, 6, 7}; throws LaunchError naming a bad item.
std::vector<int> parse_rank_list(const std::string& text);

// The global rank of a local rank (see LaunchOptions::ranks).
int global_rank(const LaunchOptions& options, int local_rank);

// The port of the launchers' own channel (NOTE [job channel], job_channel.cpp)
// in attempt options.restart: --launcher-port + 2 x the attempt, else
// master_port + 1 (NOTE [restarts across nodes] in launcher.cpp).
int launcher_port(const LaunchOptions& options, int master_port);
// The ranks' rendezvous port in attempt options.restart: across nodes
// --master-port + 2 x the attempt (a stale connection of an earlier attempt
// cannot reach a later one), else --master-port.
int attempt_master_port(const LaunchOptions& options);

// trident::pick_free_port (core/free_port.h), its failure a LaunchError.
int pick_free_port();

// Variables set for one rank, in a fixed order (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, MASTER_ADDR, MASTER_PORT,
// TRIDENT_RDZV_TIMEOUT_S, then TRIDENT_RESTART_COUNT when --max-restarts is
// given). OMP_NUM_THREADS=1 is included
// only when the launcher's own environment does not set it.
using Environment = std::vector<std::pair<std::string, std::string>>;
Environment rank_environment(const LaunchOptions& options, int local_rank, int master_port);

// "SIGKILL" for 9, "signal 77" for an unnamed one.
std::string signal_name(int signal_number);
// "exited with status 3" / "was killed by signal 9 (SIGKILL)", from waitpid's status.
std::string describe_wait_status(int wait_status);
// Shell convention: the exit status, or 128 + signal number.
int exit_code_of(int wait_status);

// Runs the job to completion and returns the launcher's exit status: 0 when
// every rank exits 0, else the first failed rank's exit_code_of, or 128 + the
// signal that stopped the launcher. With max_restarts, a failed job (not one
// the launcher was told to stop) is started again, up to that many times; the
// status is then the last attempt's. Never leaves a child running on return or
// on exception. Prints failures to stderr prefixed "trident launch: ".
int launch(const LaunchOptions& options);

}  // namespace trident::launch
