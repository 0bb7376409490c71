// A CPU test backend that plays by NCCL's point-to-point rules
// (parallel.backend = "nccl-rules"): Gloo underneath, but Gloo's forgiveness
// taken away, so that a schedule or an executor that would deadlock or swap
// messages under NCCL does so on the CPU too.
//
// NOTE [NCCL rules on the CPU]
// One GPU cannot show multi-rank NCCL behaviour (NCCL refuses two ranks on one device), and
// Gloo forgives what NCCL does not. This backend wraps a Gloo group and changes its send/recv:
//  - Tags are ignored: the k-th send from a to b meets b's k-th receive from a (NCCL's
//    matching); a tensor of another shape is an error, one of the same shape lands silently.
//  - A rank's point-to-point operations run one after another on one "stream" (a worker
//    thread), as on ProcessGroupNCCL's communicator stream: a posted receive holds every later
//    operation of the rank.
//  - A send is done only when its receive has completed (NCCL's rendezvous for large
//    messages: the receiver acknowledges), never buffered.
//  - startCoalescing()/endCoalescing() make one unit of the operations between them: they start
//    together and progress independently, as in one NCCL group kernel; the unit, endCoalescing()'s
//    one Work, is done when all are (the operations themselves return none).
//  - A unit waiting longer than half the group's timeout fails naming this rank and each operation
//    it waits on (peer, direction, place in the pair's sequence): a deadlock is a one-line error.
// NOTE [NCCL collectives on the CPU]
// Collectives are Gloo's, but the output of an out-of-place one (_allgather_base,
// _reduce_scatter_base: ZeRO-1, the TP mappings; alltoall_base: expert parallelism's dispatch
// and combine) is written only when its Work is waited for. Under NCCL that output is defined
// only after the collective's stream event; reading it earlier races, and on the CPU (Gloo's
// thread finishing early) the race would hide: here a missing wait reads the old values every
// time (NOTE [overlapped parameter gather] in parallel/zero_optimizer.h).
#pragma once

#include <chrono>

#include "parallel/backend.h"

namespace trident {

// NOTE [all-to-all order] in schedules/expert_order.h: the name of the next
// all-to-all this thread issues (its micro-batch, layer and part). Under
// nccl-rules every rank of the group compares the names of the call before
// running it, and a mismatch fails on every rank naming both ranks' calls
// (under NCCL the two would be matched by order: wrong rows, or a hang).
// Other backends ignore it. Empty: not checked.
void label_next_collective(std::string what);

c10::intrusive_ptr<CommBackend> make_nccl_rules(c10::intrusive_ptr<CommBackend> gloo, int rank, int size,
                                                std::chrono::milliseconds timeout);

}  // namespace trident
