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

namespace torch::autograd {
struct AutogradContext;
}

namespace trident {

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

// The input of a column-parallel layer (copy_to_tp, or gather_seq under SP)
// and the output of a row-parallel one (reduce_from_tp, or reduce_scatter_seq).
at::Tensor enter_column_parallel(const TpContext& tp, const at::Tensor& x);
at::Tensor leave_row_parallel(const TpContext& tp, const at::Tensor& x);

// --- Deferred weight gradients (NOTE [I/W split]) ------------------------------
// NOTE [I/W split]
// Zero-bubble schedules split a backward into I (input gradients, on the
// critical path) and W (weight gradients, deferred). During an I, linear()
// computes dX and queues dW; a W action runs the queue later. dW is computed
// by the same expression either way and each parameter's contributions are
// still added in micro-batch order, so results are bit-identical to an
// undeferred backward (B).
//
// The queue travels with the autograd graph, not with a thread: on CUDA the
// autograd engine runs backward functions on a device thread of its own,
// which sees none of the caller's thread_locals. So
//  - the forward, which always runs on the caller's thread, records its
//    queue: inside a WeightGradScope, linear() keeps the scope's queue in its
//    autograd context (as a shared handle: the queue lives as long as the
//    graph does);
//  - the executor arms a micro-batch's queue before an I and disarms it
//    before a B;
//  - the backward, on whatever thread runs it, asks the queue it kept: armed,
//    it queues dW; not armed, or no queue, it returns dW at once.
// Recomputation re-runs a forward inside the backward (on the engine's
// thread on CUDA), so it captures the scope at forward time and re-opens it
// around the re-forward (NOTE [recomputation]).
//
// A queued dW reaches its parameter where the undeferred backward would have
// taken it: into .grad of a leaf weight, or, for a weight computed from a
// leaf (under bf16, the autograd cast of the fp32 master, NOTE [bf16]),
// through that weight's grad_fn into the leaf's .grad, the same ops on the
// same values. That path runs through torch::autograd::grad, not backward():
// the parameters' AccumulateGrad nodes do not run, so their post-hooks (the
// data-parallel "gradient final" marks, NOTE [gradient buckets]) do not fire
// in a W, for a leaf or not; the executor's REDUCE_GRAD says when a chunk's
// gradients are final. (Through backward(), a W that follows the chunk's last
// I, e.g. zb-h1's W0 W1 after I1 on the last stage, would mark a gradient
// final and start its bucket's DP reduction before the next W adds to it:
// tried, the tp2 x pp2 x dp2 bf16 zb-h1 run's grad norms then moved by up to
// 9% from the same layout under 1f1b.)
//
// A handle: copies share one queue (as copies of at::Tensor share storage).
class WeightGradQueue {
 public:
  WeightGradQueue();
  // Whether backwards of the graphs recorded into this queue defer their
  // weight gradients (true: an I) or compute them at once (false: a B; the
  // default). Set before the backward starts, on any thread.
  void arm(bool defer);
  bool armed() const;
  void push(std::function<void()> f);  // safe from any thread
  void run();                          // runs and clears, in push order
  bool empty() const;
  size_t size() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// RAII: while alive, forwards on this thread record `q` (null: no queue) in
// the autograd graphs they build, for their backward to find on any thread.
class WeightGradScope {
 public:
  explicit WeightGradScope(const WeightGradQueue* q);
  ~WeightGradScope();
  WeightGradScope(const WeightGradScope&) = delete;
  WeightGradScope& operator=(const WeightGradScope&) = delete;

 private:
  const WeightGradQueue* prev_;
};

// The queue of the WeightGradScope open on this thread, or null: what a
// forward records (recompute() keeps it for its re-forward).
const WeightGradQueue* weight_grad_scope();

// For custom autograd functions that split their backward the way linear()
// does (the benchmarks' synthetic stage). In forward: record the scope's
// queue in ctx. In backward: that queue if it is armed (push the weight
// gradient there), else null (return it now). Neither reads thread state in
// the backward.
void keep_weight_grad_queue(torch::autograd::AutogradContext* ctx);
WeightGradQueue* deferring_weight_grad_queue(torch::autograd::AutogradContext* ctx);

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
