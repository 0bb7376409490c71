// The optimizer phase alone on gpt-small-brown's parameter shapes (4 layers,
// hidden 128, ffn 512, padded vocabulary 50304, 128 positions: 7.2 M fp32
// elements in 52 tensors), one thread: Trident's AdamW (libtorch's
// _fused_adamw_, NOTE [fused AdamW] in core/optimizer.cpp) against an
// element-wise AdamW (eight ATen calls per parameter with full-size
// temporaries, written out below) and torch::optim::AdamW (what
// benchmarks/bench_libtorch_loop.cpp steps); and the float64 gradient norm
// from one _foreach_norm against a per-parameter to(double).pow(2).sum().
// The contenders alternate rep by rep, so load from other work falls on all;
// the minimum over reps is the least disturbed time.
// Usage: bench_optimizer [--reps N]     (benchmarks/optimizer_step.sh runs it)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>

#include "core/optimizer.h"

namespace {

using trident::AdamW;
using trident::AdamWOptions;
using trident::Param;

std::vector<std::vector<int64_t>> shapes() {
  const int64_t h = 128, f = 512, v = 50304, s = 128;
  std::vector<std::vector<int64_t>> out{{v, h}, {s, h}};
  for (int l = 0; l < 4; ++l)
    for (auto sh : std::vector<std::vector<int64_t>>{{h}, {h}, {3 * h, h}, {3 * h}, {h, h}, {h}, {h}, {h}, {f, h}, {f}, {h, f}, {h}})
      out.push_back(sh);
  out.push_back({h});
  out.push_back({h});
  return out;
}

struct Model {
  std::vector<std::unique_ptr<Param>> params;
  Model() {
    for (const auto& sh : shapes()) {
      auto p = std::make_unique<Param>();
      p->tensor = at::randn(sh).set_requires_grad(true);
      p->tensor.mutable_grad() = at::randn(sh) * 1e-2;
      p->info.no_decay = sh.size() == 1;
      params.push_back(std::move(p));
    }
  }
  std::vector<Param*> raw() {
    std::vector<Param*> out;
    for (auto& p : params) out.push_back(p.get());
    return out;
  }
};

// The element-wise AdamW Trident ran before the fused kernel.
struct ElementwiseAdamW {
  std::vector<Param*> ps;
  std::vector<at::Tensor> m, v;
  int64_t t = 0;
  void step(double lr) {
    at::NoGradGuard no_grad;
    ++t;
    const double bc1 = 1 - std::pow(0.9, static_cast<double>(t)), bc2 = 1 - std::pow(0.95, static_cast<double>(t));
    for (size_t i = 0; i < ps.size(); ++i) {
      if (m.size() <= i) m.push_back(at::zeros_like(ps[i]->tensor)), v.push_back(at::zeros_like(ps[i]->tensor));
      at::Tensor w = ps[i]->tensor.view({-1}), g = ps[i]->tensor.grad().reshape({-1});
      if (!ps[i]->info.no_decay) w.mul_(1.0 - lr * 0.1);
      m[i] = m[i].view({-1}).mul_(0.9).add_(g, 0.1);
      v[i] = v[i].view({-1}).mul_(0.95).addcmul_(g, g, 0.05);
      w.addcdiv_(m[i], (v[i] / bc2).sqrt_().add_(1e-8), -lr / bc1);
    }
  }
};

double old_norm(const std::vector<Param*>& ps) {
  std::vector<at::Tensor> sq;
  for (Param* p : ps) sq.push_back(p->tensor.grad().reshape({-1}).to(at::kDouble).pow(2).sum());
  return at::stack(sq).cumsum(0)[-1].sqrt().item<double>();
}

double new_norm(const std::vector<Param*>& ps) {
  std::vector<at::Tensor> g;
  for (Param* p : ps) g.push_back(p->tensor.grad());
  return at::stack(at::_foreach_norm(g, 2, at::kDouble)).square_().cumsum(0)[-1].sqrt().item<double>();
}

double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "bench_optimizer: unknown argument %s (usage: bench_optimizer [--reps N])\n", argv[i]);
      return 2;
    }
  }
  if (reps < 1) {
    std::fprintf(stderr, "bench_optimizer: --reps must be at least 1\n");
    return 2;
  }
  at::set_num_threads(1);
  at::manual_seed(1);
  Model a, b, c;
  AdamW fused(a.raw(), AdamWOptions{0.9, 0.95, 1e-8, 0.1});
  ElementwiseAdamW elementwise{b.raw(), {}, {}, 0};
  std::vector<at::Tensor> decay, plain;
  for (Param* p : c.raw()) (p->info.no_decay ? plain : decay).push_back(p->tensor);
  torch::optim::AdamW libtorch({torch::optim::OptimizerParamGroup(decay, std::make_unique<torch::optim::AdamWOptions>(
                                                                              torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.1))),
                                torch::optim::OptimizerParamGroup(plain, std::make_unique<torch::optim::AdamWOptions>(
                                                                             torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).weight_decay(0.0)))});
  std::vector<std::pair<std::string, std::function<void()>>> contenders{
      {"adamw fused (trident)", [&] { fused.step(1e-3); }},
      {"adamw element-wise (before)", [&] { elementwise.step(1e-3); }},
      {"adamw torch::optim (libtorch loop)", [&] { libtorch.step(); }},
      {"norm _foreach_norm float64 (trident)", [&] { (void)new_norm(a.raw()); }},
      {"norm per-parameter float64 (before)", [&] { (void)old_norm(a.raw()); }},
  };
  std::vector<std::vector<double>> times(contenders.size());
  for (int r = 0; r < reps + 2; ++r)
    for (size_t k = 0; k < contenders.size(); ++k) {
      const double s = seconds(contenders[k].second);
      if (r >= 2) times[k].push_back(s);  // two warm-up reps: state allocation
    }
  std::printf("%-40s %10s %10s\n", "contender (52 tensors, 7.2 M elements)", "min ms", "median ms");
  for (size_t k = 0; k < contenders.size(); ++k) {
    std::vector<double> t = times[k];
    std::sort(t.begin(), t.end());
    std::printf("%-40s %10.2f %10.2f\n", contenders[k].first.c_str(), 1e3 * t.front(), 1e3 * t[t.size() / 2]);
  }
  return 0;
}
