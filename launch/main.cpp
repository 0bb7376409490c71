// Entry point: `trident <subcommand> [options]`. Dispatches to launch/commands.h;
// every error thrown below is printed once here with a non-zero exit.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "launch/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

const Command kCommands[] = {
    {"launch", trident::cli::cmd_launch, "start N local ranks of a command with RANK/WORLD_SIZE/... set"},
    {"train", trident::cli::cmd_train, "train a model from a TOML config"},
    {"schedule", trident::cli::cmd_schedule, "print, check, simulate and draw a pipeline schedule"},
    {"tokenize", trident::cli::cmd_tokenize, "print the token ids of stdin"},
    {"data", trident::cli::cmd_data, "prepare a binary token file from text"},
    {"bench", trident::cli::cmd_bench, "pipeline benchmarks: bench bubble (closed form/simulated/measured), bench throughput"},
    {"compare", trident::cli::cmd_compare, "per-step loss/grad-norm differences of two runs (exit 1 beyond --rtol)"},
    {"checkpoint", trident::cli::cmd_checkpoint, "write a config's freshly initialised model as a checkpoint"},
    {"export", trident::cli::cmd_export, "write a checkpoint's model in Hugging Face GPT-2 layout"},
    {"eval", trident::cli::cmd_eval, "mean next-token loss of a text under a checkpoint or HF model"},
    {"generate", trident::cli::cmd_generate, "continue a prompt with a checkpoint or HF model"},
};

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
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trident %s: error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "trident: unknown command '%s'\n", name.c_str());
  usage(stderr);
  return 2;
}
