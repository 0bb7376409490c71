// `trident plan calibrate`'s measurements: see calibrate.h.
#include "measure/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "core/config.h"
#include "core/free_port.h"
#include "models/registry.h"
#include "parallel/thread_group.h"
#include "runtime/executor.h"
#include "schedules/generators.h"
#include "schedules/measure.h"

namespace trident::bench {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// fp32 n^3 matmuls on `threads` threads: the best rate of several.
double matmul_rate(int threads, int64_t n) {
  const int before = at::get_num_threads();
  at::set_num_threads(threads);
  at::Tensor a = at::randn({n, n}), b = at::randn({n, n});
  at::mm(a, b);  // warm-up
  const int reps = static_cast<int>(std::max<int64_t>(1, (1024 / n) * (1024 / n) * (1024 / n)));
  double best = 0;
  for (int i = 0; i < 8; ++i) {
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) at::mm(a, b);
    best = std::max(best, 2.0 * n * n * n * reps / since(t0));
  }
  at::set_num_threads(before);
  return best;
}

// a += b over tensors much larger than the caches: reads a and b, writes a.
double memory_rate() {
  const int64_t n = 16 << 20;  // floats: 64 MiB each
  at::Tensor a = at::ones({n}), b = at::ones({n});
  a.add_(b);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    a.add_(b);
    best = std::max(best, 3.0 * n * 4 / since(t0));
  }
  return best / 1e9;
}

double host_memory_gib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return kib / (1024.0 * 1024.0);
    in.ignore(256, '\n');
  }
  return 0;
}

// One kind at one size on every rank. NOTE [back-to-back calls] A rank leaves
// a barrier up to a scheduler tick after its peer on a loaded machine, so a
// single call timed after one measures that skew, not the transfer: each of
// three rounds makes one untimed call (which absorbs it) and then times
// `repeats` calls back to back; rank 0 keeps the median round's mean.
void time_comm(Group& g, const std::string& kind, int64_t bytes, int repeats, std::vector<CommTiming>& out) {
  const int n = g.size();
  const int64_t elems = std::max<int64_t>(1, bytes / 4 / (kind == "all_gather" ? n : 1));
  at::Tensor t = at::ones({elems});
  std::vector<at::Tensor> gathered;
  auto once = [&] {
    if (kind == "all_reduce") {
      all_reduce(g, t);
    } else if (kind == "all_gather") {
      all_gather(g, t, gathered);
    } else if (g.rank == 0) {  // p2p: a ping-pong with rank 1, half the round trip
      wait_work(g, isend(g, t, 1, 0), "send", 1);
      wait_work(g, irecv(g, t, 1, 1), "recv", 1);
    } else if (g.rank == 1) {
      wait_work(g, irecv(g, t, 0, 0), "recv", 0);
      wait_work(g, isend(g, t, 0, 1), "send", 0);
    }
  };
  std::vector<double> rounds;
  for (int round = 0; round < 3; ++round) {
    barrier(g);
    once();
    const auto t0 = Clock::now();
    for (int i = 0; i < repeats; ++i) once();
    rounds.push_back(since(t0) / repeats / (kind == "p2p" ? 2 : 1));
  }
  if (g.rank == 0) out.push_back({kind, static_cast<double>(elems * 4 * (kind == "all_gather" ? n : 1)), median(rounds)});
}

