// `trident train --config FILE [--set section.key=value]...`
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "core/config.h"
#include "framework/config_tables.h"
#include "launch/commands.h"
#include "launch/options.h"
#include "launch/fault.h"

#ifdef TRIDENT_HAVE_TORCH
#include "framework/trainer.h"
#include "parallel/process_groups.h"
#endif

namespace po = boost::program_options;

namespace trident::cli {

int cmd_train(int argc, char** argv) {
  po::options_description opts(
      "usage: trident train --config FILE [--set section.key=value]...\n\n"
      "Trains the model a TOML config describes, on this process's rank (RANK/WORLD_SIZE/... from the\n"
      "environment, as `trident launch` sets them; none means one process). Rank 0 prints a line per step\n"
      "and writes <logging.dir>/{config.toml,metrics.jsonl,loss.svg}. Keys: configs/README.md.\n"
      "With a checkpoint.dir, SIGTERM or SIGUSR1 makes every rank finish its step, save a checkpoint there\n"
      "and exit with status 128 + the signal (143, 138); a second signal ends it at once.\n\noptions");
  std::string config_path;
  std::vector<std::string> sets;
  opts.add_options()("help,h", "show this help")("config,c", po::value(&config_path), "TOML config file")(
      "set,s", po::value(&sets)->composing(), "override one key, e.g. --set parallel.pp=4 (repeatable)");
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm)) return 0;
  if (config_path.empty()) throw BadInput("--config FILE is required (see trident train --help)");
  Config cfg = load_checked_config(config_path, sets);
#ifdef TRIDENT_HAVE_TORCH
  // Test-only fault injection (launch/fault.h); inert unless TRIDENT_FAULT is set.
  const WorldEnv place = read_world_env();
  launch::FaultInjector fault(place.rank, place.restart, cfg.logging.dir, cfg.training.steps);
  const TrainSummary summary = train(cfg);
  // Preempted (NOTE [preemption]): the status of a process the signal ended,
  // after the checkpoint that lets the run continue.
  return summary.preempted_signal != 0 ? 128 + summary.preempted_signal : 0;
#elif defined(TRIDENT_TORCH_EXE)
  (void)cfg;
  return kRunWithTorch;  // the arguments and the config held: trident-torch trains (NOTE [checked before libtorch])
#else
  throw std::runtime_error("this build of trident has no libtorch (configured with TRIDENT_WITH_TORCH=OFF)");
#endif
}

}  // namespace trident::cli
