// The baseline for `trident train` throughput: the same GPT-2 written plainly
// with torch::nn modules and torch::optim::AdamW, trained on one rank with
// gradient accumulation. It shares no model, layer or optimizer code with
// Trident (only the token-file reader, so both read the same samples): what
// it measures is what libtorch itself costs for this model and batch.
//
// Usage: bench_libtorch_loop [--key value ...]; keys and defaults below
// (the defaults are configs/gpt-small-brown.toml). Prints one summary line:
//   libtorch-loop: steps N warmup W tokens_per_s T step_time_s S ...
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "datasets/dataset.h"
#include "datasets/token_file.h"
#include "benchmarks/libtorch_gpt.h"

namespace {

struct Options : bench::GptSizes {
  int64_t micro_batch = 4, global_batch = 16;
  int64_t steps = 24, warmup = 4;  // timed steps are steps - warmup
  int64_t threads = 1, seed = 1234;
  double lr = 3e-3, weight_decay = 0.1, grad_clip = 1.0;
  std::string data;  // token-file prefix (reads PREFIX.train.bin); empty: random ids
  bool profile = false;  // print where a step's time goes
};

Options parse(int argc, char** argv) {
  Options o;
  std::map<std::string, int64_t*> ints{{"layers", &o.layers},   {"hidden", &o.hidden},
                                       {"heads", &o.heads},     {"ffn", &o.ffn},
                                       {"seq", &o.seq},         {"vocab", &o.vocab},
                                       {"micro-batch", &o.micro_batch}, {"global-batch", &o.global_batch},
                                       {"steps", &o.steps},     {"warmup", &o.warmup},
                                       {"threads", &o.threads}, {"seed", &o.seed}};
  std::map<std::string, double*> reals{{"lr", &o.lr}, {"weight-decay", &o.weight_decay}, {"grad-clip", &o.grad_clip}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--profile") {
      o.profile = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0 || i + 1 >= argc)
      throw std::invalid_argument("expected --key value, got '" + arg + "'");
    const std::string key = arg.substr(2), value = argv[++i];
    if (key == "data")
      o.data = value;
    else if (ints.count(key))
      *ints[key] = std::stoll(value);
    else if (reals.count(key))
      *reals[key] = std::stod(value);
    else
      throw std::invalid_argument("unknown option --" + key);
  }
  if (o.global_batch % o.micro_batch != 0 || o.hidden % o.heads != 0 || o.steps <= o.warmup)
    throw std::invalid_argument("need global-batch % micro-batch == 0, hidden % heads == 0, steps > warmup");
  return o;
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Same sample order as Trident's dataset (global batch of step `step`, its
// micro-batch `mb`), or random ids when no data file is given.
struct Batches {
  explicit Batches(const Options& opts) : o(opts) {
    if (o.data.empty()) return;
    file = std::make_unique<trident::data::TokenFile>(o.data + ".train.bin");
    ds = std::make_unique<trident::data::CausalLmDataset>(file->view(), o.seq, static_cast<uint64_t>(o.seed));
  }
  std::pair<torch::Tensor, torch::Tensor> get(int64_t step, int64_t mb) const {
    torch::Tensor tok;
    if (!ds) {
      tok = torch::randint(o.vocab, {o.micro_batch, o.seq + 1}, torch::kLong);
    } else {
      tok = torch::empty({o.micro_batch, o.seq + 1}, torch::kLong);
      auto idx = ds->micro_batch(step, o.global_batch, 0, 1, static_cast<int64_t>(mb), o.micro_batch);
      for (size_t i = 0; i < idx.size(); ++i) ds->copy_sample(idx[i], tok[static_cast<int64_t>(i)].data_ptr<int64_t>());
    }
    return {tok.narrow(1, 0, o.seq).contiguous(), tok.narrow(1, 1, o.seq).contiguous()};
  }
  const Options& o;
  std::unique_ptr<trident::data::TokenFile> file;
  std::unique_ptr<trident::data::CausalLmDataset> ds;
};

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  at::set_num_threads(static_cast<int>(o.threads));
  torch::manual_seed(static_cast<uint64_t>(o.seed));
  bench::Gpt model(o);

  // Decay matrices only (biases, LayerNorms excluded), as Trident does.
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto adamw = [&](double wd) { return std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(o.lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd)); };
  torch::optim::AdamW opt({torch::optim::OptimizerParamGroup(decay, adamw(o.weight_decay)),
                           torch::optim::OptimizerParamGroup(no_decay, adamw(0.0))});

  Batches batches(o);
  const int64_t m = o.global_batch / o.micro_batch;
  std::vector<double> times;
  double t_fwd = 0, t_bwd = 0, t_opt = 0, t_data = 0;
  for (int64_t step = 0; step < o.steps; ++step) {
    const auto start = Clock::now();
    opt.zero_grad();
    double loss_sum = 0;
    for (int64_t mb = 0; mb < m; ++mb) {
      auto t0 = Clock::now();
      auto [ids, targets] = batches.get(step, mb);
      auto t1 = Clock::now();
      torch::Tensor loss = model(ids, targets);
      loss_sum += loss.item<double>();
      auto t2 = Clock::now();
      (loss / static_cast<double>(m)).backward();
      if (step >= o.warmup) {
        t_data += std::chrono::duration<double>(t1 - t0).count();
        t_fwd += std::chrono::duration<double>(t2 - t1).count();
        t_bwd += since(t2);
      }
    }
    auto t3 = Clock::now();
    torch::nn::utils::clip_grad_norm_(model->parameters(), o.grad_clip);
    opt.step();
    const double dt = since(start);
    if (step >= o.warmup) {
      t_opt += since(t3);
      times.push_back(dt);
    }
    if (o.profile) std::printf("step %lld loss %.4f time %.3f s\n", static_cast<long long>(step + 1), loss_sum / m, dt);
  }
  double total = 0;
  for (double t : times) total += t;
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double tokens = static_cast<double>(o.global_batch * o.seq);
  std::printf("libtorch-loop: steps %lld warmup %lld tokens_per_s %.2f step_time_s %.4f median_step_time_s %.4f\n",
              static_cast<long long>(o.steps), static_cast<long long>(o.warmup),
              tokens * static_cast<double>(times.size()) / total, total / static_cast<double>(times.size()),
              sorted[sorted.size() / 2]);
  if (o.profile) {
    const double n = static_cast<double>(times.size());
    std::printf("per step: data %.4f s, forward %.4f s, backward %.4f s, clip+AdamW %.4f s\n", t_data / n, t_fwd / n,
                t_bwd / n, t_opt / n);
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_libtorch_loop: " << e.what() << std::endl;
  return 2;
}