// NOTE [null stage] A stage whose forward is one multiplication of a
// (mbs, 4) tensor by a one-element parameter: its F and B through the real
// executor (autograd, the boundary transfers posted around them, the
// timeline record) cost what every pipeline action costs beyond its
// arithmetic, which the cluster file calls the action overhead.
class NullStage : public Stage {
 public:
  NullStage(bool first, bool last) : first_(first), last_(last) {
    Param p;
    p.info.name = "w";
    p.info.full_shape = {1};
    p.tensor = at::ones({1}).requires_grad_(true);
    params_.push_back(p);
  }
  at::Tensor forward(const at::Tensor& input, const at::Tensor&) override {
    at::Tensor y = (first_ ? input.to(at::kFloat) : input) * params_[0].tensor;  // (mbs, 4)
    return last_ ? y.mean() : y;
  }
  std::vector<int64_t> input_shape(int64_t mbs) const override { return {mbs, 4}; }
  std::vector<int64_t> output_shape(int64_t mbs) const override { return {mbs, 4}; }
  std::vector<Param>& params() override { return params_; }

 private:
  bool first_, last_;
  std::vector<Param> params_;
};

// NOTE [busy link] What a pipeline transfer costs as training sees it: two
// ranks run 1f1b through the real executor on stages that each keep their
// core busy the way a small model's layers do (64 layers of a 64 x 64 matmul
// and a GELU: small operators, host-bound), and the latency is measured from
// their timelines as the trainer measures it (NOTE [measured link latency] in
// schedules/measure.h). On a host whose ranks share its cores this is mostly
// the time for the receiving rank's communication thread to be scheduled,
// which back-to-back ping-pongs between idle ranks do not see.
//
// NOTE [shared compute] The same stage alone (one rank, nothing exchanged)
// computes faster than in that pipeline when the ranks and their
// communication threads share the machine (two vCPUs that are hyperthreads of
// one core, a shared cache, a lower clock when both work): the ratio of the
// pipeline's mean F + B per micro-batch to the lone stage's is how much
// slower each rank computes, which the cluster file turns into devices' worth
// of compute per node.
class BusyStage : public Stage {
 public:
  BusyStage(bool first, bool last) : first_(first), last_(last) {
    Param w;
    w.info.name = "w";
    w.info.full_shape = {1};
    w.tensor = at::ones({1}).requires_grad_(true);
    params_.push_back(w);
    for (int i = 0; i < kLayers; ++i) {
      Param a;
      a.info.name = "a" + std::to_string(i);
      a.info.full_shape = {kN, kN};
      a.tensor = (at::randn({kN, kN}) * 0.1).requires_grad_(true);
      params_.push_back(a);
    }
    h_ = at::randn({kN, kN});
  }
  at::Tensor forward(const at::Tensor& input, const at::Tensor&) override {
    at::Tensor y = (first_ ? input.to(at::kFloat) : input) * params_[0].tensor;  // (mbs, 4)
    at::Tensor z = h_;
    for (int i = 1; i <= kLayers; ++i) z = at::gelu(at::mm(z, params_[static_cast<size_t>(i)].tensor));
    y = y + z.sum() * 0.0;  // the busy part
    return last_ ? y.mean() : y;
  }
  std::vector<int64_t> input_shape(int64_t mbs) const override { return {mbs, 4}; }
  std::vector<int64_t> output_shape(int64_t mbs) const override { return {mbs, 4}; }
  std::vector<Param>& params() override { return params_; }

 private:
  static constexpr int64_t kN = 64;
  static constexpr int kLayers = 64;
  bool first_, last_;
  std::vector<Param> params_;
  at::Tensor h_;
};

struct BusyPipeline {
  sched::LinkLatency latency;
  double slowdown = 1;  // NOTE [shared compute]
};

