// `trident plan calibrate`: measures this machine (measure/calibrate.h)
// and writes its cluster description for `trident plan --cluster`. Needs
// libtorch and Gloo: the `trident` without libtorch hands it to trident-torch
// (NOTE [two executables] in main.cpp).
#include <boost/program_options.hpp>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "launch/commands.h"
#include "launch/options.h"
#include "planner/calibration.h"
#include "planner/cluster.h"

#ifdef TRIDENT_HAVE_TORCH
#include "measure/calibrate.h"
#endif

namespace po = boost::program_options;

namespace trident::cli {

#ifdef TRIDENT_HAVE_TORCH
namespace {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// The cluster the measurements describe, with the link fits behind it.
struct Fitted {
  plan::Cluster c;
  std::vector<plan::LinkSample> samples;  // the back-to-back transfers
  plan::LinkFit fit, written;             // fitted to them; with the busy bandwidth written
  double busy_gbs = 0, step_us = 0, collective_us = 0;
};

Fitted fit_cluster(const bench::Calibration& m, const bench::CalibrateOptions& o, const std::string& name,
                   int devices) {
  // Bandwidth, latency per message and the per-call collective time are fitted to every row (the
  // ping-pongs mostly fix the latency, the collectives the per-call time); the bandwidth is written,
  // the latencies and call time come from the busy measurements (NOTE [busy link] in
  // measure/calibrate.cpp).
  Fitted x;
  std::vector<plan::LinkSample>& samples = x.samples;
  for (const bench::CommTiming& t : m.comm) samples.push_back({t.kind, o.ranks, t.bytes, t.seconds});
  x.fit = plan::fit_link(samples);

  plan::Cluster& c = x.c;
  c.name = name;
  c.nodes = 1;
  c.devices_per_node = devices;
  c.device_memory_gib = m.host_memory_gib / devices;
  c.peak_tflops_fp32 = m.matmul_flops / 1e12;
  c.peak_tflops_bf16 = 0;
  c.gemm_efficiency = 1.0;  // the peak is the measured rate itself
  c.memory_bandwidth_gbs = m.memory_gbs;
  c.action_overhead_us = m.action_overhead_us;
  c.gpt_layer_forward_us = m.gpt_layer.forward_us, c.gpt_layer_backward_us = m.gpt_layer.backward_us;
  c.llama_layer_forward_us = m.llama_layer.forward_us, c.llama_layer_backward_us = m.llama_layer.backward_us;
  // Between computing ranks (NOTE [busy link]) a collective's bandwidth, ring step and call cost
  // more than the back-to-back timings show: the bandwidth written is the busy all-reduces' (small
  // and large), where the larger took longer; the step and call are the small ones' beyond it.
  const double bytes = m.busy_collective_bytes;
  x.busy_gbs =
      plan::busy_bandwidth_gbs(bytes, m.busy_collective_us, m.busy_large_bytes, m.busy_large_all_reduce_us);
  x.written = x.fit;
  if (x.busy_gbs > 0) x.written.bandwidth_gbs = x.busy_gbs;
  c.intra_bandwidth_gbs = c.inter_bandwidth_gbs = x.written.bandwidth_gbs;
  const plan::BusyLink busy = plan::busy_link(x.written, bytes, m.busy_collective_us, m.busy_all_gather_us);
  x.step_us = busy.step_us, x.collective_us = busy.collective_us;
  c.intra_latency_us = c.inter_latency_us = x.step_us;
  c.intra_collective_us = c.inter_collective_us = x.collective_us;
  c.compute_slots_per_node = 2 / m.concurrent_slowdown;
  c.intra_pipeline_latency_us = c.inter_pipeline_latency_us = m.pipeline_latency_us;
  return x;
}

// The cluster file's header: how it was measured, each measurement and what was written from it.
std::string file_header(const std::string& command, const bench::Calibration& m, const bench::CalibrateOptions& o,
                        int devices, const Fitted& x) {
  std::ostringstream os;
  const plan::LinkFit& fit = x.fit;
  const double busy_gbs = x.busy_gbs, bytes = m.busy_collective_bytes;
  os << "# This machine, measured by `" << command << "`\n"
     << "# at " << utc_now() << " on " << m.cores << " cores, " << fmt("%.1f", m.host_memory_gib) << " GiB.\n"
     << "# One device = one rank with " << o.threads << " intra-op thread(s); device_memory_gib is the host's memory\n"
     << "# shared by " << devices << " ranks. peak_tflops_fp32 is the measured matmul rate (fp32 1024^3, best of 8),\n"
     << "# so gemm_efficiency is 1 for GEMMs of that size; smaller ones ran at";
  for (const auto& [n, rate] : m.small_matmuls) os << " " << fmt("%.0f", n) << "^3 " << fmt("%.1f", rate / 1e9);
  os << " GFLOP/s.\n# One node: [inter_node] repeats [intra_node] (no second node was measured).\n"
     << "# Transfers between " << o.ranks << " local ranks (forked processes over loopback Gloo), per call the median of 3 rounds of "
     << o.repeats << " calls back to back:\n#   kind        bytes      measured_us  ring-model_us\n";
  for (const plan::LinkSample& s : x.samples) {
    const double model = fit.model_seconds(s);
    char line[160];
    std::snprintf(line, sizeof line, "#   %-10s %10.0f %12.1f %14.1f\n", s.kind.c_str(), s.bytes, s.seconds * 1e6,
                  model * 1e6);
    os << line;
  }
  os << "# pipeline_latency_us: a pipeline transfer's latency measured through the executor while both ranks compute\n"
     << "# (1f1b, 2 ranks, " << m.pipeline_latency_samples << " receive waits; NOTE [busy link] in measure/calibrate.cpp)\n"
     << "# bandwidth_gbs: fitted to the rows above with a latency and a per-call time (least squares of the relative\n"
     << "# error): bandwidth " << fmt("%.4g", fit.bandwidth_gbs) << " GB/s, back-to-back latency " << fmt("%.4g", fit.latency_us)
     << " us per message, " << fmt("%.4g", fit.collective_us) << " us per call; the model's |error| over them: median "
     << fmt("%.0f", 100 * fit.median_rel_error) << " %, worst " << fmt("%.0f", 100 * fit.worst_rel_error) << " %\n"
     << "# bandwidth_gbs written: "
     << (busy_gbs > 0 ? "between computing ranks, from a " + fmt("%.0f", bytes) + "-byte and a " + fmt("%.0f", m.busy_large_bytes) +
                            "-byte all-reduce after a 256^3 matmul on each rank (" + fmt("%.0f", m.busy_collective_us) +
                            " and " + fmt("%.0f", m.busy_large_all_reduce_us) + " us beyond it): " + fmt("%.4g", busy_gbs) +
                            " GB/s (NOTE [busy link])\n"
                      : "the fit above (the busy all-reduce of " + fmt("%.0f", m.busy_large_bytes) +
                            " bytes took no longer than the small one, or no larger size was measured)\n")
     << "# latency_us and collective_us written: a " << fmt("%.0f", bytes) << "-byte all-reduce and all-gather between 2 ranks that\n"
     << "# each run a 256^3 matmul before them took " << fmt("%.0f", m.busy_collective_us) << " and "
     << fmt("%.0f", m.busy_all_gather_us) << " us beyond the matmul: " << fmt("%.0f", x.step_us) << " us per ring step, "
     << fmt("%.0f", x.collective_us) << " us per call (NOTE [busy link])\n"
     << "# compute_slots_per_node: 2 ranks over how much slower a rank of that busy pipeline computed than the same\n"
     << "# stage alone (" << fmt("%.3f", m.concurrent_slowdown) << "x; NOTE [shared compute] in measure/calibrate.cpp)\n"
     << "# action_overhead_us: mean F and B time through the executor of a stage that computes nothing (1f1b, "
     << o.ranks << " ranks);\n"
     << "# *_layer_*_us: median host time per layer of a model too small to compute (hidden 8, seq 8, one sample),\n"
     << "# the difference of 5 layers and 1 layer over 4 (NOTE [layer overhead] in measure/calibrate.cpp)\n\n";
  return os.str();
}

}  // namespace
#endif

int cmd_plan_calibrate(int argc, char** argv) {
  po::options_description opts("trident plan calibrate --out CLUSTER.toml [options]");
  opts.add_options()("help,h", "show this help")("out", po::value<std::string>(), "cluster file to write")(
      "name", po::value<std::string>()->default_value("local"), "cluster.name of the file")(
      "ranks", po::value<int>()->default_value(2), "local ranks the transfers run between (forked processes over loopback Gloo)")(
      "devices", po::value<int>(), "cluster.devices_per_node (default: the cores this process may use)")(
      "threads", po::value<int>()->default_value(1), "intra-op threads of the matmul (the runs' training.threads)")(
      "repeats", po::value<int>()->default_value(20), "calls timed back to back per message size (median of 3 rounds)")(
      "max-size-mib", po::value<double>()->default_value(16.0), "largest message, MiB (sizes from 1 KiB by x4)");
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm, nullptr, nullptr,
                  "Measures one rank's fp32 matmul rate (1024^3) and memory bandwidth (a += b, 64 MiB), Gloo\n"
                  "all-reduce, all-gather and point-to-point times between local ranks, and the executor's\n"
                  "time per pipeline action of a stage that computes nothing and per GPT and Llama layer of a model\n"
                  "too small to compute anything, and a pipeline transfer's latency between two computing ranks;\n"
                  "fits the ring model's bandwidth and per-call time to the collectives and writes the cluster\n"
                  "file, the measurements in its header.\n"
                  "example: build/trident plan calibrate --out runs/local.toml --repeats 5\n"))
    return 0;
