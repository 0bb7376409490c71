// `trident bench bubble ...`: see measure/bubble_bench.h and benchmarks/README.md.
#include <boost/program_options.hpp>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "launch/commands.h"
#include "launch/options.h"
#include "schedules/generators.h"

#ifdef TRIDENT_HAVE_TORCH
#include "measure/bubble_bench.h"
#include "measure/throughput_bench.h"
#endif

namespace po = boost::program_options;

namespace trident::cli {
namespace {

std::vector<std::string> split(const std::string& s, const std::string& what) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  if (out.empty()) throw BadInput(what + ": expected a comma-separated list, got '" + s + "'");
  return out;
}

std::vector<int> ints(const std::string& s, const std::string& what) {
  std::vector<int> out;
  for (const std::string& x : split(s, what)) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(x, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != x.size() || v < 1) throw BadInput(what + ": '" + x + "' is not a positive integer");
    out.push_back(v);
  }
  return out;
}

// "gpipe, 1f1b, ...": every generated kind, as --schedules takes them.
std::string kind_list() {
  std::string out;
  for (const std::string& k : sched::schedule_kinds()) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// The cases both benchmarks sweep: schedules x stages p x micro-batches m x
// chunks v (v for interleaved only; the others run the chunks their kind needs).
struct Sweep {
  std::string schedules, stages, microbatches, chunks = "2";

  void add_options(po::options_description& opts) {
    opts.add_options()("schedules", po::value(&schedules)->default_value(schedules), kind_list().c_str())(
        "stages", po::value(&stages)->default_value(stages), "pipeline ranks p")(
        "microbatches", po::value(&microbatches)->default_value(microbatches), "micro-batches m")(
        "chunks", po::value(&chunks)->default_value(chunks), "virtual chunks v of interleaved (>= 2)");
  }

  // Calls run(kind, p, m, v) per case in order; interleaved cases with
  // m % p != 0 are skipped, saying so.
  template <typename Run>
  void for_each(Run run) const {
    for (const std::string& kind : split(schedules, "--schedules"))
      for (int p : ints(stages, "--stages"))
        for (int m : ints(microbatches, "--microbatches"))
          for (int v : kind == "interleaved" ? ints(chunks, "--chunks") : std::vector<int>{sched::default_chunks(kind)}) {
            if (kind == "interleaved" && v > 1 && m % p != 0) {
              std::cout << "skip interleaved p=" << p << " m=" << m << " v=" << v << ": needs m % p == 0\n";
              continue;
            }
            run(kind, p, m, v);
          }
  }
};

#ifdef TRIDENT_HAVE_TORCH
// The cores this process may run on (its affinity mask; all of them if unknown).
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// A mixture of experts' balance in a case's line (NOTE [MoE stats]); empty for a dense model.
std::string moe_balance(const bench::ThroughputRow& r) {
  std::string moe;
  const auto add = [&moe](double value, const char* fmt) {
    if (std::isnan(value)) return;
    char buf[64];
    std::snprintf(buf, sizeof buf, fmt, value);
    moe += buf;
  };
  add(r.moe_load, "  moe-load %.2f");
  add(100 * r.moe_dropped, "  dropped %.1f%%");
  add(r.moe_bias_range, "  bias-range %.2e");
  return moe;
}

// Says which --stages values exceed --max-ranks (skipped); true when any does. Throws when all do.
bool cap_stages(const Sweep& sweep, int max_ranks, bool max_ranks_defaulted, int cores) {
  bool capped = false, runnable = false;
  for (int p : ints(sweep.stages, "--stages")) {
    if (p > max_ranks) {
      std::cout << "bench throughput: p = " << p << " skipped: more ranks than --max-ranks " << max_ranks
                << (max_ranks_defaulted ? " (the " + std::to_string(cores) + " cores this process may use)" : "")
                << "; pass --max-ranks " << p << " to run it anyway (contention-bound)\n";
      capped = true;
    } else {
      runnable = true;
    }
  }
  if (!runnable) throw BadInput("trident bench throughput: every --stages value exceeds --max-ranks " +
                                          std::to_string(max_ranks) + "; nothing to run");
  return capped;
}

int bench_throughput(int argc, char** argv) {
  po::options_description opts(
      "usage: trident bench throughput [options] --out DIR\n\n"
      "Tokens/s and MFU of real GPT stages: one `trident launch` + `trident train` per case\n"
      "(dp = tp = 1, micro-batch size 1, global batch = m), medians over the steps after the\n"
      "first. Writes DIR/throughput.csv and DIR/throughput.svg. --chunks applies to interleaved.\n"
      "Real stages compute on this machine's cores: p ranks beyond them share cores, so such a case\n"
      "measures contention, not the schedule (trident bench bubble's synthetic stage does that);\n"
      "p is capped at the usable cores unless --max-ranks says more. MFU: tflops over one\n"
      "thread's best matmul rate (timed here, and by every run) x min(p x threads, cores).\n\noptions");
  const int cores = usable_cores();
  Sweep sweep{"1f1b,interleaved", "1,2,4", "8"};
  std::string config = "configs/gpt-tiny.toml", out;
  int steps = 4, max_ranks = cores;
  std::vector<std::string> sets;
  opts.add_options()("help,h", "show this help")("config", po::value(&config)->default_value(config), "model config")(
      "set", po::value(&sets)->composing(), "passed to trident train, e.g. --set model.hidden=256 (repeatable)");
  sweep.add_options(opts);
  opts.add_options()("steps", po::value(&steps)->default_value(steps),
                     "training steps per case (the first is not counted)")(
      "max-ranks", po::value(&max_ranks)->default_value(max_ranks),
      "largest p run; the default is the cores this process may use (more: contention-bound)")(
      "out", po::value(&out), "output directory");
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm)) return 0;
  if (out.empty()) throw BadInput("trident bench throughput: --out DIR is required");
  if (steps < 2) throw BadInput("--steps must be at least 2 (the first is warm-up), got " + std::to_string(steps));
  if (max_ranks < 1) throw BadInput("--max-ranks must be at least 1, got " + std::to_string(max_ranks));
  const bool capped = cap_stages(sweep, max_ranks, vm["max-ranks"].defaulted(), cores);
  std::cout << "bench throughput: " << cores << " usable cores; real stages of p ranks x training.threads compute on\n"
            << "  them, so a case beyond " << cores << " is contention-bound (it measures shared cores as much as the\n"
            << "  schedule; trident bench bubble measures schedules)" << (capped ? "; p capped at " + std::to_string(max_ranks) : "")
            << std::endl;
  const double peak = bench::measure_one_thread_peak();
  double running = peak, min_used = peak;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::filesystem::create_directories(out + "/runs");
  std::string cfg = config;
  for (const std::string& kv : sets) cfg += " --set " + kv;
  std::vector<bench::ThroughputRow> rows;
  sweep.for_each([&](const std::string& kind, int p, int m, int v) {
    if (p > max_ranks) return;  // said above
    bench::ThroughputRow r = bench::run_throughput_case(self, cfg, {kind, p, m, v}, steps, out + "/runs");
    std::vector<bench::ThroughputRow> one{r};
    running = bench::rescale_mfu(one, running, cores);  // the best peak so far; throughput.csv has the final one
    min_used = std::min(min_used, running);
    const std::string moe = moe_balance(r);
    std::printf("%-12s p=%d m=%-3d v=%d  %8.0f tok/s  MFU %5.1f%%  bubble %5.1f%%  step %.3f s%s%s\n", kind.c_str(), p,
                m, v, r.tokens_per_s, 100 * one[0].mfu, 100 * r.bubble, r.step_s, moe.c_str(),
                p * r.threads > cores ? "  (contention-bound)" : "");
    std::fflush(stdout);
    rows.push_back(r);
  });
  const double best = bench::rescale_mfu(rows, peak, cores);
  double lo = 0, hi = 0;  // the one-thread runs' own start-up timings
  for (const auto& r : rows)
    if (r.threads == 1 && r.run_peak_flops > 0)
      lo = lo > 0 ? std::min(lo, r.run_peak_flops) : r.run_peak_flops, hi = std::max(hi, r.run_peak_flops);
  std::printf("MFU against one thread's best matmul rate, %.1f GFLOP/s (timed here: %.1f; the runs' start-up timings: "
              "%.1f-%.1f), x min(p x threads, %d cores)%s\n", best / 1e9, peak / 1e9, lo / 1e9, hi / 1e9, cores,
              best > min_used ? "; lines above printed before the best timing read MFU high: throughput.csv has the final" : "");
  std::ofstream(out + "/throughput.csv") << bench::throughput_csv(rows);
  std::ofstream(out + "/throughput.svg") << bench::throughput_svg(rows, "Throughput, " + config);
  std::cout << "wrote " << out << "/{throughput.csv,throughput.svg} (runs under " << out << "/runs)" << std::endl;
  return 0;
}
#endif

}  // namespace

