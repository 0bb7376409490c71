// NCCL's rules for a schedule's point-to-point messages (NOTE [pair order]):
// the check every schedule passes before it runs, and the pass that makes a
// generator's receives follow its senders' order.
#pragma once

#include "schedules/action.h"

namespace trident::sched {

// NOTE [pair order]
// NCCL has no tags: between ranks a and b, a's k-th send to b meets b's k-th receive from a,
// whatever either was meant to carry. The executor runs the communication actions between two
// compute actions of a rank as one group (startCoalescing/endCoalescing: they launch together, so
// a send and a receive of one group never wait for each other), and ProcessGroupNCCL runs a
// rank's groups one after another on one stream, each after the compute before it; a group is
// done when each of its operations has met its partner, and a compute that needs a received
// tensor waits for the group that received it. So a schedule runs under NCCL when
//  1. for every ordered pair (a, b), a's sends to b and b's receives from a are the same
//     sequence of messages (direction, micro-batch, stage), and
//  2. running every rank's groups and computes under the rules above reaches the end of every
//     list (a group whose partner is never posted is a deadlock: a cycle in the graph).
// One stream per rank is stricter than one per pair (the per-pair model's dependency graph is a
// subgraph of this one), so a schedule that passes here also runs with per-pair streams.
// Hand-overs between two chunks of one rank (p = 1, the turn of a V) are local copies, not NCCL's.

// check_pair_order() throws ScheduleError naming the pair and the first
// message that differs, or the ranks of a deadlock and what each waits for.
// It reads explicit communication (a compute-only schedule has none to check;
// validate() checks add_communication() of it) and needs no complete
// schedule: evaluation's forward-only lists are checked with it too.
void check_pair_order(const Schedule& s);

// Moves receives earlier so that every receiver takes a pair's messages in its
// sender's order (rule 1 above): a receive is placed before the earliest
// compute that any later message of the same pair's sequence is consumed by
// (a suffix minimum over the sender's order), never later than where it was.
// Lists whose pairs already agree are returned unchanged. add_communication()
// ends with it, so every generator's schedule and every compute-only file
// gets it; a file with explicit communication is checked as written.
void order_receives(Schedule& s);

}  // namespace trident::sched
