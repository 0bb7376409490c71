// `trident export --checkpoint DIR --format hf-gpt2 --out DIR`
#include <iostream>
#include <stdexcept>
#include <string>

#include <boost/program_options.hpp>

#include "launch/commands.h"
#include "launch/options.h"

#ifdef TRIDENT_HAVE_TORCH
#include "models/gpt/hf_gpt2.h"
#endif

namespace po = boost::program_options;

namespace trident::cli {

int cmd_export(int argc, char** argv) {
  po::options_description opts(
      "usage: trident export --checkpoint DIR --format hf-gpt2 --out DIR\n\n"
      "Writes the model of a Trident checkpoint (saved under any layout; DIR is the checkpoint directory,\n"
      "whose `latest` is followed, or one step-XXXXXXXX directory) in Hugging Face's GPT-2 layout:\n"
      "OUT/model.safetensors (wte, wpe, h.{i}.*, ln_f; Conv1D weights stored (in, out); no vocabulary\n"
      "padding) and OUT/config.json. `trident eval/generate --init-from OUT` and model.init_from read it.\n\noptions");
  std::string checkpoint, format, out;
  opts.add_options()("help,h", "show this help")("checkpoint", po::value(&checkpoint), "checkpoint directory")(
      "format", po::value(&format), "export format: hf-gpt2")("out", po::value(&out), "output directory");
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm)) return 0;
  if (checkpoint.empty() || out.empty() || format.empty())
    throw std::runtime_error("--checkpoint DIR, --format hf-gpt2 and --out DIR are required (see trident export --help)");
  if (format != "hf-gpt2") throw std::runtime_error("--format " + format + ": expected hf-gpt2");
#ifdef TRIDENT_HAVE_TORCH
  const int n = export_checkpoint_to_hf(checkpoint, out);
  std::cout << "wrote " << out << "/model.safetensors (" << n << " tensors) and " << out << "/config.json\n";
  return 0;
#else
  throw std::runtime_error("this build of trident has no libtorch (configured with TRIDENT_WITH_TORCH=OFF)");
#endif
}

}  // namespace trident::cli
