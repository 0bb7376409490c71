// Training entry point: config -> layout -> process groups -> model stages ->
// schedule -> the step loop. Torch-free header so command-line code stays light.
#pragma once

#include <vector>

#include "core/config.h"
#include "metrics/metrics.h"

namespace trident {

struct TrainSummary {
  std::vector<StepMetrics> steps;  // every rank gets the same losses and norms
  int64_t local_params = 0;        // parameters held by this rank (a tied copy counts)
  int64_t model_params = 0;        // the model's unique parameter count
  double peak_flops = 0;           // per-device peak FLOP/s used for MFU
  int peak_inflight = 0;           // most micro-batches with live activations on this rank
  int64_t optimizer_state_bytes = 0;  // AdamW state on this rank
  // The pipeline's first rank: each virtual stage's mean F, B (I + W) and W time per micro-batch, ms,
  // over the steps after the first (what the simulator's prediction in the run's report used).
  std::vector<double> stage_forward_ms, stage_backward_ms, stage_weight_ms;
  // SIGTERM or SIGUSR1 when the run was preempted (NOTE [preemption] in
  // framework/checkpointing.cpp), and the step its checkpoint holds; 0 otherwise.
  int preempted_signal = 0;
  int64_t preempted_step = 0;
};

// Runs training for this process's rank (read from the environment). Rank 0
// prints and writes the run directory. Throws on any error.
TrainSummary train(Config cfg);

}  // namespace trident
