// `trident plan profile`'s measurement of a model: see profile.h.
#include "measure/profile.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/free_port.h"
#include "framework/trainer.h"
#include "models/registry.h"
#include "parallel/thread_group.h"

namespace trident::bench {
namespace {

// The median of `v` (the mean of the middle two when their number is even).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// What one training run of a world of one measured: F, B and W per micro-batch and the step's time
// beyond its actions, ms (train_once).
struct Measured {
  double forward_ms = 0, backward_ms = 0, weight_ms = 0, overhead_ms = 0;
};
// train(cfg) with its output held back, shown only in the error of a failed run.
TrainSummary train_quietly(const Config& cfg) {
  std::ostringstream held;
  std::streambuf* const out = std::cout.rdbuf(held.rdbuf());
  try {
    TrainSummary summary = train(cfg);
    std::cout.rdbuf(out);
    return summary;
  } catch (const std::exception& e) {
    std::cout.rdbuf(out);
    throw std::runtime_error(std::string(e.what()) + "\n--- the trainer's output ---\n" + held.str());
  }
}

// One training run of `cfg` on this process (a world of one), its output held back.
Measured train_once(const Config& cfg, int64_t microbatches) {
  const TrainSummary summary = train_quietly(cfg);
  if (summary.stage_forward_ms.size() != 1 || summary.steps.size() < 3)
    throw std::runtime_error("plan profile: the run left " + std::to_string(summary.steps.size()) +
                             " logged steps and " + std::to_string(summary.stage_forward_ms.size()) +
                             " stage costs; expected >= 3 and 1");
  // Medians over the steps (a burst of other work on the machine lands on one step, not on all): the
  // step's busy time per micro-batch, split into F and B in the proportion of the executor's means.
  std::vector<double> busy, over;
  for (size_t i = 2; i < summary.steps.size(); ++i) {
    busy.push_back(summary.steps[i].stage_busy_s.at(0));
    over.push_back(summary.steps[i].step_time_s - busy.back());
  }
  const double per_mb_ms = 1e3 * median(busy) / static_cast<double>(microbatches);
  const double f = summary.stage_forward_ms[0], b = summary.stage_backward_ms[0];
  Measured m;
  m.forward_ms = per_mb_ms * f / (f + b);
  m.backward_ms = per_mb_ms * b / (f + b);
  m.weight_ms = b > 0 ? m.backward_ms * summary.stage_weight_ms[0] / b : 0.0;
  m.overhead_ms = 1e3 * median(over);
  return m;
}

// One pipelined run of `cfg` (this process is one of its ranks), its output held back: the pipeline's
// busy time per micro-batch, all stages added, the median over the steps after the first two.
double pipeline_busy_ms(const Config& cfg, int64_t microbatches) {
  const TrainSummary summary = train_quietly(cfg);
  std::vector<double> busy;
  for (size_t i = 2; i < summary.steps.size(); ++i) {
    double sum = 0;
    for (double b : summary.steps[i].stage_busy_s) sum += b;
    busy.push_back(sum);
  }
  if (busy.empty()) throw std::runtime_error("plan profile: the pipelined run left fewer than 3 logged steps");
  return 1e3 * median(busy) / static_cast<double>(microbatches);
}

// `cfg` trained on one device (tp = pp = dp = 1, 1f1b) at micro-batch size `mbs`, o.microbatches a
// step, logging every step under `dir`, with nothing saved or evaluated.
Config one_device_config(const Config& cfg, int64_t mbs, const ProfileOptions& o, const std::filesystem::path& dir) {
  Config c = cfg;
  c.parallel.tp = c.parallel.pp = c.parallel.dp = 1;
  c.parallel.zero = 0;
  c.parallel.sequence_parallel = false;
  c.parallel.pipeline_layers.clear();
  c.schedule.kind = "1f1b";
  c.schedule.chunks = 1;
  c.training.micro_batch_size = mbs;
  c.training.global_batch_size = mbs * o.microbatches;
  c.training.steps = o.steps;
  c.training.warmup_steps = std::min<int64_t>(c.training.warmup_steps, o.steps);
  c.training.eval_interval = 0;
  c.checkpoint = CheckpointConfig{};
  c.logging.dir = (dir / ("mbs" + std::to_string(mbs))).string();
  c.logging.log_interval = 1;
  c.logging.progress = false;
  c.logging.trace = false;
  c.logging.tensorboard = false;
  return c;
}

// The one-device training `one_device` as a 2-stage pipeline of two forked processes: their busy
// time per micro-batch added up, the median of o.repeats runs.
double pipelined_busy_ms(const Config& one_device, const ProfileOptions& o) {
  std::vector<double> runs;
  for (int rep = 0; rep < o.repeats; ++rep) {
    HeldPort held = hold_free_port();  // NOTE [held store port]: the forked rank 0 serves on it
    const int port = held.port();
    const std::vector<std::string> out = run_process_group("pp2", 2, std::chrono::milliseconds(600000), [&](Group& g) {
      for (const auto& [k, v] : std::vector<std::pair<const char*, std::string>>{
               {"RANK", std::to_string(g.rank)}, {"LOCAL_RANK", std::to_string(g.rank)}, {"WORLD_SIZE", "2"},
               {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}})
        setenv(k, v.c_str(), 1);
      if (g.rank == 0)
        setenv("TRIDENT_STORE_FD", std::to_string(held.fd()).c_str(), 1);
      else
        unsetenv("TRIDENT_STORE_FD");
      Config c = one_device;
      c.parallel.pp = 2;
      c.logging.dir += "-pp2";
      return std::to_string(pipeline_busy_ms(c, o.microbatches));
    });
    runs.push_back(std::stod(out[0]));
  }
  return median(runs);
}

}  // namespace

std::vector<ProfileRow> measure_profile(const Config& cfg, const std::vector<int64_t>& micro_batches,
                                        const ProfileOptions& o) {
  if (o.steps < 3) throw std::runtime_error("plan profile: --steps " + std::to_string(o.steps) + ": expected >= 3");
  if (o.microbatches < 1)
    throw std::runtime_error("plan profile: --microbatches " + std::to_string(o.microbatches) + ": expected >= 1");
  if (micro_batches.empty()) throw std::runtime_error("plan profile: no micro-batch size given");
  if (o.repeats < 1) throw std::runtime_error("plan profile: --repeats " + std::to_string(o.repeats) + ": expected >= 1");
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("trident-profile-" + std::to_string(::getpid()));
  auto one_device = [&](int64_t mbs) { return one_device_config(cfg, mbs, o, dir); };
  for (int64_t mbs : micro_batches)
    if (mbs < 1) throw std::runtime_error("plan profile: micro-batch size " + std::to_string(mbs) + ": expected >= 1");
  // NOTE [shared compute], for this model: the same training as a 2-stage pipeline of two processes
  // (forked first, while this process has no threads of its own), each stage's median busy time per
  // micro-batch added up, `repeats` times; the one-device figure below divides it.
  std::map<int64_t, double> pipelined;
  for (int64_t mbs : micro_batches) pipelined[mbs] = pipelined_busy_ms(one_device(mbs), o);
  std::vector<ProfileRow> rows;
  for (int64_t mbs : micro_batches) {
    Config c = one_device(mbs);
    ProfileRow row;
    row.micro_batch = mbs;
    // The four runs (recompute none, selective, full; zb-h1) `repeats` times, interleaved so that a slow
    // spell of the machine lands on one repetition of each rather than on every run of one; per figure
    // the median of its repetitions.
    const char* modes[4] = {"none", "selective", "full", "none"};
    std::vector<double> f, b[3], over, split_b, split_w;
    for (int rep = 0; rep < o.repeats; ++rep)
      for (int k = 0; k < 4; ++k) {
        c.training.recompute = modes[k];
        c.schedule.kind = k == 3 ? "zb-h1" : "1f1b";  // k = 3: B as I and W, each its own action
        const Measured m = train_once(c, o.microbatches);
        if (k == 3) {
          split_b.push_back(m.backward_ms);
          split_w.push_back(m.backward_ms > 0 ? m.weight_ms / m.backward_ms : 0.0);
          continue;
        }
        b[k].push_back(m.backward_ms);
        if (k == 0) f.push_back(m.forward_ms), over.push_back(std::max(0.0, m.overhead_ms));
      }
    row.forward_ms = median(f);
    for (int k = 0; k < 3; ++k) row.backward_ms[k] = median(b[k]);
    row.step_overhead_ms = median(over);
    row.split_backward_ratio = median(split_b) / row.backward_ms[0];
    row.weight_share = median(split_w);
    row.pipeline_slowdown = std::max(1.0, pipelined.at(mbs) / (row.forward_ms + row.backward_ms[0]));
    c.training.recompute = "none";
    c.schedule.kind = "1f1b";
    const LayerCosts pieces = make_model(c)->profile(mbs, 3);
    double layers = 0;
    for (double x : pieces.layers) layers += x;
    const double total = layers + pieces.embedding + pieces.head;
    row.embedding_share = pieces.embedding / total;
    row.head_share = pieces.head / total;
    row.layer_share = layers / static_cast<double>(pieces.layers.size()) / total;
    rows.push_back(row);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rows;
}

}  // namespace trident::bench
