// Overlapped forward-backward pairs: where a schedule runs the forward of one
// micro-batch together with the backward of another, so that each one's
// expert all-to-alls run under the other's compute.
#pragma once

#include "schedules/action.h"

namespace trident::sched {

// NOTE [overlapped pairs]
// An F flagged kOverlapNext and the B or I right after it in its rank's list (another
// micro-batch, or another chunk) are one pair: the executor starts both once both inputs are in
// and runs them together, the forward on a second thread, each issuing its all-to-alls on a
// communicator of its own (forward ones on the expert-parallel group, backward ones on its twin:
// see NOTE [two expert groups] in parallel/expert_parallel.h), so that while one waits in an
// all-to-all the other computes. This is DeepSeek-V3's forward-backward overlap and
// Megatron-Core's combined 1F1B, as a property of the action list: any schedule kind can carry
// pairs, zero-bubble ones included (an F with an I; the W stays deferred). The numbers computed
// are the same bit for bit: a backward adds its micro-batch's gradients in the list's order as
// before, and a forward reads only the parameters, which no backward changes. The validator runs
// a pair as its actions in list order with one rule more: the F waits for its partner's input
// too (the engine, and the stream run of NOTE [pair order]), so a list whose pairs would deadlock
// is refused. The simulator prices a pair with overlapped_pair_cost() (simulate.h) from
// Costs::expert_comm, the all-to-alls' share of F and B.
// NOTE [making overlapped pairs]
// overlap_pairs() makes the pairs from a generated list, compute-only (then placed by
// place_communication(), like any) or placed: each backward and the first forward after it (with
// only W and communication between them), the forward moved up to run with it. Pairing a forward
// with the backward AFTER it instead chains the ranks: in 1F1B, rank r's pair would wait for the
// gradient that rank r+1 makes from the forward inside rank r's previous pair, and the pipeline
// runs one micro-batch at a time. Moving the forward up is the extra warm-up forward of
// Megatron-Core's combined 1F1B: one more micro-batch's activations held, and the forward's input
// has been there since the step before. Between the two halves of a pair the list holds only
// communication, which the executor posts as one group as soon as the F is done, while the
// backward still runs: the F's own sends (so that the next stage's pair can start; sent after the
// pair, the ranks would take turns again) and whatever the placement passes put there, never the
// partner's input (a pair starts once both inputs are in, so that receive comes before the F).

// `s` (compute-only, or with its communication: generate()'s output) with
// each B or I paired with the first F after it on its rank (another
// micro-batch or chunk; only W and communication between them), where the
// pair keeps the schedule valid; a candidate that would not (validate()
// refuses the list with it) stays as it was, tried one at a time up to
// kMaxDeferActions actions (group_waits.h), beyond which such a list throws
// (and at any size when `one_by_one` is false: a planner pricing thousands of
// layouts takes only lists whose pairs all hold at once). Returns s unchanged
// when it has no candidate. Throws ScheduleError if s is invalid.
Schedule overlap_pairs(const Schedule& s, bool one_by_one = true);

// Overlapped pairs in s.
int count_pairs(const Schedule& s);

}  // namespace trident::sched