BusyPipeline busy_pipeline() {
  const int m = 8, steps = 8;
  // The ranks of `schedule` (1f1b); each sends back its recordings, one per step, each ended by a line "end".
  auto run = [&](const sched::Schedule& schedule) {
    const int ranks = schedule.pipeline_ranks;
    const std::vector<std::string> texts = run_process_group("pp", ranks, std::chrono::milliseconds(120000), [&](Group& pp) {
      BusyStage stage(pp.rank == 0, pp.rank == ranks - 1);
      Executor exec({&stage}, pp, schedule.stage_map(), 1);
      auto batch = [](int) { return MicroBatch{at::ones({1, 4}, at::kLong), at::zeros({1, 4}, at::kLong)}; };
      std::string out;
      for (int step = -2; step < steps; ++step) {
        exec.run(schedule.ranks[static_cast<size_t>(pp.rank)], batch, 1.0);
        for (Param& p : stage.params()) p.tensor.mutable_grad() = at::Tensor();
        if (step >= 0) out += sched::to_text(sched::RankRecording{pp.rank, 0.0, exec.timeline(), {}}) + "end\n";
      }
      return out;
    });
    std::vector<std::vector<sched::RankRecording>> rec(steps);
    for (int r = 0; r < ranks; ++r) {
      std::istringstream in(texts[static_cast<size_t>(r)]);
      std::string line, one;
      size_t step = 0;
      while (std::getline(in, line)) {
        if (line != "end") {
          one += line + "\n";
          continue;
        }
        if (step < rec.size()) rec[step++].push_back(sched::recording_from_text(one, r));
        one.clear();
      }
      if (step != rec.size())
        throw std::runtime_error("plan calibrate: busy pipeline: rank " + std::to_string(r) + " sent " +
                                 std::to_string(step) + " of " + std::to_string(steps) + " steps");
    }
    return rec;
  };
  auto compute_per_mb = [&](const std::vector<std::vector<sched::RankRecording>>& rec) {
    double us = 0;
    int mbs = 0;
    for (const auto& step : rec)
      for (const sched::RankRecording& r : step) {
        for (const sched::TimedAction& a : r.actions)
          if (sched::is_compute(a.action.kind)) us += a.end - a.start;
        mbs += m;
      }
    return us / mbs;
  };
  BusyPipeline out;
  const sched::Schedule schedule = sched::generate("1f1b", 2, m, 1);
  const auto alone = run(sched::generate("1f1b", 1, m, 1));
  const auto two = run(schedule);
  std::vector<sched::Timeline> timelines;
  for (const auto& step : two) timelines.push_back(sched::to_timeline(step, m, 1));
  out.latency = sched::measured_link_latency(schedule, timelines, 0.05);  // ms; the trainer's 50 us idle threshold
  out.slowdown = std::max(1.0, compute_per_mb(two) / compute_per_mb(alone));
  return out;
}

// NOTE [busy link], for collectives: two ranks each run a 256^3 matmul and then a 16 KiB all-reduce
// or all-gather (a tensor-parallel layer's pattern), 30 times each per round, the two kinds in the
// same round so that they see the same load; the same matmuls alone, timed in the round too, are
// subtracted. Medians of 9 rounds, rank 0's clock. The all-reduce is two ring steps and the
// all-gather one: their difference is a busy step's time, the rest a call's. The same all-reduce of
// a larger message (4 MiB) gives the bandwidth between computing ranks: on this kind of host a
// large message crosses in pieces, each waiting for the other rank's communication thread to be
// scheduled, so back-to-back timings between idle ranks put a 2 MiB all-reduce at about half of
// what it takes between computing ones.
std::pair<double, double> busy_collectives_us(int64_t bytes) {
  const int ranks = 2, reps = 30, rounds = 9;
  const std::vector<std::string> texts = run_process_group("tp", ranks, std::chrono::milliseconds(120000), [&](Group& g) {
    const at::Tensor a = at::randn({256, 256}), b = at::randn({256, 256});
    at::Tensor whole = at::ones({bytes / 4}), part = at::ones({bytes / 4 / ranks});
    std::vector<at::Tensor> gathered;
    at::Tensor sink = at::zeros({256, 256});
    auto compute = [&] { sink.add_(at::mm(a, b)); };
    auto timed = [&](const std::function<void()>& call) {
      barrier(g);
      const auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i) {
        compute();
        call();
      }
      return since(t0);
    };
    std::vector<double> ar, ag;
    for (int round = -1; round < rounds; ++round) {
      const double alone = timed([] {});
      const double reduce = timed([&] { all_reduce(g, whole); });
      const double gather = timed([&] { all_gather(g, part, gathered); });
      if (round >= 0) ar.push_back((reduce - alone) / reps), ag.push_back((gather - alone) / reps);
    }
    return std::to_string(median(ar)) + " " + std::to_string(median(ag));
  });
  std::istringstream in(texts[0]);
  double ar = 0, ag = 0;
  in >> ar >> ag;
  return {std::max(0.0, ar) * 1e6, std::max(0.0, ag) * 1e6};
}

