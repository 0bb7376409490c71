// `trident plan profile`: measures one model on this machine (the trainer on
// one device, measure/profile.h) and writes its profile for
// `trident plan --profile` (planner/profile.h). Needs libtorch: the `trident`
// without it hands the command to trident-torch (NOTE [two executables]).
#include <boost/program_options.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config.h"
#include "framework/config_tables.h"
#include "launch/commands.h"
#include "launch/options.h"
#include "planner/profile.h"

#ifdef TRIDENT_HAVE_TORCH
#include "measure/profile.h"
#endif

namespace po = boost::program_options;

namespace trident::cli {

#ifdef TRIDENT_HAVE_TORCH
namespace {

std::vector<int64_t> parse_sizes(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t x = 0;
    try {
      x = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || x < 1)
      throw BadInput("--mbs '" + text + "': '" + item + "' is not an integer >= 1");
    for (int64_t y : out)
      if (y == x) throw BadInput("--mbs '" + text + "': " + item + " given twice");
    out.push_back(x);
  }
  if (out.empty()) throw BadInput("--mbs '" + text + "': no micro-batch size");
  return out;
}

// The planner's profile of `cfg` from the measured rows: each row's F and B split into its pieces by
// the shares the pieces took alone.
plan::Profile profile_of(const Config& cfg, const std::vector<bench::ProfileRow>& rows) {
  plan::Profile p;
  p.arch = cfg.model.arch;
  p.layers = cfg.model.layers, p.hidden = cfg.model.hidden, p.heads = cfg.model.heads, p.kv_heads = cfg.model.kv();
  p.ffn_hidden = cfg.model.ffn(), p.seq_len = cfg.model.seq_len, p.vocab_size = cfg.model.vocab_size;
  p.precision = cfg.training.precision;
  p.threads = static_cast<int>(cfg.training.threads);
  for (const bench::ProfileRow& r : rows) {
    plan::MicroBatchProfile m;
    m.micro_batch = static_cast<int>(r.micro_batch);
    m.layer_forward_ms = r.forward_ms * r.layer_share;
    m.embedding_forward_ms = r.forward_ms * r.embedding_share;
    m.head_forward_ms = r.forward_ms * r.head_share;
    for (int k = 0; k < 3; ++k) {
      m.layer_backward_ms[k] = r.backward_ms[k] * r.layer_share;
      m.embedding_backward_ms[k] = r.backward_ms[k] * r.embedding_share;
      m.head_backward_ms[k] = r.backward_ms[k] * r.head_share;
    }
    m.step_overhead_ms = r.step_overhead_ms;
    m.split_backward_ratio = r.split_backward_ratio;
    m.weight_share = r.weight_share;
    m.pipeline_slowdown = r.pipeline_slowdown;
    p.rows.push_back(m);
  }
  return p;
}

}  // namespace
#endif

int cmd_plan_profile(int argc, char** argv) {
  po::options_description opts("trident plan profile --config MODEL.toml --out PROFILE.toml [options]");
  opts.add_options()("help,h", "show this help")("config", po::value<std::string>(), "model config (a trident train TOML)")(
      "set", po::value<std::vector<std::string>>(), "section.key=value override of the config (repeatable)")(
      "out", po::value<std::string>(), "profile file to write")(
      "mbs", po::value<std::string>()->default_value("1,2,4"), "micro-batch sizes to measure, comma-separated")(
      "steps", po::value<int>()->default_value(16), "steps trained per measurement (the first 2 are left out)")(
      "microbatches", po::value<int>()->default_value(8), "micro-batches per step")(
      "repeats", po::value<int>()->default_value(3), "runs of each kind, interleaved (the median of each figure)");
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm, nullptr, nullptr,
                  "Trains the model on one device (tp = pp = dp = 1) with each micro-batch size and each\n"
                  "recomputation mode (and once with the backward split into I and W, and once as a 2-stage\n"
                  "pipeline of two processes: how much slower ranks sharing the machine compute), writes its F and B\n"
                  "per micro-batch, split into embedding, layers and head in the proportions the pieces take\n"
                  "alone, and the step's time beyond them.\n"
                  "`trident plan --profile FILE` then predicts every layout of that model from these figures.\n"
                  "example: build/trident plan profile --config configs/gpt-tiny.toml --mbs 2 --steps 4 --repeats 1 --out runs/gpt-tiny.profile.toml\n"))
    return 0;
#ifndef TRIDENT_HAVE_TORCH
  throw std::runtime_error("plan profile trains with libtorch: build with libtorch (cmake without "
                           "-DTRIDENT_WITH_TORCH=OFF) and run that build's trident");
#else
  for (const char* required : {"config", "out"})
    if (!vm.count(required)) throw BadInput(std::string("--") + required + " is required (see --help)");
  const std::vector<int64_t> sizes = parse_sizes(vm["mbs"].as<std::string>());
  const std::vector<std::string> sets =
      vm.count("set") ? vm["set"].as<std::vector<std::string>>() : std::vector<std::string>{};
  const Config cfg = load_checked_config(vm["config"].as<std::string>(), sets);
  const std::string out = vm["out"].as<std::string>();
  check_writable_output(out);
  bench::ProfileOptions o;
  o.steps = vm["steps"].as<int>();
  o.microbatches = vm["microbatches"].as<int>();
  o.repeats = vm["repeats"].as<int>();
  const std::vector<bench::ProfileRow> rows = bench::measure_profile(cfg, sizes, o);

  const plan::Profile p = profile_of(cfg, rows);
  std::ostringstream os;
  std::string command = "trident plan profile";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  os << "# " << cfg.source << " measured by `" << command << "`\n"
     << "# (NOTE [measured profile] in planner/profile.h): per micro-batch size, " << o.repeats << " x " << o.steps
     << " steps of " << o.microbatches << " micro-batches on one device\n# for each recomputation mode and with zb-h1 "
     << "(medians of the steps after the first 2, then of the repetitions).\n# Whole-model F and B per micro-batch (ms):\n";
  for (const bench::ProfileRow& r : rows) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "#   mbs %3lld  F %8.3f  B %8.3f (selective %8.3f, full %8.3f)  step overhead %7.3f  shares: "
                  "embedding %.3f, layer %.3f, head %.3f; split B %.3f of B, W %.3f of it; as pp = 2 %.3fx slower\n",
                  static_cast<long long>(r.micro_batch), r.forward_ms, r.backward_ms[0], r.backward_ms[1],
                  r.backward_ms[2], r.step_overhead_ms, r.embedding_share, r.layer_share, r.head_share,
                  r.split_backward_ratio, r.weight_share, r.pipeline_slowdown);
    os << line;
  }
  os << "\n" << plan::to_toml(p);
  const std::string text = os.str();
  plan::parse_profile(text, out);  // what it writes, the planner reads
  std::ofstream f(out, std::ios::trunc);
  f << text;
  if (!f) throw std::runtime_error("--out '" + out + "': writing failed");
  std::cout << "wrote " << out << ": " << rows.size() << " micro-batch size(s) of " << cfg.source << "\n";
  return 0;
#endif
}

}  // namespace trident::cli
