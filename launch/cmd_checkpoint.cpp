// `trident checkpoint init --config FILE [--set section.key=value]... --out DIR`
// `trident checkpoint show DIR`
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "checkpoint/checkpoint_store.h"
#include "core/config.h"
#include "framework/config_tables.h"
#include "launch/commands.h"
#include "launch/options.h"

#ifdef TRIDENT_HAVE_TORCH
#include "checkpoint/checkpoint_tensors.h"
#include "models/registry.h"
#endif

namespace po = boost::program_options;

namespace trident::cli {

int cmd_checkpoint(int argc, char** argv) {
  po::options_description opts(
      "usage: trident checkpoint init --config FILE [--set section.key=value]... --out DIR\n"
      "       trident checkpoint show DIR\n\n"
      "show: reads everything back and checks each checksum (an error names the file and tensor that fail),\n"
      "then prints the checkpoint's step, world, layout and version and every tensor with its dtype, full\n"
      "shape and number of slices.\n\n"
      "init: "
      "Writes the freshly initialised model of a config (its weights are a function of training.seed and\n"
      "each parameter's name, the same under every layout) as step 0 of a checkpoint in DIR, in the store's\n"
      "format (DIR/latest, DIR/step-00000000/rank-00000.{bin,json}, manifest.json). Export, eval and\n"
      "generate read it like a checkpoint saved by training.\n\noptions");
  std::string action, config_path, out;
  std::vector<std::string> sets;
  std::string show_dir;
  opts.add_options()("help,h", "show this help")("action", po::value(&action), "init | show")(
      "dir", po::value(&show_dir), "checkpoint directory (show)")(
      "config,c", po::value(&config_path), "TOML config file")(
      "set,s", po::value(&sets)->composing(), "override one key (repeatable)")("out", po::value(&out),
                                                                              "checkpoint directory");
  po::positional_options_description pos;
  pos.add("action", 1).add("dir", 1);
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm, &pos)) return 0;
  if (action == "show") {
    if (show_dir.empty()) throw BadInput("usage: trident checkpoint show DIR");
    const ckpt::Reader r(show_dir);
    // Every checksum is checked before anything is printed: a corrupted checkpoint
    // gives its one error line, not a listing cut off by it.
    r.verify();
    std::ostringstream listing;
    listing << r.step_dir() << ": step " << r.step() << ", world " << r.world() << ", layout \"" << r.meta().layout
            << "\", trident " << r.meta().trident_version << "\n";
    for (const std::string& name : r.names()) {
      std::string shape;
      for (int64_t d : r.full_shape(name)) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      listing << "  " << name << " " << r.dtype(name) << " [" << shape << "] in " << r.slices(name) << " slice(s)\n";
    }
    std::cout << listing.str() << r.names().size() << " tensors, checksums ok\n";
    return 0;
  }
  if (action != "init") throw BadInput("expected `trident checkpoint init` or `show` (see trident checkpoint --help)");
  if (config_path.empty() || out.empty())
    throw BadInput("--config FILE and --out DIR are required (see trident checkpoint --help)");
  Config cfg = load_checked_config(config_path, sets);
#ifdef TRIDENT_HAVE_TORCH
  int n = 0;
  {
    ckpt::ShardWriter w(out, 0, 0, 1);
    for (const ParamInfo& info : make_model(cfg)->unique_params(1)) {  // tied copies are stored once
      ckpt::add_param(w, info.name, info, init_full_tensor(cfg.training.seed, info));
      ++n;
    }
    ckpt::Meta meta;
    meta.config_toml = to_toml(cfg);
    meta.layout = "tp=1 pp=1 dp=1 (trident checkpoint init)";
    w.set_meta(meta);
    w.finish();
  }
  ckpt::commit(out, 0, 1, static_cast<int>(cfg.checkpoint.keep));
  std::cout << "wrote step 0 of " << out << " (" << n << " parameters)\n";
  return 0;
#else
  throw std::runtime_error("this build of trident has no libtorch (configured with TRIDENT_WITH_TORCH=OFF)");
#endif
}

}  // namespace trident::cli
