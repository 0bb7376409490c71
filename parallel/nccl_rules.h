// A CPU test backend that plays by NCCL's point-to-point rules
// (parallel.backend = "nccl-rules"): Gloo underneath, but Gloo's forgiveness
// taken away, so that a schedule or an executor that would deadlock or swap
// messages under NCCL does so on the CPU too.
//
// NOTE [NCCL rules on the CPU]
// One GPU cannot show multi-rank NCCL behaviour (NCCL refuses two ranks on
// one device), and Gloo forgives what NCCL does not. This backend wraps a Gloo
// group and changes its send/recv:
//  - Tags are ignored: the k-th send from a to b meets b's k-th receive from
//    a (NCCL's matching), whatever the caller meant them to carry; a tensor of
//    another shape is an error, one of the same shape lands silently, as under
//    NCCL.
//  - A rank's point-to-point operations run one after another on one
//    "stream" (a worker thread), as ProcessGroupNCCL runs them on one
//    communicator stream: an operation starts when the one before it is done,
//    so a posted receive holds every later operation of the rank.
//  - A send is done only when its receive has completed (NCCL's rendezvous
//    for large messages: the receiver acknowledges), never buffered.
//  - startCoalescing()/endCoalescing() make one unit of the operations
//    between them: they start together and the unit is done when all are
//    (what batch_isend_irecv and ProcessGroupNCCL's groups do); endCoalescing()
//    returns the unit's one Work, the operations themselves return none.
//  - The operations of a unit progress independently (a receive acknowledges
//    as soon as its data is in), as in one NCCL group kernel.
//  - A unit that waits longer than half the group's timeout fails with an
//    error naming this rank and each operation it waits on (peer, direction
//    and place in the pair's sequence): a deadlock becomes a one-line error
//    before the caller's own wait (the whole timeout) gives up.
// Collectives are Gloo's, but the output of an out-of-place one
// (_allgather_base, _reduce_scatter_base: ZeRO-1, the TP mappings;
// alltoall_base: expert parallelism's dispatch and combine) is written
// only when its Work is waited for. Under NCCL that output is defined only
// after the collective's stream event; reading it earlier races, and on the
// CPU (Gloo's thread finishing early) the race would hide: here a missing
// wait reads the old values every time (NOTE [overlapped parameter gather]
// in parallel/zero_optimizer.h).
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
