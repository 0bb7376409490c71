// Time of one micro-batch (forward + backward) of a GptStage at tp = world,
// and the part of it spent in TP collectives (Group::comm_seconds). Run alone
// for tp = 1, or under the launcher for tp = N:
//   bench_tp [--threads K] [--steps N] [--batch B] [--seq S] [--sp]
//   trident launch --nproc-per-node 2 -- bench_tp --threads 1
// The model is hidden 512, ffn 2048, 8 heads, 4 layers, vocab 256 with the
// embedding and head (gpt-tiny's other sizes). Rank 0 prints one line:
//   RESULT tp=2 sp=0 threads=1 tokens=64 step_ms=... comm_ms=... comm_share=... comm_calls=... bare_comm_ms=...
// bare_comm_ms: the same number of activation-sized all-reduces alone (transfer cost only).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "models/gpt/gpt.h"
#include "parallel/process_groups.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int threads = 1, steps = 10, warmup = 2;
  int64_t batch = 2, seq = 32;
  bool sp = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    auto value = [&]() -> long {
      if (i + 1 >= argc) throw std::runtime_error(std::string(argv[i]) + " needs a value");
      return std::atol(argv[++i]);
    };
    if (!std::strcmp(argv[i], "--threads")) a.threads = static_cast<int>(value());
    else if (!std::strcmp(argv[i], "--steps")) a.steps = static_cast<int>(value());
    else if (!std::strcmp(argv[i], "--warmup")) a.warmup = static_cast<int>(value());
    else if (!std::strcmp(argv[i], "--batch")) a.batch = value();
    else if (!std::strcmp(argv[i], "--seq")) a.seq = value();
    else if (!std::strcmp(argv[i], "--sp")) a.sp = true;
    else throw std::runtime_error(std::string("unknown argument '") + argv[i] + "'");
  }
  if (a.threads < 1 || a.steps < 1 || a.warmup < 0 || a.batch < 1 || a.seq < 1)
    throw std::runtime_error("--threads, --steps, --batch and --seq must be positive");
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The same number of all-reduces of one activation (batch, seq, hidden), back
// to back after a barrier: the transfer cost alone, without waiting for a
// peer that is still computing. Median over `reps` rounds; 0 at tp = 1.
double bare_all_reduce_seconds(const trident::Group& g, int64_t calls, std::vector<int64_t> shape, int reps) {
  if (g.size() == 1 || calls == 0) return 0;
  at::Tensor t = at::ones(shape);
  std::vector<double> rounds;
  for (int r = 0; r < reps; ++r) {
    trident::barrier(g);
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < calls; ++i) trident::all_reduce(g, t);
    rounds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(rounds);
}

int run(const Args& a) {
  using namespace trident;
  at::set_num_threads(a.threads);
  const WorldEnv env = read_world_env();
  ProcessGroups pg(env, Layout::make(env.world_size, env.world_size, 1, 1), "gloo", std::chrono::seconds(60));
  ModelConfig cfg;
  cfg.hidden = 512;
  cfg.ffn_hidden = 2048;
  cfg.heads = 8;
  cfg.layers = 4;
  cfg.seq_len = a.seq;
  cfg.vocab_size = 256;
  const TpContext tp{pg.tp.size() > 1 ? &pg.tp : nullptr, a.sp};
  GptStage stage(cfg, ChunkSpec{0, cfg.layers, true, true}, tp, 1234);
  at::Generator gen = at::detail::createCPUGenerator(7);
  const auto ids_opts = at::TensorOptions().dtype(at::kLong);
  const at::Tensor ids = at::randint(cfg.vocab_size, {a.batch, a.seq}, gen, ids_opts);
  const at::Tensor targets = at::randint(cfg.vocab_size, {a.batch, a.seq}, gen, ids_opts);

  std::vector<double> step_s, comm_s;
  int64_t calls = 0;
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    for (auto& p : stage.params()) p.tensor.mutable_grad() = at::Tensor();
    barrier(pg.world);  // start together, so comm time is not the other rank's head start
    const double comm0 = pg.tp.comm_seconds;
    const int64_t calls0 = pg.tp.comm_calls;
    const auto t0 = Clock::now();
    stage.forward(ids, targets).backward();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i < a.warmup) continue;
    step_s.push_back(dt);
    comm_s.push_back(pg.tp.comm_seconds - comm0);
    calls = pg.tp.comm_calls - calls0;
  }
  const double step = median(step_s), comm = median(comm_s);
  const double bare = bare_all_reduce_seconds(pg.tp, calls, {a.batch, a.seq, cfg.hidden}, a.steps);
  if (pg.rank() == 0)
    std::printf("RESULT tp=%d sp=%d threads=%d tokens=%lld step_ms=%.2f comm_ms=%.2f comm_share=%.3f "
                "comm_calls=%lld bare_comm_ms=%.2f\n",
                pg.tp.size(), a.sp ? 1 : 0, a.threads, static_cast<long long>(a.batch * a.seq), step * 1e3,
                comm * 1e3, comm / step, static_cast<long long>(calls), bare * 1e3);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tp: %s\n", e.what());
    return 1;
  }
}
