// `trident launch [options] -- CMD ARGS...`: parses the options before `--`
// with Boost.Program_options and hands the rest to launch/launcher.h.
#include <boost/program_options.hpp>

#include <cstring>
#include <string>

#include "launch/commands.h"
#include "launch/launcher.h"
#include "launch/options.h"

namespace po = boost::program_options;

namespace trident::cli {

int cmd_launch(int argc, char** argv) {
  launch::LaunchOptions o;
  po::options_description desc(
      "usage: trident launch --nproc-per-node N [options] -- CMD ARGS...\n\n"
      "Starts N processes of CMD with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
      "GROUP_RANK/NODE_RANK, MASTER_ADDR, MASTER_PORT, TRIDENT_RDZV_TIMEOUT_S (and OMP_NUM_THREADS=1\n"
      "unless set). Multi-node: run it once per node with --nnodes, --node-rank and node 0's --master-addr.\n"
      "If a rank fails, the others get SIGTERM, then SIGKILL, and the launcher exits\n"
      "with the failed rank's status (128 + signal for a signal), or with --max-restarts N starts\n"
      "them all again (TRIDENT_RESTART_COUNT=1, 2, ...) at most N times, then reports the restarts,\n"
      "the steps recomputed and the time lost.\n\noptions");
  desc.add_options()
      ("help,h", "print this help")
      ("nproc-per-node", po::value<int>(&o.nproc_per_node)->required(), "processes (ranks) to start on this node")
      ("nnodes", po::value<int>(&o.nnodes)->default_value(1), "nodes in the job")
      ("node-rank", po::value<int>(&o.node_rank)->default_value(0), "this node's index in [0, nnodes)")
      ("master-addr", po::value<std::string>(&o.master_addr)->default_value("127.0.0.1"), "rendezvous host")
      ("master-port", po::value<int>(&o.master_port)->default_value(29500),
       "rendezvous port; 0 picks a free one (single node only)")
      ("grace", po::value<double>(&o.grace_seconds)->default_value(3.0),
       "seconds between SIGTERM and SIGKILL when stopping ranks")
      ("rdzv-timeout", po::value<double>(&o.rdzv_timeout_seconds)->default_value(60.0),
       "seconds the ranks wait for every node to join before they fail, naming who is missing")
      ("launcher-port", po::value<int>(&o.launcher_port)->default_value(0),
       "multi-node: the port node 0's launcher listens on for the other launchers, which report "
       "their ranks' failures through it (0: --master-port + 1)")
      ("ranks", po::value<std::string>(), "global ranks of this node's processes, e.g. 0,1,6,7 "
       "(default: node-rank*nproc-per-node onwards)")
      ("max-restarts", po::value<int>(&o.max_restarts)->default_value(0),
       "restart the whole job up to N times after a failure (as torchrun --max-restarts; across nodes "
       "every launcher restarts in step, attempt k on the ports + 2k); "
       "with checkpoint.resume=true each attempt continues from the newest complete checkpoint")
      ("min-nodes", po::value<int>(&o.min_nodes)->default_value(0),
       "with --max-restarts across nodes: when other nodes' launchers are gone, restart on the survivors "
       "if at least N remain (fewer data-parallel replicas, same global batch: needs parallel.dp = -1); "
       "node 0 hosts the rendezvous and must survive; 0: every node is needed")
      ("no-prefix", po::bool_switch(), "let ranks write straight to the terminal, without \"[rank R] \"");

  // Everything after the first `--` is the command, untouched by the parser.
  int split = argc;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) {
      split = i;
      break;
    }
  po::variables_map vm;
  // --help is answered before the required --nproc-per-node is checked.
  if (!parse_args(split, argv, desc, vm, nullptr, nullptr,
                  "example: build/trident launch --nproc-per-node 2 -- build/trident train --config configs/gpt-tiny.toml\n"
                  "two nodes (on node 1; node 0 runs the same with --node-rank 0):\n"
                  "  build/trident launch --nnodes 2 --node-rank 1 --nproc-per-node 4 --master-addr node0 -- \\\n"
                  "    build/trident train --config configs/gpt-tiny.toml --set parallel.tp=2 --set parallel.pp=2\n"))
    return 0;
  o.prefix_output = !vm["no-prefix"].as<bool>();
  if (vm.count("ranks")) o.ranks = launch::parse_rank_list(vm["ranks"].as<std::string>());
  if (split == argc)
    throw launch::LaunchError("missing `--` before the command: expected `trident launch [options] -- CMD ARGS...`");
  for (int i = split + 1; i < argc; ++i) o.command.emplace_back(argv[i]);
  if (o.command.empty()) throw launch::LaunchError("missing command after `--`: expected `-- CMD ARGS...`");
  return launch::launch(o);
}

}  // namespace trident::cli
