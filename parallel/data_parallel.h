// Data parallelism: everything between "the schedule finished" and "the
// optimizer may step", and the step itself, in three parts, each usable and
// tested alone, none including another's header but the buffer's:
//  - the gradient buffer (parallel/grad_buffer.h): buckets, views, hooks,
//    where each gradient goes, and the asynchronous reduction over DP
//    (NOTE [gradient buckets]);
//  - the finalisation (parallel/grad_finalize.h): sequence-parallel and tied
//    reductions, the global norm;
//  - the optimizer (parallel/zero_optimizer.h): AdamW over what this rank
//    owns (parallel/dp_shard.h), and ZeRO-1's gather.
// DataParallel puts them together in the order a step needs them (NOTE
// [gradient finalisation]).
//
// NOTE [gradient finalisation]
// After the backward, in the order of Megatron-LM's finalize_model_grads followed by its
// optimizer's clipping and step:
//   finish_grad_sync()  1. wait for the DP reduction of the buckets (the backward launched
//                          them: NOTE [gradient buckets]); 2. the model-parallel reductions:
//                          sequence-parallel gradients over TP, the tied embedding's copies;
//                       3. the DP reduction of what 2 summed (the late bucket);
//   clip_grads()        4. the global norm;  5. the clipping coefficient, every gradient scaled by it;
//   step()              6. AdamW, ZeRO-1's gather, the tied copies' refresh (with
//                          overlap_param_gather the gather and the refresh finish before the next
//                          forward reads the parameters: NOTE [overlapped parameter gather] in
//                          parallel/zero_optimizer.h).
// Two calls, not one, because the trainer measures between them (the sync's time, and on
// logged steps the pipeline's, a collective): 1-3 are the step's "grad-sync" phase, 4-6 its
// "optimizer" phase (NOTE [operation counts]).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/optimizer.h"
#include "core/param.h"
#include "parallel/grad_buffer.h"
#include "parallel/grad_finalize.h"
#include "parallel/grad_observer.h"
#include "parallel/process_groups.h"
#include "parallel/zero_optimizer.h"

namespace trident {

struct DataParallelOptions {
  double bucket_mb = 25;           // target bucket size in MiB
  bool overlap = true;             // reduce buckets during the backward
  bool zero1 = false;              // optimizer state sharded over DP (parallel.zero = 1)
  bool overlap_param_gather = false;  // zero1: the gather finished by the next forward (parallel/zero_optimizer.h)
  bool sequence_parallel = false;  // reduce sequence-parallel gradients over TP
  c10::Device device{c10::kCPU};   // where the buckets (parameters, gradients, optimizer state) live
};

using DataParallelGroups = FinalizeGroups;

class DataParallel : public GradObserver {
 public:
  // chunks[c] = this rank's parameters of its chunk c, in forward order.
  // `tied_local` (tied_placement) says, per tied name present on this rank,
  // whether all its copies are on this rank (added locally) or not
  // (all-reduced over groups.embedding). norm_slots: the norm's canonical
  // order (parallel/grad_finalize.h).
  DataParallel(const std::vector<std::vector<Param*>>& chunks, DataParallelGroups groups, DataParallelOptions opts,
               AdamWOptions adam, const std::map<std::string, bool>& tied_local,
               std::map<std::string, size_t> norm_slots);

  void zero_grads() { buffer_->zero_grads(); }  // before a step's schedule
  void final_backward_begins(int chunk) override { buffer_->final_backward_begins(chunk); }
  void grads_final(int chunk) override { buffer_->grads_final(chunk); }
  // Before the parameter `index` of chunk `chunk` (its place in the chunk's
  // list given to the constructor) is read: finishes its bucket's overlapped
  // gather, or for a tied copy its primary's and the copy's refresh. The
  // stages call it (Stage::set_read_gate; NOTE [overlapped parameter gather]).
  void param_read(int chunk, size_t index);
  // Whether the step leaves gathers for param_read to finish.
  bool overlaps_param_gather() const;
  // Finishes every overlapped gather: before anything but the next step's
  // forward reads the parameters (evaluation, a checkpoint, the end).
  void wait_params();
  // NOTE [gradient finalisation] 1-3: afterwards each gradient this rank
  // steps (its shard under ZeRO-1) is the DP average of the model-parallel sum.
  void finish_grad_sync();
  // NOTE [gradient finalisation] 4-5: the global gradient norm, a float64
  // scalar on the device, and (max_norm > 0) every gradient scaled by
  // max_norm / norm where the norm is above max_norm. Nothing is read on the
  // host (NOTE [host reads]): the trainer's non-finite guard reads the norm.
  at::Tensor clip_grads(double max_norm);
  // NOTE [gradient finalisation] 6: AdamW on this rank's part (none where
  // `skip` is 1: AdamW::step), then (ZeRO-1) all-gather, then local tied copies
  // (with overlap_param_gather both only by forward_begins or wait_params).
  void step(double lr, const std::optional<at::Tensor>& skip = std::nullopt);

  int64_t optimizer_state_bytes() const { return optimizer_->adam().state_bytes(); }
  // This rank's AdamW (its segments are its ZeRO shard under zero = 1).
  AdamW& optimizer() { return optimizer_->adam(); }
  bool zero() const { return o_.zero1; }
  int num_buckets() const { return static_cast<int>(buffer_->buckets().size()); }
  int64_t dp_reduced_elements() const { return buffer_->dp_reduced_elements(); }
  // Parameters this rank steps (a tied copy added into its primary here is not one).
  int64_t local_params() const { return buffer_->stepped_params(); }

 private:
  DataParallelOptions o_;
  std::unique_ptr<GradBuffer> buffer_;
  std::unique_ptr<GradFinalizer> finalizer_;
  std::unique_ptr<ZeroOptimizer> optimizer_;
  std::vector<size_t> chunk_start_;         // per chunk: its first parameter's index in the buffer
  std::vector<size_t> tied_primaries_;      // buffer indices of the tied copies' primaries
  bool tied_pending_ = false;                 // the refresh waits for an overlapped gather
};

}  // namespace trident
