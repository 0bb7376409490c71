// Entry point: `trident <subcommand> [options]`. Dispatches to launch/commands.h;
// every error thrown below is printed once here with a non-zero exit: 2 for
// bad input, 1 for a failure (NOTE [exit statuses] in launch/options.h).
//
// NOTE [two executables] Loading libtorch costs about a second of start-up on
// the machines we measure on, more than a planner's whole simulation
// (benchmarks/results/simulator_scale.txt). So with libtorch the build makes
// two executables from these sources: `trident-torch`, which runs every
// command, and `trident`, linked without libtorch, which runs the pure
// commands itself and replaces itself (execv, same pid, arguments and
// environment) by the `trident-torch` next to it for the rest.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <boost/program_options/errors.hpp>

#include "checkpoint/checkpoint_store.h"
#include "datasets/errors.h"
#include "core/errors.h"
#include "core/json.h"
#include "core/model_checks.h"
#include "launch/commands.h"
#include "launch/launcher.h"
#include "launch/options.h"
#include "planner/cluster.h"
#include "schedules/action.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  bool torch;  // needs libtorch: run by trident-torch (NOTE [two executables])
  const char* summary;
};

const Command kCommands[] = {
    {"launch", trident::cli::cmd_launch, false, "start N local ranks of a command with RANK/WORLD_SIZE/... set"},
    {"train", trident::cli::cmd_train, true, "train a model from a TOML config"},
    {"schedule", trident::cli::cmd_schedule, false, "print, check, simulate and draw a pipeline schedule"},
    {"tokenize", trident::cli::cmd_tokenize, false, "print the token ids of stdin"},
    {"data", trident::cli::cmd_data, false, "prepare a binary token file from text"},
    {"bench", trident::cli::cmd_bench, true, "pipeline benchmarks: bench bubble (closed form/simulated/measured), bench throughput"},
    {"plan", trident::cli::cmd_plan, false, "choose tp/pp/dp, schedule, micro-batch and recompute from a model of the step"},
    {"compare", trident::cli::cmd_compare, false, "per-step loss/grad-norm differences of two runs (exit 1 beyond --rtol)"},
    {"checkpoint", trident::cli::cmd_checkpoint, true, "write a config's freshly initialised model as a checkpoint"},
    {"export", trident::cli::cmd_export, true, "write a checkpoint's model in Hugging Face GPT-2 layout"},
    {"eval", trident::cli::cmd_eval, true, "mean next-token loss of a text under a checkpoint or HF model"},
    {"generate", trident::cli::cmd_generate, true, "continue a prompt with a checkpoint or HF model"},
};

#if defined(TRIDENT_TORCH_EXE) && !defined(TRIDENT_HAVE_TORCH)
// Replaces this process by trident-torch with the same arguments; returns only on failure.
int run_torch_executable(char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string exe = (ec ? std::filesystem::path(argv[0]).parent_path() : self.parent_path()) / TRIDENT_TORCH_EXE;
  std::vector<char*> args{const_cast<char*>(exe.c_str())};
  for (char** a = argv + 1; *a; ++a) args.push_back(*a);
  args.push_back(nullptr);
  ::execv(exe.c_str(), args.data());
  std::fprintf(stderr, "trident %s: error: cannot run %s, which runs the libtorch commands: %s\n", argv[1], exe.c_str(),
               std::strerror(errno));
  return 1;
}
#endif

// NOTE [exit statuses]: the caller-error types of every layer are bad input.
int exit_status_of(const std::exception& e) {
  const bool bad_input = dynamic_cast<const trident::cli::BadInput*>(&e) ||
                         dynamic_cast<const trident::ConfigError*>(&e) ||
                         dynamic_cast<const trident::ModelInputError*>(&e) ||
                         dynamic_cast<const trident::data::DataError*>(&e) ||
                         dynamic_cast<const trident::json::JsonError*>(&e) ||
                         dynamic_cast<const trident::ckpt::CheckpointError*>(&e) ||
                         dynamic_cast<const trident::sched::ScheduleError*>(&e) ||
                         dynamic_cast<const trident::plan::PlanError*>(&e) ||
                         dynamic_cast<const trident::launch::LaunchError*>(&e) ||
                         dynamic_cast<const boost::program_options::error*>(&e);
  return bad_input ? 2 : 1;
}

void usage(FILE* out) {
  std::fprintf(out, "usage: trident <command> [options]   (trident <command> --help)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(stdout);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (name != c.name) continue;
#if defined(TRIDENT_TORCH_EXE) && !defined(TRIDENT_HAVE_TORCH)
    // `plan` is pure but for `plan calibrate` and `plan profile`, which measure with libtorch.
    const bool torch_sub =
        name == "plan" && argc > 2 && (std::string(argv[2]) == "calibrate" || std::string(argv[2]) == "profile");
    // NOTE [checked before libtorch] `train` reads its arguments and checks its config
    // (load_checked_config: pure C++) here first, so a bad one ends in milliseconds with the
    // same message trident-torch would print, before a quarter of a second of libtorch's
    // start-up on every rank; trident-torch reads and checks them again (the same code) and
    // goes on to what needs libtorch. The other libtorch commands go straight to trident-torch.
    if ((c.torch || torch_sub) && name != "train") return run_torch_executable(argv);
#endif
    int status = 0;
    try {
      status = c.run(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trident %s: error: %s\n", c.name, e.what());
      return exit_status_of(e);
    }
#if defined(TRIDENT_TORCH_EXE) && !defined(TRIDENT_HAVE_TORCH)
    if (status == trident::cli::kRunWithTorch) {
      std::fflush(nullptr);
      return run_torch_executable(argv);
    }
#endif
    return status;
  }
  std::string names;
  for (const auto& c : kCommands) names += std::string(names.empty() ? "" : ", ") + c.name;
  std::fprintf(stderr, "trident: error: unknown command '%s': expected one of %s (trident --help)\n", name.c_str(),
               names.c_str());
  return 2;
}
