// Balanced pipeline split (pure): how many consecutive layers each virtual
// stage gets so that the slowest stage is as fast as possible.
#pragma once

#include <vector>

namespace trident::sched {

// Contract:
// - layer_costs[i] > 0 is layer i's forward+backward time for one micro-batch
//   (any unit; measured by a profiling pass or estimated from FLOPs);
// - embedding_cost, head_cost >= 0 are the extra times of the first virtual
//   stage (token/position embedding) and of the last (final norm, LM head
//   and loss), in the same unit;
// - virtual_stages = p * v, in model order (stage s runs layers after stage
//   s-1's; where each stage runs is the placement's business, see
//   stages_of_rank() in action.h).
// Returns layers per virtual stage (each >= 1, summing to the layer count)
// minimising max over stages of (its layers' costs + its extra), exactly
// (dynamic programme over split points, O(stages * layers^2)). Among equally
// good splits it gives earlier stages fewer layers: under 1F1B-like schedules
// they hold more micro-batches' activations.
// Throws ScheduleError when virtual_stages < 1, there are fewer layers than
// stages, or a cost is not finite and positive (extras: non-negative).
std::vector<int> balanced_split(const std::vector<double>& layer_costs, double embedding_cost, double head_cost,
                                int virtual_stages);

// Each virtual stage's cost under a split (layers' costs plus the extras):
// what Costs::stage_scale takes to simulate that split. Throws if the split
// does not cover the layers.
std::vector<double> split_stage_costs(const std::vector<double>& layer_costs, double embedding_cost, double head_cost,
                                      const std::vector<int>& layers_per_stage);

}  // namespace trident::sched
