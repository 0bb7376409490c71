// Megatron-style tensor parallelism over a TP group: the region mappings as
// autograd functions, a linear op whose weight gradient can be deferred (for
// zero-bubble schedules), and vocab-parallel cross-entropy.
//
// Activations are (batch, seq, hidden). Under sequence parallelism the regions
// between column- and row-parallel layers hold (batch, seq/tp, hidden).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "parallel/process_groups.h"
#include "parallel/weight_grad_queue.h"

namespace torch::autograd {
struct AutogradContext;
}

namespace trident {

// NOTE [two tp groups]
// The backward functions of the mappings below run their collectives on the
// tp group's `backward` twin when it has one (the same ranks, a communicator
// of its own: ProcessGroups::tp_backward, made when tp > 1 and ep > 1). In an
// overlapped pair (NOTE [overlapped pairs] in schedules/overlap.h) one thread
// runs a forward while another runs a backward, both issuing tensor-parallel
// collectives; on one group their order would differ from rank to rank (NCCL
// and Gloo match collectives by order only). On two, every rank issues the
// forwards' in list order and layer order on one, and the backwards' in list
// order and reverse layer order on the other, as the experts' all-to-alls do
// (NOTE [two expert groups] in parallel/expert_parallel.h).
struct TpContext {
  const Group* group = nullptr;  // the TP group; null means tp = 1
  bool sequence_parallel = false;
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank : 0; }
};

// --- Region mappings ---------------------------------------------------------
// identity forward, all-reduce backward (enter a column-parallel region)
at::Tensor copy_to_tp(const TpContext& tp, const at::Tensor& x);
// all-reduce forward, identity backward (leave a row-parallel region). Sums
// into x itself when x is contiguous, no view and no leaf that requires grad
// (NOTE [TP collectives in place] in tensor_parallel.cpp): x is consumed.
at::Tensor reduce_from_tp(const TpContext& tp, const at::Tensor& x);
// keep this rank's slice of the last dimension; backward all-gathers
at::Tensor scatter_last_dim(const TpContext& tp, const at::Tensor& x);
// all-gather along the last dimension; backward keeps this rank's slice
at::Tensor gather_last_dim(const TpContext& tp, const at::Tensor& x);
// sequence parallelism, along dim 1: all-gather forward / reduce-scatter backward
at::Tensor gather_seq(const TpContext& tp, const at::Tensor& x);
// sequence parallelism, along dim 1: reduce-scatter forward / all-gather backward
at::Tensor reduce_scatter_seq(const TpContext& tp, const at::Tensor& x);
// sequence parallelism, along dim 1: keep this rank's slice / all-gather backward
at::Tensor scatter_seq(const TpContext& tp, const at::Tensor& x);
// Along any dimension, for tensors whose consumers are replicated over the group
// (every rank's gradient is whole): keep this rank's slice / all-gather backward,
// and all-gather / keep this rank's slice backward.
at::Tensor scatter_along(const TpContext& tp, const at::Tensor& x, int64_t dim);
at::Tensor gather_along(const TpContext& tp, const at::Tensor& x, int64_t dim);

// The input of a column-parallel layer (copy_to_tp, or gather_seq under SP)
// and the output of a row-parallel one (reduce_from_tp, or reduce_scatter_seq).
at::Tensor enter_column_parallel(const TpContext& tp, const at::Tensor& x);
at::Tensor leave_row_parallel(const TpContext& tp, const at::Tensor& x);

// Deferred weight gradients: parallel/weight_grad_queue.h (NOTE [I/W split]).
// A custom autograd function whose backward defers its weight gradients as
// linear()'s does (the MoE experts' GEMMs) adds each queued one with this,
// where the undeferred backward would have added it.
void accumulate_weight_grad(const at::Tensor& w, const at::Tensor& gw);

// y = x W^T + b with x (..., in), W (out, in), b (out) or undefined.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// --- Layers --------------------------------------------------------------------
// Column-parallel: W is this rank's (out/tp, in) slice. Output stays split
// along the last dimension unless gather_output.
at::Tensor column_parallel_linear(const TpContext& tp, const at::Tensor& x, const at::Tensor& w,
                                  const at::Tensor& b, bool gather_output = false);
// Row-parallel: x is already split along its last dimension, W is (out, in/tp);
// the bias (replicated) is added after the reduction.
at::Tensor row_parallel_linear(const TpContext& tp, const at::Tensor& x, const at::Tensor& w,
                               const at::Tensor& b);
// Vocab-parallel embedding: this rank owns rows [vocab_start, vocab_start + rows)
// of the padded vocabulary; other ids give zeros before the reduction.
// Output (batch, seq, hidden), or (batch, seq/tp, hidden) under SP.
at::Tensor vocab_parallel_embedding(const TpContext& tp, const at::Tensor& ids, const at::Tensor& w,
                                    int64_t vocab_start);
// Cross-entropy over vocab-parallel logits (batch, seq, vocab/tp) without
// gathering them. Columns at global id >= valid_vocab (padding) are excluded
// (with tp = 1, by overwriting them with -inf in place: NOTE [whole-vocabulary
// cross-entropy]). Returns the per-token loss (batch, seq) in fp32.
at::Tensor vocab_parallel_cross_entropy(const TpContext& tp, const at::Tensor& logits,
                                        const at::Tensor& targets, int64_t vocab_start, int64_t valid_vocab);

}  // namespace trident
