// Expert parallelism: the routed rows of an MoE layer moved to the ranks
// that hold their experts and back, by all-to-all over the expert-parallel
// group (NOTE [expert grid] in parallel/layout.h), as autograd operations.
// The MoE layer (models/common/moe.h) calls them between its dispatch and
// its combine; everything else of the layer is the same at every ep.
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
  // (NOTE [all-gather dispatch] in models/common/moe.cpp) instead of the all-to-alls.
  bool allgather = false;
  const Group* backward_group = nullptr;  // NOTE [two expert groups]
  int layer = -1;  // the model layer calling (names its all-to-alls: NOTE [all-to-all order])
  // NOTE [experts under tensor parallelism] in models/common/moe.h: the dense tp group,
  // over which the layer's input is whole on every rank (null: tp = 1); within it the etp
  // ranks splitting each expert along its width (null: etp = 1, whole experts; the tp group
  // itself at etp = tp), and the tp / etp ranks taking a slice of the tokens each (null:
  // etp = tp; the tp group itself at etp = 1). NOTE [expert grid] in parallel/layout.h.
  const Group* tp = nullptr;
  const Group* expert_tp = nullptr;
  const Group* token_slices = nullptr;
  // With the experts split over tp: the layer returns its output unreduced (MoeOutput::reduced
  // false), for the caller's one reduction (an all-reduce, or a reduce-scatter under sequence
  // parallelism) instead of one here and a slice after.
  bool caller_reduces = false;
  const Group& backward() const { return backward_group ? *backward_group : *group; }
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank : 0; }
};

// NOTE [expert dispatch]
// Each rank's rows come sorted by global expert (the layer's dispatch), so
// the rows for EP rank j's experts [j·L, (j+1)·L) (L = E / ep local experts)
// are one contiguous run: the send split to j is their count. The counts are
// exchanged first (one all-to-all of the (E) counts: rank j receives every
// rank's counts for its own L experts), read on the host once (the splits of
// the rows' all-to-all are host integers, as in every framework's all-to-all
// dispatcher; counted as the host read "expert-parallel splits"), and the
// rows go in one all_to_all_single with those splits each way. A rank
// receives, per source rank in rank order, that rank's rows for its local
// experts sorted by expert; a stable sort by local expert makes each local
// expert's rows contiguous (source rank, then the source's order, within an
// expert): one GEMM per expert, as at ep = 1. combine_rows undoes both
// steps, so each row comes home to the place it left and the layer's combine
// sums in the same order at every ep. A rank may send or receive no rows at
// all, and one expert may take every row: both are plain splits of zero.
// In the backward each all-to-all is the other way round (its splits
// swapped): the row gradients go home to the rank that sent the rows. Every
// rank of the group must run the same MoE layers in the same order (the same
// pipeline actions: the ranks of an EP group are replicas of one stage).
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

// all_to_all_single as an autograd operation: x's rows in_splits[i] to group
// rank i; returns the out_splits[i] rows from each. Backward: the same with
// the splits swapped, over `back` (NOTE [two expert groups]; default g).
// `what` names the call ("<forward|backward> " + what under nccl-rules).
at::Tensor all_to_all_rows(const Group& g, const at::Tensor& x, const std::vector<int64_t>& out_splits,
                           const std::vector<int64_t>& in_splits, const Group* back = nullptr,
                           const std::string& what = "");

}  // namespace trident
