// What the trainer measures of its pipeline every step: the bubble (the
// simulator's definition, idle / (p x step) over one pipeline's ranks) and
// each stage's busy time; the means that let the simulator predict the run;
// and, for logging.trace, one step's recordings gathered to rank 0.
#pragma once

#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "parallel/process_groups.h"
#include "runtime/executor.h"
#include "runtime/idle_attribution.h"
#include "schedules/measure.h"

namespace trident {

// Collective over the pipeline group (every pipeline rank calls it each step,
// after its gradient sync, which took `sync_s`): gathers every rank's
// RankStep and attributes the idle time (NOTE [idle attribution] in
// idle_attribution.h). `experts_s`: this rank's time in the experts'
// all-to-alls this step, -1 without expert parallelism (then on every rank).
PipelineStep measure_pipeline_step(const Group& pp, const Executor& exec, const sched::Schedule& schedule, double sync_s,
                                   double experts_s = -1);

// What the simulator needs to predict the run: this rank's compute times per
// chunk and kind, accumulated over steps, and a few steps' recordings of the
// whole pipeline for the link latency (NOTE [measured link latency] in
// schedules/measure.h); combined over the pipeline by predict().
class CostAccumulator {
 public:
  void add(const Executor& exec, int chunks);
  // Collective over pp for the first kLatencySteps calls, then a no-op:
  // gathers this step's recordings to the pipeline's first rank.
  void add_latency_sample(const Group& pp, const Executor& exec);
  static constexpr int kLatencySteps = 8;
  // Collective over pp. On the pipeline's first rank, the simulator's
  // prediction for `schedule` with each virtual stage's own mean F, B, I, W
  // and the measured latency of each link; elsewhere empty stats.
  sched::TimelineStats predict(const Group& pp, const sched::Schedule& schedule);
  sched::Costs costs;             // filled by predict() on the first rank: what it simulated (ms)
  sched::LinkLatency latency;     // ditto: the links' latency (ms)
  double mean_ms[4] = {0, 0, 0, 0};  // ditto: pipeline-wide mean F, B, I, W per chunk (ms), for the summary

 private:
  std::vector<sched::KindSums> chunk_;         // [chunk], ms
  std::vector<sched::Timeline> latency_steps_;  // pipeline's first rank: ranks' own clocks, ms
  int latency_calls_ = 0;
};

// Every rank of `g` sends `mine`; group rank 0 gets all of them in group
// order, the others an empty vector.
std::vector<std::string> gather_strings(const Group& g, const std::string& mine);

}  // namespace trident