int cmd_bench(int argc, char** argv) {
  po::options_description opts(
      "usage: trident bench bubble [options] --out DIR\n"
      "       trident bench throughput [options] --out DIR   (trident bench throughput --help)\n\n"
      "For each (schedule, p, m, v): the bubble in closed form (where one exists), simulated on the\n"
      "real action lists, and measured by running the real executor over Gloo with p ranks as threads\n"
      "of a synthetic stage whose F, I, W sleep for a set time (benchmarks/README.md says why).\n"
      "Writes DIR/bubble.csv and DIR/bubble.svg. --chunks applies to interleaved only.\n\noptions");
  Sweep sweep{"gpipe,1f1b,interleaved,zb-h1", "2,4,8", "4,8,16"};
  std::string stage_ms = "20,40,20", out;
  int steps = 2;
  opts.add_options()("help,h", "show this help");
  sweep.add_options(opts);
  opts.add_options()(
      "stage-ms", po::value(&stage_ms)->default_value(stage_ms), "F,B,W milliseconds of a full stage (I = B - W)")(
      "steps", po::value(&steps)->default_value(steps), "measured steps per case, after one warm-up step")(
      "out", po::value(&out), "output directory");
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << opts << "\n";
    return argc < 2 ? 2 : 0;
  }
#ifdef TRIDENT_HAVE_TORCH
  if (std::string(argv[1]) == "throughput") return bench_throughput(argc - 1, argv + 1);
