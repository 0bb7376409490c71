// Simulator: runs a schedule under the executor semantics with per-action costs
// and link latency, giving per-rank timelines, step time, bubble and peak
// in-flight activations. Measured timelines use the same Timeline struct.
#pragma once

#include <vector>

#include "schedules/action.h"

namespace trident::sched {

// Costs of one virtual stage as they are (one chunk: not divided by v), for
// example what a run measured on it.
struct StageCosts {
  double forward = 1.0, backward = 2.0, weight = 1.0;  // F, B (= I + W), W
  double expert_comm = 0.0;  // of F's time, and of B's (I's), the all-to-alls' (Costs::expert_comm)
};

// Costs of one FULL pipeline stage (all layers of one rank); a chunk of a
// v-chunk schedule costs 1/v of each. I costs backward - weight.
struct Costs {
  double forward = 1.0;         // F
  double backward = 2.0;        // B (I + W)
  double weight = 1.0;          // W, the weight-gradient part of B
  std::vector<double> latency;  // per boundary: {} = 0, {L} = L everywhere, or p*v-1 values (boundary s -> s+1)
  // Per virtual stage: {} = all 1, or p*v multipliers of that stage's F, B, W
  // (an imbalanced split: the stage with the head costs more).
  std::vector<double> stage_scale;
  // Per virtual stage: {} = the above for every stage, or p*v entries, each
  // stage's own F, B, W used as given (not divided by v): stages need not share
  // one F:B:W ratio (a run's measured stages do not). Excludes stage_scale.
  std::vector<StageCosts> stage_costs;
  // The part of F's time, and of B's (and so I's), that its MoE layers' all-to-alls take
  // (dispatch and combine; exposed when the action runs alone), per full stage
  // like F, B, W; 0 without expert parallelism. Only an overlapped pair reads
  // it (NOTE [overlapped pairs] in schedules/overlap.h): F and B alone cost
  // what forward and backward say.
  double expert_comm = 0.0;
};

// Throws ScheduleError unless forward > 0, backward > weight >= 0,
// 0 <= expert_comm <= min(forward, backward - weight) (each stage's too), latency
// has 0, 1 or p*v-1 non-negative entries, stage_scale 0 or p*v positive
// ones, stage_costs 0 or p*v entries with F > 0 and B > W >= 0 (and not
// together with stage_scale).
void check_costs(const Costs& c, int p, int v);
// F = I = W = 1, B = 2 per action of a schedule with `chunks` chunks per rank
// (a full stage's costs are v times an action's), no latency.
inline Costs unit_costs(int chunks) {
  Costs c;
  c.forward = chunks, c.backward = 2.0 * chunks, c.weight = chunks;
  return c;
}
double action_cost(const Costs& c, ActionKind k, int chunks);  // 0 for communication and REDUCE_GRAD; per-stage terms not applied
// Cost of kind k on virtual stage `stage`, every term applied (0 for communication and REDUCE_GRAD).
double stage_action_cost(const Costs& c, ActionKind k, int chunks, int stage);
// The all-to-all part of an F, B or I on virtual stage `stage` (expert_comm, every term applied).
double stage_expert_comm(const Costs& c, int chunks, int stage);
// What an overlapped pair of an F costing f and a B or I costing b, with
// all-to-all parts af and ab, takes (NOTE [overlapped pairs]).
double overlapped_pair_cost(double f, double af, double b, double ab);

struct TimedAction {
  Action action;
  double start = 0;  // for a RECV: when it was posted; end: when its data arrived
  double end = 0;
};

struct Timeline {
  int pipeline_ranks = 1, microbatches = 1, chunks = 1;  // p, m, v
  double us_per_unit = 1000.0;  // microseconds per time unit (simulated: 1 unit = 1 ms)
  std::vector<std::vector<TimedAction>> ranks;  // per rank, in execution order
};

struct TimelineStats {
  double step_time = 0;             // latest end over all ranks (all start at 0)
  double bubble_fraction = 0;       // total idle / (p * step_time); idle = step - compute busy
  // The zero-bubble papers' accounting (Qi et al., ICLR 2024, Table 5: "cost" is the
  // longest stage's time): 1 - total busy / (p * the longest span from a rank's
  // first compute start to its last compute end). Ranks that start late are not
  // idle before their first action: with optimizer post-validation the next
  // step's fill overlaps this one's drain. Equals bubble_fraction when one rank
  // spans the whole step (1F1B, ZB-H1); lower for a parallelogram (ZB-H2).
  double span_bubble_fraction = 0;
  std::vector<double> busy;         // per rank: time in compute actions (overlapping boxes counted once)
  std::vector<int> peak_inflight;   // per rank: max (mb, chunk) pairs alive, from F until its B or I
  std::vector<double> first_start;  // per rank: start of its first compute action
  std::vector<double> end;          // per rank: end of its last action
};

// Validates s (throws like validate()), adds communication if s has none, runs
// it, and records every action's times. Validates once.
Timeline simulate(const Schedule& s, const Costs& costs);
// The same run without a timeline: only the figures, in time and memory
// linear in the actions and nothing stored per action (for planners).
TimelineStats simulate_stats(const Schedule& s, const Costs& costs);
TimelineStats stats(const Timeline& t);
// span_bubble_fraction from per-rank busy time, first compute start (< 0: the
// rank computes nothing) and last compute end.
double span_bubble(const std::vector<double>& busy, const std::vector<double>& first, const std::vector<double>& last);

}  // namespace trident::sched