#ifndef TRIDENT_HAVE_TORCH
  throw std::runtime_error("plan calibrate measures with libtorch and Gloo: build with libtorch (cmake without "
                           "-DTRIDENT_WITH_TORCH=OFF) and run that build's trident");
#else
  if (!vm.count("out")) throw BadInput("--out is required (see --help)");
  bench::CalibrateOptions o;
  o.ranks = vm["ranks"].as<int>();
  o.repeats = vm["repeats"].as<int>();
  o.threads = vm["threads"].as<int>();
  const double mib = vm["max-size-mib"].as<double>();
  if (!(mib > 0) || mib > 1024) throw BadInput("--max-size-mib " + fmt("%g", mib) + ": expected (0, 1024]");
  o.max_bytes = static_cast<int64_t>(mib * 1024 * 1024);
  const int devices = vm.count("devices") ? vm["devices"].as<int>() : usable_cores();
  if (devices < 1) throw BadInput("--devices " + std::to_string(devices) + ": expected >= 1");
  const std::string out = vm["out"].as<std::string>();
  check_writable_output(out);

  const bench::Calibration m = bench::calibrate(o);
  const Fitted x = fit_cluster(m, o, vm["name"].as<std::string>(), devices);
  std::string command = "trident plan calibrate";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  const std::string text = file_header(command, m, o, devices, x) + plan::to_toml(x.c);
  plan::parse_cluster(text, out);  // what it writes, the planner reads
  std::ofstream f(out, std::ios::trunc);
  f << text;
  if (!f) throw std::runtime_error("--out '" + out + "': writing failed");
  std::cout << "wrote " << out << ": fp32 matmul " << fmt("%.1f", m.matmul_flops / 1e9) << " GFLOP/s, memory "
            << fmt("%.1f", m.memory_gbs) << " GB/s, link " << fmt("%.3g", x.written.bandwidth_gbs) << " GB/s + "
            << fmt("%.3g", x.step_us) << " us per ring step + " << fmt("%.3g", x.collective_us)
            << " us per collective (busy), pipeline transfer " << fmt("%.3g", m.pipeline_latency_us) << " us, action overhead " << fmt("%.1f", m.action_overhead_us) << " us\n";
  return 0;
#endif
}

}  // namespace trident::cli