#endif
  if (std::string(argv[1]) != "bubble")
    throw BadInput("trident bench: unknown benchmark '" + std::string(argv[1]) +
                             "' (available: bubble, throughput)");
  po::variables_map vm;
  if (!parse_args(argc - 1, argv + 1, opts, vm)) return 0;
  if (out.empty()) throw BadInput("trident bench bubble: --out DIR is required");
  if (steps < 1) throw BadInput("--steps must be at least 1, got " + std::to_string(steps));
#ifdef TRIDENT_HAVE_TORCH
  bench::StageMs ms;
  {
    const auto parts = split(stage_ms, "--stage-ms");
    if (parts.size() != 3) throw BadInput("--stage-ms: expected F,B,W, got '" + stage_ms + "'");
    ms = {std::stod(parts[0]), std::stod(parts[1]), std::stod(parts[2])};
    if (!(ms.f > 0 && ms.b > ms.w && ms.w >= 0))
      throw BadInput("--stage-ms " + stage_ms + ": need F > 0 and B > W >= 0");
  }
  std::vector<bench::BubbleRow> rows;
  double worst = 0;
  sweep.for_each([&](const std::string& kind, int p, int m, int v) {
    const auto& kinds = sched::schedule_kinds();
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end())
      throw BadInput("--schedules: unknown schedule '" + kind + "' (" + kind_list() + ")");
    bench::BubbleRow r = bench::run_bubble_case({kind, p, m, v}, ms, steps);
    worst = std::max(worst, std::abs(r.measured - r.simulated));
    std::printf("%-12s p=%d m=%-3d v=%d  closed %6s  simulated %5.1f%%  measured %5.1f%%  predicted %5.1f%% (latency %.2f ms)  step %7.1f ms\n",
                kind.c_str(), p, m, v,
                r.closed_form < 0 ? "-" : (std::to_string(std::lround(1000 * r.closed_form) / 10.0).substr(0, 4) + "%").c_str(),
                100 * r.simulated, 100 * r.measured, 100 * r.predicted, r.latency_ms, r.step_ms);
    std::fflush(stdout);
    rows.push_back(r);
  });
  std::filesystem::create_directories(out);
  std::ofstream(out + "/bubble.csv") << bench::bubble_csv(rows);
  std::ofstream(out + "/bubble.svg") << bench::bubble_svg(
      rows, "Pipeline bubble, synthetic stage F,B,W = " + stage_ms + " ms");
  std::cout << "largest |measured - simulated| = " << 100 * worst << " points; wrote " << out
            << "/{bubble.csv,bubble.svg}" << std::endl;
  return 0;
#else
  throw std::runtime_error("trident bench needs the libtorch build");
#endif
}

}  // namespace trident::cli
