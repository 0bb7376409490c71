// parallel.pipeline_layers = "auto": the pipeline split chosen from measured
// layer, embedding and head times (a profiling pass on rank 0 before
// training), minimising the slowest virtual stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/process_groups.h"
#include "schedules/action.h"
#include "models/common/model.h"

namespace trident {

struct AutoSplit {
  std::vector<int64_t> layers;           // per virtual stage, in model order
  std::vector<double> stage_seconds;     // predicted forward + backward per micro-batch
  std::vector<double> uniform_seconds;   // the same for the most even split
  double bubble = 0, uniform_bubble = 0; // simulated on the run's schedule
  std::string describe() const;          // the lines rank 0 prints
};

// Rank 0 profiles `model` (micro-batches of `mbs`), the times are broadcast
// over `world`, and every rank computes the same split for `schedule`.
AutoSplit choose_auto_split(const Model& model, const sched::Schedule& schedule, int64_t mbs, const Group& world);

}  // namespace trident
