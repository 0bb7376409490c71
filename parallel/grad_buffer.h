// The gradient buffer of data parallelism: parameters and gradients as views
// of flat buckets, the hooks that find a gradient final, and each bucket's
// asynchronous reduction over DP, and where each gradient goes (grad_place).
// What a gradient needs besides DP's reduction is parallel/grad_finalize.h;
// the ZeRO-1 optimizer is parallel/zero_optimizer.h; parallel/data_parallel.h
// puts the three together in the order of a step.
//
// NOTE [gradient buckets]
// Every parameter and its gradient are views into persistent flat buffers (buckets of about
// `bucket_mb`), so gradients accumulate in place across micro-batches and are reduced without
// any concatenation or copy. Buckets hold parameters in reverse forward order, the order the
// backward finishes them. With `overlap`, a bucket's asynchronous all-reduce over DP starts as
// soon as every gradient in it is final: the executor says when a chunk's last backward begins
// (then each parameter's AccumulateGrad post-hook marks it final) and when its last weight
// gradient is in (after zero-bubble schedules' deferred W); wait_reduction() waits after the
// backward. Under EP the routed experts' gradients (ParamInfo::expert) have buckets of their
// own, reduced over the expert-data-parallel group and divided by dp all the same: each already
// sums, through the all-to-all's backward, the tokens of its group's ep replicas, so the sum
// over edp covers every replica once (NOTE [expert grid] in parallel/layout.h); ZeRO-1 shards
// them over that group. Gradients needing another reduction first (GradPlace::kLate*) sit in
// one "late" bucket, reduced by reduce_late() after it (sequence-parallel ones first, then the
// tied ones); never-reduced ones (kLocal: a tied copy added into its primary) in a "local" one.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/param.h"
#include "parallel/dp_shard.h"
#include "parallel/grad_observer.h"
#include "parallel/process_groups.h"

namespace torch::autograd {
struct Node;
}

namespace trident {

// Where a parameter's gradient goes (see NOTE [gradient buckets]).
enum class GradPlace {
  kBucket,                // reduced over DP as soon as its bucket is final
  kLateSequenceParallel,  // late: first reduced over TP (sequence parallelism)
  kLateTied,              // late: first added to the tied word embedding's other copy
  kLocal,                 // never reduced: added into its primary on this rank
  kExpert,                // reduced over the expert-data-parallel group (expert parallelism)
};

// Where a parameter's gradient goes. `tied_local` says, per tied name present
// on this rank, whether all its copies are here (tied_placement in
// parallel/grad_finalize.h): a tied copy whose primary is here is never
// reduced; other tied parameters are late, then sequence-parallel ones (with
// sequence parallelism); with expert_parallel the routed experts are kExpert;
// everything else is bucketed.
GradPlace grad_place(const Param& p, const std::map<std::string, bool>& tied_local, bool sequence_parallel,
                     bool expert_parallel = false);

struct GradBufferOptions {
  double bucket_mb = 25;  // target bucket size in MiB
  bool overlap = true;    // reduce buckets during the backward
  bool sharded = false;   // ZeRO-1: each rank receives only its shard of a bucket's sum
  // Where the buckets live: the parameters, their gradients and (through
  // them) the optimizer state move there when the buckets are built.
  c10::Device device{c10::kCPU};
  // The group kExpert gradients are reduced over (the expert-data-parallel
  // group); needed when any parameter is placed there.
  const Group* expert_dp = nullptr;
};

class GradBuffer : public GradObserver {
 public:
  struct Bucket {
    std::vector<size_t> params;  // indices into params()
    const Group* group = nullptr;  // reduced over: dp, or the expert-data-parallel group (kExpert)
    at::Tensor data, grad;       // flat, padded to a multiple of its group's size
    int64_t used = 0;            // elements holding parameters
    bool late = false;
    bool local = false;
    int64_t sp_end = 0;          // late bucket: elements [0, sp_end) are kLateSequenceParallel
    int pending = 0;             // parameters not yet final this step
    c10::intrusive_ptr<c10d::Work> work;
    at::Tensor shard_grad;       // sharded, dp > 1: this rank's reduced shard (NOTE [ZeRO-1 reduce-scatter])
  };

  // chunks[c] = this rank's parameters of its chunk c, in forward order;
  // place(p) says where p's gradient goes. Each parameter's tensor and
  // gradient become views of its bucket.
  GradBuffer(const std::vector<std::vector<Param*>>& chunks, const Group& dp, GradBufferOptions opts,
             const std::function<GradPlace(const Param&)>& place);
  ~GradBuffer() override;
  GradBuffer(const GradBuffer&) = delete;
  GradBuffer& operator=(const GradBuffer&) = delete;

  void zero_grads();  // before a step's schedule
  void final_backward_begins(int chunk) override;
  void grads_final(int chunk) override;
  // Waits for (or runs) the DP reduction of every bucket but the late and
  // the local one (the experts' over their group) and divides by dp: each of
  // their gradients this rank owns is then the DP average.
  void wait_reduction();
  // The late bucket's sequence-parallel part (undefined without a late
  // bucket): what is reduced over TP before reduce_late().
  at::Tensor sequence_parallel_grads() const;
  // The late bucket's DP reduction (run now, not overlapped: its gradients
  // were just reduced over TP or added to their tied copies) and division by dp.
  void reduce_late();
  // Multiplies every gradient element this rank owns by coef (clipping).
  void scale(double coef);
  void scale(const at::Tensor& coef);  // a scalar on the buffer's device (the clipping's, computed there)

  const std::vector<Param*>& params() const { return params_; }
  const std::vector<std::unique_ptr<Bucket>>& buckets() const { return buckets_; }
  int64_t offset_in_bucket(size_t param_index) const { return offset_in_bucket_[param_index]; }
  size_t bucket_of(size_t param_index) const { return bucket_of_[param_index]; }
  int chunk_of(size_t param_index) const { return chunk_of_[param_index]; }
  // The elements of `b` this rank owns (steps, norms, clips): NOTE [ZeRO-1 reduce-scatter].
  ShardRange owned(const Bucket& b) const;
  // What this rank owns of each parameter's gradient, bucket by bucket (the
  // local bucket's tied copies, stepped through their primaries, left out):
  // what the norm reads and the optimizer steps.
  std::vector<OwnedGrad> owned_grads() const;
  // Gradient elements this rank reduces each step over a group of more than
  // one rank (DP; the experts' over theirs): 0 at dp = 1.
  int64_t dp_reduced_elements() const;
  // Parameters this rank steps: all but the local tied copies.
  int64_t stepped_params() const;
  const Group& dp() const { return dp_; }
  bool sharded() const { return o_.sharded; }  // ZeRO-1: each rank owns one shard of every bucket

 private:
  struct Hook;
  void plan_buckets(const std::function<GradPlace(const Param&)>& place);
  void mark_ready(size_t param_index);
  void start_reduction(Bucket& b);   // all_reduce, or reduce_scatter into the shard (sharded), asynchronously
  void finish_reduction(Bucket& b);  // waits for a started reduction; sharded: copies the shard into the bucket
  Bucket* late_bucket() const;

  const Group& dp_;
  GradBufferOptions o_;
  std::vector<Param*> params_;      // all, chunk by chunk in forward order
  std::vector<int> chunk_of_;       // per param
  std::vector<size_t> bucket_of_;   // per param
  std::vector<int64_t> offset_in_bucket_;
  std::vector<bool> ready_, armed_;  // per param; per chunk
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keeps the hooked nodes alive
};

}  // namespace trident