double action_overhead_us(int ranks) {
  const int m = 8, steps = 10;
  const sched::Schedule schedule = sched::generate("1f1b", ranks, m, 1);
  std::vector<double> per_rank(static_cast<size_t>(ranks), 0.0);
  const std::vector<std::string> errors = run_thread_group("pp", ranks, std::chrono::milliseconds(120000), [&](Group& pp) {
    NullStage stage(pp.rank == 0, pp.rank == ranks - 1);
    Executor exec({&stage}, pp, schedule.stage_map(), 1);
    auto batch = [](int) { return MicroBatch{at::ones({1, 4}, at::kLong), at::zeros({1, 4}, at::kLong)}; };
    double us = 0;
    int count = 0;
    for (int step = -2; step < steps; ++step) {
      exec.run(schedule.ranks[static_cast<size_t>(pp.rank)], batch, 1.0);
      if (step < 0) continue;  // warm-up
      for (const auto& a : exec.timeline())
        if (sched::is_compute(a.action.kind)) us += a.end - a.start, ++count;
    }
    per_rank[static_cast<size_t>(pp.rank)] = us / count;
  });
  for (int r = 0; r < ranks; ++r)
    if (!errors[static_cast<size_t>(r)].empty())
      throw std::runtime_error("plan calibrate: action overhead, rank " + std::to_string(r) + ": " +
                               errors[static_cast<size_t>(r)]);
  double sum = 0;
  for (double x : per_rank) sum += x;
  return sum / ranks;
}

// NOTE [layer overhead] A transformer layer of hidden 8, 2 heads, FFN 16,
// sequence 8 and one sample has next to no arithmetic (about 20 kFLOP per
// pass), so its time is what every layer costs the host regardless of size:
// dispatching its operators and building and walking its autograd graph.
// Timed as the middle stage of a 3-stage split with 1 and with 5 layers; the
// difference over 4 layers leaves the stage's own cost out (the action
// overhead measures that). Medians of 30 passes: the runs it predicts see
// the machine's load too.
Calibration::Layer layer_overhead(const std::string& arch, int threads) {
  const int before = at::get_num_threads();
  at::set_num_threads(threads);
  auto time = [&](int64_t k) {
    Config cfg;
    cfg.model.arch = arch;
    cfg.model.layers = k + 2, cfg.model.hidden = 8, cfg.model.heads = 2, cfg.model.ffn_hidden = 16;
    cfg.model.seq_len = 8, cfg.model.vocab_size = 16, cfg.model.vocab_pad_multiple = 1;
    cfg.parallel.pipeline_layers = {1, k, 1};
    cfg.schedule.chunks = 3;  // three stages on one rank: the middle one is timed
    const std::unique_ptr<Stage> stage = make_model(cfg)->make_stage(1, 3, TpContext{}, 1);
    const at::Tensor x = at::randn({1, cfg.model.seq_len, cfg.model.hidden});
    std::vector<double> f, b;
    for (int r = -3; r < 30; ++r) {
      at::Tensor in = x.clone().requires_grad_(true);
      const auto t0 = Clock::now();
      at::Tensor out = stage->forward(in, at::Tensor());
      const double tf = since(t0);
      const auto t1 = Clock::now();
      out.backward(at::ones_like(out));
      const double tb = since(t1);
      for (Param& p : stage->params()) p.tensor.mutable_grad() = at::Tensor();
      if (r >= 0) f.push_back(tf), b.push_back(tb);
    }
    return std::pair<double, double>{median(f), median(b)};
  };
  const auto one = time(1), five = time(5);
  at::set_num_threads(before);
  return {std::max(0.0, (five.first - one.first) / 4 * 1e6), std::max(0.0, (five.second - one.second) / 4 * 1e6)};
}

}  // namespace

