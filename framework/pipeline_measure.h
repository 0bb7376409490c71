// What the trainer measures of its pipeline every step: the bubble (the
// simulator's definition, idle / (p x step) over one pipeline's ranks) and
// each stage's busy time; the means that let the simulator predict the run;
// and, for logging.trace, one step's recordings gathered to rank 0.
#pragma once

#include <string>
#include <vector>

#include "parallel/process_groups.h"
#include "schedules/executor.h"
#include "schedules/measure.h"

namespace trident {

struct PipelineStep {
  double bubble = 0;                 // 1 - sum(busy) / (p * span), span = the slowest rank's executor time
  double span_s = 0;                 // that slowest rank's executor time
  std::vector<double> stage_busy_s;  // per pipeline rank: compute time in this step
};

// Collective over the pipeline group (every pipeline rank calls it each step).
PipelineStep measure_pipeline_step(const Group& pp, const Executor& exec);

// Per-kind compute sums of this rank, accumulated over steps, then combined
// over the pipeline to predict the run's step and bubble with the simulator.
class CostAccumulator {
 public:
  void add(const Executor& exec);
  // Collective over pp; returns the simulator's prediction for `schedule`
  // with the pipeline's mean per-kind costs (stages assumed equal: the
  // simulator takes one cost per kind) and no link latency.
  sched::TimelineStats predict(const Group& pp, const sched::Schedule& schedule);
  sched::MeasuredCosts costs;  // filled by predict(): the means it used (ms)

 private:
  double sum_[4] = {0, 0, 0, 0};  // F, B, I, W in ms
  double n_[4] = {0, 0, 0, 0};
};

// Every rank of `g` sends `mine`; group rank 0 gets all of them in group
// order, the others an empty vector.
std::vector<std::string> gather_strings(const Group& g, const std::string& mine);

}  // namespace trident
