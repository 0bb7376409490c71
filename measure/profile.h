// `trident plan profile`'s measurement of one model on this machine: the
// trainer on one device at each micro-batch size, for the planner's measured
// profiles (planner/profile.h). launch/cmd_plan_profile.cpp writes the file.
// What the machine itself does (matmul rate, links) is measure/calibrate.h.
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.h"

namespace trident::bench {

// `trident plan profile`'s measurement of one model at one micro-batch size
// (NOTE [measured profile] in planner/profile.h): the trainer on one device.
struct ProfileRow {
  int64_t micro_batch = 0;
  double forward_ms = 0;                  // the whole model's mean F per micro-batch
  double backward_ms[3] = {0, 0, 0};      // and B, with recompute none, selective, full
  double step_overhead_ms = 0;            // per step beyond the actions (recompute none)
  // B split into I and W (a ZB schedule): its time over the unsplit B's, and W's share of it.
  double split_backward_ratio = 1, weight_share = 0;
  // F + B per micro-batch as a 2-process pipeline (both stages) over the one-device figure.
  double pipeline_slowdown = 1;
  // Shares of the whole in the pieces' times alone (Model::profile): embedding, one layer (the mean), head.
  double embedding_share = 0, layer_share = 0, head_share = 0;
};
struct ProfileOptions {
  int steps = 16;        // trained per measurement; the first 2 are left out of the medians
  int microbatches = 8;  // per step
  int repeats = 3;       // runs of each kind, interleaved; the median of each figure over them
};
// `cfg` with the layout made one device (tp = pp = dp = 1, no ZeRO) and the
// micro-batch sizes given; prints nothing (the trainer's output is held back
// and shown only in the error of a failed run). Throws std::runtime_error.
std::vector<ProfileRow> measure_profile(const Config& cfg, const std::vector<int64_t>& micro_batches,
                                        const ProfileOptions& o);

}  // namespace trident::bench