Calibration calibrate(const CalibrateOptions& o) {
  if (o.ranks < 2) throw std::runtime_error("plan calibrate: --ranks " + std::to_string(o.ranks) + ": expected >= 2");
  if (o.repeats < 1) throw std::runtime_error("plan calibrate: --repeats " + std::to_string(o.repeats) + ": expected >= 1");
  if (o.threads < 1) throw std::runtime_error("plan calibrate: --threads " + std::to_string(o.threads) + ": expected >= 1");
  if (o.max_bytes < 4096)
    throw std::runtime_error("plan calibrate: largest message " + std::to_string(o.max_bytes) +
                             " bytes: expected >= 4096 (two sizes from 1 KiB)");
  Calibration c;
  c.cores = static_cast<int>(std::thread::hardware_concurrency());
  c.host_memory_gib = host_memory_gib();
  std::vector<int64_t> sizes;
  for (int64_t b = 1024; b <= o.max_bytes; b *= 4) sizes.push_back(b);
  // Rank processes, as in training (the kernel schedules their threads against each other); rank 0
  // sends back one line "kind bytes seconds" per timing. Forked first, before this process has threads.
  const std::vector<std::string> texts =
      run_process_group("calibrate", o.ranks, std::chrono::milliseconds(120000), [&](Group& g) {
        std::vector<CommTiming> comm;
        for (const char* kind : {"all_reduce", "all_gather", "p2p"})
          for (int64_t b : sizes) time_comm(g, kind, b, o.repeats, comm);
        std::ostringstream os;
        os.precision(17);
        for (const CommTiming& t : comm) os << t.kind << " " << t.bytes << " " << t.seconds << "\n";
        return os.str();
      });
  std::istringstream rows(texts[0]);
  CommTiming t;
  while (rows >> t.kind >> t.bytes >> t.seconds) c.comm.push_back(t);
  {  // NOTE [busy link]
    const BusyPipeline pipe = busy_pipeline();
    const sched::LinkLatency& busy = pipe.latency;
    c.concurrent_slowdown = pipe.slowdown;
    if (busy.links == 0)
      throw std::runtime_error("plan calibrate: the busy pipeline's link latency could not be measured (no receive "
                               "waited); rerun, or lower the machine's load");
    c.pipeline_latency_us = busy.mean * 1000.0;
    c.pipeline_latency_samples = busy.samples;
    c.busy_collective_bytes = 16384;
    const auto [ar, ag] = busy_collectives_us(16384);
    c.busy_collective_us = ar;
    c.busy_all_gather_us = ag;
    const int64_t large = std::min<int64_t>(o.max_bytes, int64_t{4} << 20);
    if (large > 16384) {
      c.busy_large_bytes = static_cast<double>(large);
      c.busy_large_all_reduce_us = busy_collectives_us(large).first;
    }
  }
  // From here on this process runs threads (intra-op pools, thread groups).
  c.matmul_flops = matmul_rate(o.threads, 1024);
  for (int64_t n : {64, 128, 256, 512}) c.small_matmuls.push_back({static_cast<double>(n), matmul_rate(o.threads, n)});
  c.memory_gbs = memory_rate();
  c.action_overhead_us = action_overhead_us(o.ranks);
  c.gpt_layer = layer_overhead("gpt", o.threads);
  c.llama_layer = layer_overhead("llama", o.threads);
  return c;
}

}  // namespace trident::bench
