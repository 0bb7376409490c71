// Where one MoE layer's time goes (benchmarks/moe_vs_transformers.sh): forward +
// backward of models/common/moe_layer.h's layer and of its parts on their own, at
// configs/mixtral-tiny.toml's sizes by default (one micro-batch of 2 x 32 tokens,
// hidden 64, 8 experts of width 48, top-2, softmax router with the Switch and z
// losses), one thread, interleaved over reps, medians:
//   route    the router GEMM, scores, top-k and weights, the two balancing losses
//   permute  dispatch (the sort by expert), the gather of rows and the weighted combine
//   experts  the SwiGLU experts on the sorted rows (one GEMM per expert and projection)
//   layer    moe_forward + the losses, all of it
// and one line `moe_layer: tokens T layer S route S permute S experts S` for the
// script to read.
//
// Usage: bench_moe_layer [--reps N] [--tokens T] [--hidden H] [--experts E] [--ffn I] [--top-k K]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "models/common/experts.h"
#include "models/common/moe_layer.h"
#include "models/common/moe_losses.h"
#include "parallel/token_permutation.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

at::Tensor param(at::IntArrayRef shape) { return (at::randn(shape) * 0.02).requires_grad_(); }

// The sizes measured, from the command line (each value >= 1).
struct Args {
  int reps = 21;
  int64_t tokens = 64, hidden = 64, experts = 8, ffn = 48, top_k = 2;
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
    const int64_t v = std::stoll(argv[++i]);
    if (v < 1) throw std::invalid_argument(a + " = " + std::to_string(v) + ": expected >= 1");
    if (a == "--reps")
      args.reps = static_cast<int>(v);
    else if (a == "--tokens")
      args.tokens = v;
    else if (a == "--hidden")
      args.hidden = v;
    else if (a == "--experts")
      args.experts = v;
    else if (a == "--ffn")
      args.ffn = v;
    else if (a == "--top-k")
      args.top_k = v;
    else
      throw std::invalid_argument("unknown argument " + a +
                                  "; usage: bench_moe_layer [--reps N] [--tokens T] [--hidden H] [--experts E] "
                                  "[--ffn I] [--top-k K]");
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args args = parse_args(argc, argv);
  const int reps = args.reps;
  const int64_t tokens = args.tokens, hidden = args.hidden, experts = args.experts, ffn = args.ffn, top_k = args.top_k;
  at::set_num_threads(1);
  at::manual_seed(1);
  trident::RouterOptions o;
  o.experts = experts, o.top_k = top_k;
  trident::check_router_options(o);

  trident::MoeWeights w;
  w.router = param({experts, hidden});
  w.gate = param({experts, ffn, hidden}), w.up = param({experts, ffn, hidden}), w.down = param({experts, hidden, ffn});
  const at::Tensor x = at::randn({tokens, hidden}).requires_grad_();
  const at::Tensor gy = at::randn({tokens, hidden});
  // The routing the permute and experts parts take as given, and their inputs.
  const trident::Routing fixed = trident::route(x.detach(), w.router.detach(), at::Tensor(), o);
  const at::Tensor weights = fixed.weights.detach().requires_grad_();
  const trident::Permutation d = trident::sort_by_expert(fixed.experts, experts);
  const at::Tensor rows = trident::permute(x.detach(), d).requires_grad_();
  const at::Tensor grows = at::randn(rows.sizes());
  const at::Tensor gw = at::randn({tokens, top_k});

  const auto losses = [&](const trident::Routing& r) {
    return trident::switch_aux_loss(r, top_k) * 0.01 + trident::z_loss(r) * 0.001;
  };
  struct Part {
    const char* name;
    std::function<void()> run;
    std::vector<double> secs;
  };
  std::vector<Part> parts{
      {"route", [&] {
         const trident::Routing r = trident::route(x, w.router, at::Tensor(), o);
         ((r.weights * gw).sum() + losses(r)).backward();
       }, {}},
      {"permute", [&] {
         const trident::Permutation dd = trident::sort_by_expert(fixed.experts, experts);
         (trident::unpermute(trident::permute(x, dd), weights, dd, tokens) * gy).sum().backward();
       }, {}},
      {"experts", [&] { (trident::experts_swiglu(rows, d.counts, w.gate, w.up, w.down) * grows).sum().backward(); }, {}},
      {"layer", [&] {
         const trident::MoeOutput out = trident::moe_forward(x, w, o);
         ((out.y * gy).sum() + losses(out.routing)).backward();
       }, {}},
  };
  for (auto& p : parts) p.run();  // warm-up
  for (int r = 0; r < reps; ++r)
    for (auto& p : parts) {  // interleaved, so load changes hit every part alike
      const auto t0 = Clock::now();
      p.run();
      p.secs.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  const double layer = median(parts[3].secs);
  std::printf("one MoE layer, forward + backward: %lld tokens, hidden %lld, %lld experts of width %lld, top-%lld; "
              "median of %d, 1 thread\n",
              static_cast<long long>(tokens), static_cast<long long>(hidden), static_cast<long long>(experts),
              static_cast<long long>(ffn), static_cast<long long>(top_k), reps);
  for (const auto& p : parts)
    std::printf("  %-8s %9.1f us  %5.1f%% of the layer\n", p.name, median(p.secs) * 1e6, 100.0 * median(p.secs) / layer);
  std::printf("moe_layer: tokens %lld layer %.9f route %.9f permute %.9f experts %.9f\n", static_cast<long long>(tokens),
              layer, median(parts[0].secs), median(parts[1].secs), median(parts[2].secs));
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_moe_layer: " << e.what() << std::endl;
  return 2;
}
