// Where a training micro-batch's time goes: runs forward + backward of
// Trident's GptStage (tp = pp = 1) or of the plain libtorch baseline
// (benchmarks/libtorch_gpt.h) on random ids, interleaved, and prints the
// median seconds of each, then (with --trace) writes a Chrome trace of one
// model's ops through libtorch's profiler for scripts to sum by op name.
//
// With --gemm it instead times the LM head's three GEMMs (forward, input
// gradient, weight gradient) against the square 1024^3 matmul that the
// trainer's MFU takes as peak.
//
// Usage: bench_train_profile [--reps N] [--gemm] [--trace trident|libtorch FILE]
// Sizes are those of configs/gpt-small-brown.toml, micro-batch 4.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include "benchmarks/libtorch_gpt.h"
#include "models/gpt/gpt.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GFLOP/s of each GEMM, interleaved over reps, medians.
void gemm_rates(int reps) {
  const int64_t t = 512, h = 128, v = 50304, n = 1024;
  const torch::Tensor x = torch::randn({t, h}), w = torch::randn({v, h}), gy = torch::randn({t, v});
  const torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  struct Case {
    const char* name;
    double flops;
    std::function<void()> run;
  };
  std::vector<Case> cases{
      {"square 1024x1024x1024 (MFU peak)", 2.0 * n * n * n, [&] { at::mm(a, b); }},
      {"head forward  x(512,128) W^T", 2.0 * t * h * v, [&] { at::mm(x, w.t()); }},
      {"head dgrad    gy(512,V) W", 2.0 * t * h * v, [&] { at::mm(gy, w); }},
      {"head wgrad    gy^T x  (V,128)", 2.0 * t * h * v, [&] { at::mm(gy.t(), x); }},
      {"head wgrad    (x^T gy)^T", 2.0 * t * h * v, [&] { at::mm(x.t(), gy); }},
  };
  std::vector<std::vector<double>> secs(cases.size());
  for (auto& c : cases) c.run();  // warm-up
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto t0 = Clock::now();
      cases[i].run();
      secs[i].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  for (size_t i = 0; i < cases.size(); ++i)
    std::printf("  %-36s %7.1f GFLOP/s\n", cases[i].name, cases[i].flops / median(secs[i]) / 1e9);
}

}  // namespace

int main(int argc, char** argv) try {
  int reps = 5;
  std::string trace_model, trace_file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc)
      reps = std::stoi(argv[++i]);
    else if (a == "--gemm")
      trace_model = "gemm";
    else if (a == "--trace" && i + 2 < argc)
      trace_model = argv[++i], trace_file = argv[++i];
    else
      throw std::invalid_argument("usage: bench_train_profile [--reps N] [--gemm] [--trace trident|libtorch FILE]");
  }
  at::set_num_threads(1);
  if (trace_model == "gemm") {
    gemm_rates(reps);
    return 0;
  }
  const int64_t batch = 4;
  bench::GptSizes sizes;

  trident::ModelConfig cfg;
  cfg.layers = sizes.layers, cfg.hidden = sizes.hidden, cfg.heads = sizes.heads, cfg.ffn_hidden = sizes.ffn;
  cfg.seq_len = sizes.seq, cfg.vocab_size = 50257, cfg.vocab_pad_multiple = 128;
  trident::GptStage stage(cfg, trident::ChunkSpec{0, cfg.layers, true, true}, trident::TpContext{}, 1234);
  bench::Gpt plain(sizes);

  torch::manual_seed(1);
  const torch::Tensor ids = torch::randint(50257, {batch, sizes.seq}, torch::kLong);
  const torch::Tensor targets = torch::randint(50257, {batch, sizes.seq}, torch::kLong);
  std::function<void()> run_trident = [&] { stage.forward(ids, targets).backward(); };
  std::function<void()> run_plain = [&] { plain(ids, targets).backward(); };

  if (!trace_model.empty()) {
    auto& run = trace_model == "trident" ? run_trident : run_plain;
    run();  // warm-up outside the trace
    torch::autograd::profiler::RecordProfile guard(trace_file);
    for (int r = 0; r < reps; ++r) run();
    return 0;
  }
  std::vector<double> tt, tp;
  run_trident(), run_plain();  // warm-up
  for (int r = 0; r < reps; ++r)
    for (int which = 0; which < 2; ++which) {  // interleaved, so load changes hit both alike
      const auto t0 = Clock::now();
      which == 0 ? run_trident() : run_plain();
      (which == 0 ? tt : tp).push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  std::printf("forward+backward of one micro-batch (%lld x %lld tokens), median of %d:\n",
              static_cast<long long>(batch), static_cast<long long>(sizes.seq), reps);
  std::printf("  trident  %.4f s\n  libtorch %.4f s\n  ratio trident/libtorch time %.3f\n", median(tt), median(tp),
              median(tt) / median(tp));
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_train_profile: " << e.what() << std::endl;
  return 2;
}
