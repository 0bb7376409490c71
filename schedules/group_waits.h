// Where a schedule's sends go so that no compute waits on a send (NOTE [group waits]).
#pragma once

#include "schedules/action.h"
#include "schedules/simulate.h"

namespace trident::sched {

// NOTE [group waits]
// The executor posts the communication between two computes as one group, and a group completes
// as a whole (an NCCL group is one launch; NOTE [pair order]). A compute that needs a tensor
// received in a group therefore also waits for every send of that group, and a send completes
// only when its receiver has posted the matching receive. add_communication() puts each send
// right after the compute that made it; when the next compute waits for a receive of that same
// group and the receiver posts the send's receive only some computes later, the compute waits for
// the peer's computes, although its own input is there. The interleaved list at p = 2 does so in
// every steady-state step: rank 0 runs F2, then waits in B0.1 for rank 1 to reach F2, one forward
// and one backward later. The simulator (simulate.h) lets a compute wait only for its own input,
// so it does not count these waits; grouped_step_time() does (NOTE [coupled sends]).
// NOTE [coupled sends]
// grouped_step_time() runs a list with explicit communication under the executor's rules, in the
// same run that check_pair_order() judges (schedules/stream_run.h): a group starts on its rank's
// stream once the compute before it and the group before it are done, and completes once the
// partner of each of its operations has started; a compute starts once the compute before it and
// the group holding its input are done; a message also takes its link's latency.
// defer_coupled_sends() moves such sends past the compute that would wait for them, into the next
// group, or else posts the receive that such a send waits for one compute earlier on its rank,
// keeping each move that shortens the grouped step, deadlocks nothing and keeps every pair's
// message order (check_pair_order()); only the communication moves, never a compute, so the
// numbers a run computes are unchanged. It is a local search: at p >= 4 some kinds keep waits it
// does not remove (`trident schedule --format summary` prints both steps;
// benchmarks/results/group_waits.txt).

// The step time of `s` (explicit communication) under the rules above, for
// uniform costs F = 1, B = 2, I = 1, W = 1 per action, or the simulator's
// costs and latencies (simulate.h); -1 when the groups deadlock. Hand-overs
// between chunks of one rank are not NCCL operations.
double grouped_step_time(const Schedule& s);
double grouped_step_time(const Schedule& s, const Costs& costs);

// The simulator's figures for `s` (explicit communication, as the executor runs
// it) with the step of the grouped run: step_time = grouped_step_time(s, costs)
// and bubble_fraction = 1 - Σ busy / (p · that step), the compute times
// unchanged. What a run's and `trident bench bubble`'s prediction report, since
// the executor waits for whole groups (the plain simulation would miss those
// waits); the plain figures when the grouped run cannot be timed (a list above
// kMaxDeferActions actions, or one whose groups deadlock).
TimelineStats grouped_stats(const Schedule& s, const Costs& costs);

// `s` with the sends that a compute would wait on moved past it, or their
// receives posted earlier, where that shortens grouped_step_time(); `s` itself
// when it has no communication, or more than kMaxDeferActions actions (the
// search is quadratic). Each try runs the whole list; the tries stop at four
// per group or kMaxDeferWork actions run in all (interleaved at p = 8, m = 64,
// v = 4, about 12,000 actions: 2.2 s on one core, once per rank at start-up).
constexpr size_t kMaxDeferActions = 20000;
constexpr size_t kMaxDeferWork = 50'000'000;
Schedule defer_coupled_sends(const Schedule& s);

// A compute-only schedule made runnable as the executor runs it:
// add_communication(), then defer_coupled_sends().
Schedule place_communication(const Schedule& compute_only);

}  // namespace trident::sched
