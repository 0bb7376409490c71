// Data parallelism: everything between "the schedule finished" and "the
// optimizer may step", and the step itself.
//
// NOTE [gradient buckets]
// Every parameter and its gradient are views into persistent flat buffers
// (buckets of about `bucket_mb`), so gradients accumulate in place across
// micro-batches and are reduced without any concatenation or copy. Buckets
// hold parameters in reverse forward order, the order the backward finishes
// them. With `overlap`, a bucket's asynchronous all-reduce over DP starts as
// soon as every gradient in it is final: the executor says when a chunk's
// last backward begins (then each parameter's AccumulateGrad post-hook marks
// it final) and when its last weight gradient is in (after the deferred W of
// zero-bubble schedules). finish_grad_sync() waits for them just before
// clipping.
//
// Gradients that need another reduction first live in one "late" bucket,
// reduced in finish_grad_sync() in a fixed order: sequence-parallel
// gradients over TP, then the tied word embedding's two copies (added on one
// rank, or all-reduced over the embedding group), then DP. A tied copy whose
// primary is on the same rank sits in a "local" bucket that is never reduced:
// its gradient is added into the primary's first and its value is copied
// back from the primary after the step.
//
// NOTE [ZeRO-1 reduce-scatter]
// With zero = 1 each DP rank keeps AdamW state for, and updates, only its
// 1/dp shard of every bucket (buckets are padded to a multiple of dp). A
// bucket's gradients are reduced by one asynchronous reduce-scatter
// (c10d's _reduce_scatter_base, which libtorch 2.x's Gloo and NCCL both
// have): each rank receives the sum of its own shard only, (n-1)/n of the
// bucket sent per rank against an all-reduce's 2(n-1)/n, into a shard-sized
// buffer that is copied into the bucket's shard once waited for. It starts as
// soon as the bucket's gradients are final, as zero = 0's all-reduce does, so
// it overlaps the backward the same way. After the step the updated shards
// are all-gathered into the flat parameter buffer in one _allgather_base.
// Gradients outside a rank's shard are left unreduced and are never read
// (the norm, the clipping and the optimizer see the shard only). The sums of
// a reduce-scatter are ordered differently from an all-reduce's, so zero = 1
// agrees with zero = 0 within fp32 rounding, not bit for bit. (libtorch 1.13's
// Gloo had no reduce-scatter; an all-reduce followed by keeping the shard
// stood in for it until the move to 2.11.)
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "framework/optimizer.h"
#include "parallel/param.h"
#include "parallel/process_groups.h"
#include "schedules/stage.h"

namespace torch::autograd {
struct Node;
}

namespace trident {

struct DataParallelOptions {
  double bucket_mb = 25;           // target bucket size in MiB
  bool overlap = true;             // reduce buckets during the backward
  int zero = 0;                    // 0: replicated optimizer; 1: optimizer state sharded over DP
  bool sequence_parallel = false;  // reduce sequence-parallel gradients over TP
  // Where the buckets live: the parameters, their gradients and (through
  // them) the optimizer state move there when the buckets are built.
  c10::Device device{c10::kCPU};
};

struct DataParallelGroups {
  const Group* dp = nullptr;
  const Group* tp = nullptr;
  const Group* model_parallel = nullptr;  // tp x pp ranks of one replica
  const Group* embedding = nullptr;       // the pipeline ranks holding the tied word embedding's copies
};

class DataParallel : public GradObserver {
 public:
  // chunks[c] = this rank's parameters of its chunk c, in forward order.
  // `tied_local` says, per tied name present on this rank, whether all its
  // copies are on this rank (added locally) or not (all-reduced over
  // groups.embedding). norm_slots: global name -> slot of the canonical order.
  DataParallel(std::vector<std::vector<Param*>> chunks, DataParallelGroups groups, DataParallelOptions opts,
               AdamWOptions adam, const std::map<std::string, bool>& tied_local,
               std::map<std::string, size_t> norm_slots);
  ~DataParallel() override;

  void zero_grads();  // before a step's schedule
  void final_backward_begins(int chunk) override;
  void grads_final(int chunk) override;
  // Waits for (or runs) every reduction; afterwards each gradient this rank
  // steps (its shard under ZeRO-1) is the DP average.
  void finish_grad_sync();
  // The global gradient norm over TP, PP and DP, each parameter counted once,
  // per-parameter squares added in the canonical slot order.
  double grad_norm();
  void scale_grads(double coef);
  // AdamW on this rank's part, then (ZeRO-1) all-gather, then local tied copies.
  void step(double lr);

  int64_t optimizer_state_bytes() const { return opt_->state_bytes(); }
  // This rank's AdamW (its segments are its ZeRO shard under zero = 1).
  AdamW& optimizer() { return *opt_; }
  bool zero() const { return o_.zero != 0; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Gradient elements this rank all-reduces over DP each step (0 at dp = 1).
  int64_t dp_reduced_elements() const;

 private:
  struct Bucket;
  struct Hook;
  void mark_ready(size_t param_index);
  void launch(Bucket& b);
  void land(Bucket& b);  // waits for a launched reduction; zero = 1: copies the shard into the bucket
  void sync_late(Bucket& b);
  int64_t shard_size(const Bucket& b) const;

  DataParallelGroups g_;
  DataParallelOptions o_;
  std::vector<Param*> params_;          // all, chunk by chunk in forward order
  std::vector<int> chunk_of_;           // per param
  std::vector<size_t> bucket_of_;       // per param
  std::vector<int64_t> offset_in_bucket_;
  std::vector<bool> ready_, armed_;     // per param; per chunk
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::pair<Param*, Param*>> tied_pairs_;  // (primary, copy) both here
  std::vector<Param*> tied_remote_;                    // a copy whose partner is on another rank
  std::map<std::string, size_t> norm_slots_;
  std::unique_ptr<AdamW> opt_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keeps the hooked nodes alive
};

}  // namespace trident
