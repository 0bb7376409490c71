// Expert parallelism: the routed rows of an MoE layer moved to the ranks
// that hold their experts and back, by all-to-all over the expert-parallel
// group (NOTE [expert grid] in parallel/layout.h), as autograd operations.
// The all-to-all token dispatcher (parallel/token_dispatcher.h) calls them
// between its permutation and its unpermutation; everything else of the
// layer is the same at every ep.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "parallel/process_groups.h"

namespace trident {

// NOTE [two expert groups]
// A forward's all-to-alls go over `group`, a backward's over `backward_group`
// (the same ranks, a communicator of its own; the autograd op keeps both). In
// an overlapped pair (NOTE [overlapped pairs] in schedules/overlap.h) one
// thread runs a forward while another runs a backward, so the order in which
// the two issue their all-to-alls differs from rank to rank; on one group
// rank 0's forward exchange could meet rank 1's backward one (NCCL matches
// collectives by order only). On two groups each keeps one order on every
// rank of the EP group: the forwards' in list order and layer order, the
// backwards' in list order and reverse layer order. Null backward_group:
// `group` for both (a caller that never overlaps).
struct EpContext {
  const Group* group = nullptr;  // the expert-parallel group; null means ep = 1
  // parallel.moe_dispatcher = "allgather": tokens gathered, outputs reduce-scattered
  // (NOTE [all-gather dispatch] in parallel/token_dispatcher.cpp) instead of the all-to-alls.
  bool allgather = false;
  const Group* backward_group = nullptr;  // NOTE [two expert groups]
  int layer = -1;  // the model layer calling (names its all-to-alls: NOTE [all-to-all order])
  // NOTE [experts under tensor parallelism] in parallel/token_dispatcher.h: the dense tp group,
  // over which the layer's input is whole on every rank (null: tp = 1); within it the etp
  // ranks splitting each expert along its width (null: etp = 1, whole experts; the tp group
  // itself at etp = tp), and the tp / etp ranks taking a slice of the tokens each (null:
  // etp = tp; the tp group itself at etp = 1). NOTE [expert grid] in parallel/layout.h.
  const Group* tp = nullptr;
  const Group* expert_tp = nullptr;
  const Group* token_slices = nullptr;
  // The layer's input and output are this rank's sequence slices (sequence parallelism over tp).
  bool sequence_parallel = false;
  const Group& backward() const { return backward_group ? *backward_group : *group; }
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank : 0; }
};

// NOTE [expert dispatch]
// A rank's rows come sorted by global expert (NOTE [MoE permutation] in
// parallel/token_permutation.h), so those for EP rank j's experts [j·L,
// (j+1)·L) (L = E / ep) are one contiguous run whose count is the send split.
// One all-to-all of the (E) counts gives each rank every rank's counts for its
// experts, read on the host once (the host read "expert-parallel splits"); the
// rows go in one all_to_all_single with those splits. A stable sort by local
// expert makes each local expert's rows contiguous (source rank, then the
// source's order): one GEMM per expert, as at ep = 1. combine_rows undoes both
// steps, so each row comes home to its place and unpermute sums in the same
// order at every ep. Zero splits are plain; the backward's all-to-alls are the
// forward's with the splits swapped. Every rank of the group runs the same MoE
// layers in the same order (the ranks of an EP group are replicas of one stage).
struct ExpertExchange {
  std::vector<int64_t> send_splits;  // rows to each EP rank
  std::vector<int64_t> recv_splits;  // rows from each EP rank
  at::Tensor local_counts;           // (E / ep) int64: rows per local expert after the exchange
  at::Tensor order;                  // received row of each row sorted by local expert
  at::Tensor inverse;                // and back: the sorted position of each received row
};

// The micro-batch whose forward runs on this thread while it lives (the
// executor opens one around each F): it names the forward's all-to-alls, and
// through the autograd op the backward's, for the nccl-rules backend's order
// check (NOTE [all-to-all order] in schedules/expert_order.h). Read only in
// forwards, which run on the caller's thread; -1 outside any.
class ExpertMicroBatch {
 public:
  explicit ExpertMicroBatch(int mb);
  ~ExpertMicroBatch();
  ExpertMicroBatch(const ExpertMicroBatch&) = delete;
  ExpertMicroBatch& operator=(const ExpertMicroBatch&) = delete;

 private:
  int prev_;
};
// "micro-batch M layer L": the forward's name for a call of `ep`'s layer.
std::string expert_call_name(const EpContext& ep);

// `counts` (E) int64: this rank's rows per global expert.
ExpertExchange plan_exchange(const EpContext& ep, const at::Tensor& counts);
// rows (sum counts, H) sorted by global expert -> the local experts' rows
// from every rank of the group, sorted by local expert.
at::Tensor dispatch_rows(const EpContext& ep, const at::Tensor& rows, const ExpertExchange& x);
// The local experts' outputs (in dispatch_rows' order) -> this rank's rows,
// in the order they had before dispatch_rows.
at::Tensor combine_rows(const EpContext& ep, const at::Tensor& rows, const ExpertExchange& x);

}  // namespace trident
