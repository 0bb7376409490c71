// Throughput benchmark: see throughput_bench.h.
#include "measure/throughput_bench.h"

#include "metrics/plot_axis.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

namespace trident::bench {
namespace {

std::string f(double v, const char* fmt = "%.1f") {
  char buf[40];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The number after "key": in a flat metrics.jsonl row.
double field(const std::string& row, const std::string& key) {
  const auto at = row.find("\"" + key + "\":");
  if (at == std::string::npos) return NAN;
  return std::strtod(row.c_str() + at + key.size() + 3, nullptr);
}

// `threads = N` of the [training] table in a run's config.toml (1 if absent).
int training_threads(const std::string& config_toml) {
  std::ifstream in(config_toml);
  std::string line, table;
  while (std::getline(in, line)) {
    if (line.rfind("[", 0) == 0) table = line;
    else if (table == "[training]" && line.rfind("threads", 0) == 0 && line.find('=') != std::string::npos)
      return std::max(1, std::atoi(line.c_str() + line.find('=') + 1));
  }
  return 1;
}

}  // namespace

double measure_one_thread_peak(int trials) {
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const int64_t n = 1024;
  at::Tensor a = at::randn({n, n}), b = at::randn({n, n});
  at::mm(a, b);  // warm-up
  double best = 0;
  for (int i = 0; i < trials; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 2; ++r) at::mm(a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2 * 2.0 * n * n * n / s);
  }
  at::set_num_threads(before);
  return best;
}

double rescale_mfu(std::vector<ThroughputRow>& rows, double measured_peak, int cores) {
  double peak = measured_peak;
  for (const auto& r : rows)
    if (r.threads == 1) peak = std::max(peak, r.run_peak_flops);
  for (auto& r : rows)
    r.mfu = r.tflops * 1e12 / (peak * static_cast<double>(std::min(r.c.p * r.threads, std::max(1, cores))));
  return peak;
}

ThroughputRow run_throughput_case(const std::string& trident, const std::string& config, const ThroughputCase& c,
                                  int steps, const std::string& scratch) {
  const std::string dir = scratch + "/" + c.schedule + "-p" + std::to_string(c.p) + "-m" + std::to_string(c.m) +
                          "-v" + std::to_string(c.v);
  // One sample per micro-batch, so global_batch_size = m (dp = 1).
  const std::string cmd = trident + " launch --master-port 0 --nproc-per-node " + std::to_string(c.p) + " -- " +
                          trident + " train --config " + config + " --set parallel.pp=" + std::to_string(c.p) +
                          " --set parallel.tp=1 --set parallel.dp=1 --set schedule.kind=" + c.schedule +
                          " --set schedule.chunks=" + std::to_string(c.v) +
                          " --set training.micro_batch_size=1 --set training.global_batch_size=" + std::to_string(c.m) +
                          " --set training.steps=" + std::to_string(steps) + " --set training.eval_interval=0" +
                          " --set logging.progress=false --set logging.dir=" + dir + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run: " + cmd);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  if (pclose(p) != 0) throw std::runtime_error("bench throughput: this run failed:\n" + cmd + "\n" + out);
  std::ifstream rows(dir + "/metrics.jsonl");
  std::vector<double> tok, mfu, bubble, step, tflops, load, dropped, bias_range;
  std::string line;
  for (int i = 0; std::getline(rows, line); ++i) {
    if (i == 0 && steps > 1) continue;  // warm-up
    tok.push_back(field(line, "tokens_per_s"));
    mfu.push_back(field(line, "mfu"));
    bubble.push_back(field(line, "bubble"));
    step.push_back(field(line, "step_time_s"));
    tflops.push_back(field(line, "tflops"));
    for (auto [key, into] : {std::pair{"moe_load_max", &load}, {"moe_dropped_max", &dropped},
                             {"moe_bias_range_max", &bias_range}})
      if (const double v = field(line, key); !std::isnan(v)) into->push_back(v);
  }
  if (tok.empty()) throw std::runtime_error("bench throughput: no metrics in " + dir + "/metrics.jsonl");
  ThroughputRow r{c, median(tok), median(mfu), median(bubble), median(step), median(tflops)};
  r.threads = training_threads(dir + "/config.toml");
  r.moe_load = median(load), r.moe_dropped = median(dropped), r.moe_bias_range = median(bias_range);
  // The trainer's mfu is tflops / (its one-thread peak x min(ranks, cores)) (framework/trainer.cpp),
  // so its peak is recovered from any step's pair.
  const double trainer_cores = std::max(1u, std::thread::hardware_concurrency());
  if (r.mfu > 0) r.run_peak_flops = r.tflops * 1e12 / (r.mfu * std::min<double>(c.p, trainer_cores));
  return r;
}

std::string throughput_csv(const std::vector<ThroughputRow>& rows) {
  std::ostringstream s;
  // A mixture of experts' columns where a run has them (empty cells for a run without).
  bool moe = false;
  for (const auto& r : rows) moe = moe || !std::isnan(r.moe_load);
  const auto cell = [](double v, const char* fmt) { return std::isnan(v) ? std::string() : f(v, fmt); };
  s << "schedule,p,m,v,tokens_per_s,mfu,bubble,step_s,tflops,threads,run_peak_gflops"
    << (moe ? ",moe_load_max,moe_dropped_max,moe_bias_range_max" : "") << "\n";
  for (const auto& r : rows) {
    s << r.c.schedule << "," << r.c.p << "," << r.c.m << "," << r.c.v << "," << f(r.tokens_per_s) << ","
      << f(r.mfu, "%.4f") << "," << f(r.bubble, "%.4f") << "," << f(r.step_s, "%.4f") << "," << f(r.tflops, "%.6f")
      << "," << r.threads << "," << f(r.run_peak_flops / 1e9);
    if (moe)
      s << "," << cell(r.moe_load, "%.4f") << "," << cell(r.moe_dropped, "%.4f") << "," << cell(r.moe_bias_range, "%.3e");
    s << "\n";
  }
  return s.str();
}

std::string throughput_svg(const std::vector<ThroughputRow>& rows, const std::string& title) {
  const double W = 860, H = 500, L = 80, R = 230, T = 50, B = 60;
  int pmax = 1;
  double ymax = 1;
  for (const auto& r : rows) pmax = std::max(pmax, r.c.p), ymax = std::max(ymax, r.tokens_per_s);
  const Axis ya = round_axis(0, ymax, 5);  // 1-2-5 ticks
  ymax = ya.hi;
  auto x = [&](int p) { return L + (pmax > 1 ? std::log2(p) / std::log2(pmax) : 0.5) * (W - L - R); };
  auto y = [&](double v) { return T + (1 - v / ymax) * (H - T - B); };
  static const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"};
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + f(W) + "\" height=\"" + f(H) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
                  "<text x=\"" + f(L) + "\" y=\"25\" font-size=\"15\">" + title + "</text>\n";
  for (double v : ya.ticks)
    s += "<line x1=\"" + f(L) + "\" x2=\"" + f(W - R) + "\" y1=\"" + f(y(v)) + "\" y2=\"" + f(y(v)) +
         "\" stroke=\"#ddd\"/><text x=\"" + f(L - 8) + "\" y=\"" + f(y(v) + 4) + "\" text-anchor=\"end\">" +
         tick_label(v, ya.step) + "</text>\n";
  for (int p = 1; p <= pmax; p *= 2)
    s += "<text x=\"" + f(x(p)) + "\" y=\"" + f(H - B + 18) + "\" text-anchor=\"middle\">" + std::to_string(p) + "</text>\n";
  s += "<text x=\"" + f((L + W - R) / 2) + "\" y=\"" + f(H - 15) + "\" text-anchor=\"middle\">pipeline stages p</text>"
       "<text x=\"18\" y=\"" + f((T + H - B) / 2) + "\" transform=\"rotate(-90 18 " + f((T + H - B) / 2) +
       ")\" text-anchor=\"middle\">tokens/s</text>\n";
  std::map<std::string, std::vector<const ThroughputRow*>> lines;
  for (const auto& r : rows)
    lines[r.c.schedule + " v=" + std::to_string(r.c.v) + " m=" + std::to_string(r.c.m)].push_back(&r);
  int k = 0;
  for (auto& [name, pts] : lines) {
    std::sort(pts.begin(), pts.end(), [](auto* a, auto* b) { return a->c.p < b->c.p; });
    const std::string col = colours[k % 7];
    std::string poly;
    for (const auto* r : pts) {
      poly += f(x(r->c.p)) + "," + f(y(r->tokens_per_s)) + " ";
      s += "<circle cx=\"" + f(x(r->c.p)) + "\" cy=\"" + f(y(r->tokens_per_s)) + "\" r=\"3\" fill=\"" + col +
           "\"><title>" + name + " p=" + std::to_string(r->c.p) + ": " + f(r->tokens_per_s) + " tok/s, MFU " +
           f(100 * r->mfu) + "%</title></circle>\n";
    }
    s += "<polyline fill=\"none\" stroke=\"" + col + "\" stroke-width=\"1.5\" points=\"" + poly + "\"/>\n";
    const double ly = T + 10 + 17 * k++;
    s += "<line x1=\"" + f(W - R + 15) + "\" x2=\"" + f(W - R + 45) + "\" y1=\"" + f(ly) + "\" y2=\"" + f(ly) +
         "\" stroke=\"" + col + "\" stroke-width=\"1.5\"/><text x=\"" + f(W - R + 52) + "\" y=\"" + f(ly + 4) + "\">" +
         name + "</text>\n";
  }
  return s + "</svg>\n";
}

}  // namespace trident::bench
