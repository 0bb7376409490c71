// The run of a schedule's lists under NCCL's stream rules (NOTE [pair order]
// in pair_order.h) with times (NOTE [coupled sends] in group_waits.h): one run
// serves check_pair_order(), order_receives() and grouped_step_time().
// Internal to schedules/.
#pragma once

#include <vector>

#include "schedules/action.h"
#include "schedules/simulate.h"

namespace trident::sched::detail {

struct TimedRun {
  double step = -1;  // the step's end; -1: the run deadlocks
  struct Group {
    int rank = 0;
    int first = 0, end = 0;  // list positions: its first operation, the compute after it (or the list's end)
    double wait = 0;         // how long its sends held it past its receives
  };
  std::vector<Group> groups;  // rank by rank, in list order
};

// A list with explicit communication run under the rules of NOTE [pair order],
// each compute taking the simulator's cost for `costs` and each message its
// link's latency (nullptr: unit costs F, I, W 1, B 2 per action, no latency);
// message order within a pair is not checked here (check_pair_order does).
TimedRun timed_stream_run(const Schedule& s, const Costs* costs = nullptr);

}  // namespace trident::sched::detail
