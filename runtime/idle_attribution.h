// What a pipeline's ranks did in one step, and the split of each rank's idle
// time into its causes (NOTE [idle attribution]). Pure: the trainer gathers
// the ranks' figures (pipeline_measure.h) and tests hand it timelines whose
// costs and latencies they chose.
#pragma once

#include <vector>

#include "metrics/metrics.h"
#include "schedules/measure.h"
#include "schedules/simulate.h"

namespace trident {

// NOTE [idle attribution] Each pipeline rank's idle time in one step is the slowest rank's
// executor span less the rank's own compute, plus the time it then waits in the data-parallel
// gradient sync. It is split, in this order, with the simulator on the step's real action lists:
//  - inherent: the idle the schedule has with balanced costs (every virtual stage the pipeline's
//    mean F, B, I, W of this step, free transfers), or the stage's idle with its own costs when
//    that is less (the slowest stage of an uneven split waits less than a balanced one);
//  - imbalance: what the stages' own mean costs add to that (free transfers); transfers: the rest
//    of the pipeline idle (point-to-point waits and the executor's own work between actions);
//  - sync: the gradient sync after the pipeline (finish_grad_sync: what the backward did not hide
//    of the DP reduce and the tied embedding's all-reduce, with the wait for the slower peer);
//  - experts (EP only): the time its forwards and backwards spent in the experts' all-to-alls (dispatch,
//    combine, counts, the wait for the EP group's slowest rank), at most its busy time: busy for the
//    pipeline (inside F and B), idle for the device (under NOTE [overlapped pairs] partly beside compute).
// The first two are capped at what was measured: the parts are never negative and add up to the measured
// idle (checked on known timelines: tests/torch_unit/test_idle_attribution.cpp; IdleParts: metrics/metrics.h).

// One pipeline rank's step as measured.
struct RankStep {
  double busy_us = 0;                   // compute time (a pair's overlapping F and B counted once)
  double experts_s = -1;                // time in the experts' all-to-alls; -1 without expert parallelism
  double span_us = 0;                   // its executor span, first action's start to last one's end
  double sync_s = 0;                    // its gradient sync after the pipeline
  std::vector<sched::KindSums> chunks;  // [chunk]: compute time (ms) and count of F, B, I, W
};

// A rank's step from its timeline (us), its span [begin_us, end_us] and its sync.
RankStep rank_step(const std::vector<sched::TimedAction>& timeline, double begin_us, double end_us, int chunks,
                   double sync_s);

struct PipelineStep {
  double bubble = 0;                 // 1 - sum(busy) / (p * span), span = the slowest rank's executor time
  double span_s = 0;                 // that slowest rank's executor time
  std::vector<double> stage_busy_s;  // per pipeline rank: compute time in this step
  std::vector<IdleParts> idle;       // per pipeline rank (NOTE [idle attribution])
};

// The bubble, busy times and idle parts of a pipeline whose rank r ran
// schedule.ranks[r] and measured ranks[r].
PipelineStep attribute_idle(const sched::Schedule& schedule, const std::vector<RankStep>& ranks);

}  // namespace trident
