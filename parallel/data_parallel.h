// Data parallelism: everything between "the schedule finished" and "the
// optimizer may step", and the step itself, in three parts, each usable and
// tested alone:
//  - the gradient buffer (parallel/grad_buffer.h): buckets, views, hooks and
//    the asynchronous reduction over DP (NOTE [gradient buckets]);
//  - the finalisation (parallel/grad_finalize.h): sequence-parallel and tied
//    reductions, the global norm;
//  - the optimizer (parallel/zero_optimizer.h): AdamW over what this rank
//    owns, and ZeRO-1's gather (NOTE [ZeRO-1 reduce-scatter]).
// DataParallel puts them together in the order a step needs them.
#pragma once

#include <map>
#include <memory>
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
  bool sequence_parallel = false;  // reduce sequence-parallel gradients over TP
  c10::Device device{c10::kCPU};   // where the buckets (parameters, gradients, optimizer state) live
};

using DataParallelGroups = FinalizeGroups;

class DataParallel : public GradObserver {
 public:
  // chunks[c] = this rank's parameters of its chunk c, in forward order.
  // `tied_local` says, per tied name present on this rank, whether all its
  // copies are on this rank (added locally) or not (all-reduced over
  // groups.embedding). norm_slots: global name -> slot of the canonical order.
  DataParallel(const std::vector<std::vector<Param*>>& chunks, DataParallelGroups groups, DataParallelOptions opts,
               AdamWOptions adam, const std::map<std::string, bool>& tied_local,
               std::map<std::string, size_t> norm_slots);

  void zero_grads() { buffer_->zero_grads(); }  // before a step's schedule
  void final_backward_begins(int chunk) override { buffer_->final_backward_begins(chunk); }
  void grads_final(int chunk) override { buffer_->grads_final(chunk); }
  // Waits for (or runs) every reduction; afterwards each gradient this rank
  // steps (its shard under ZeRO-1) is the DP average.
  void finish_grad_sync();
  // The global gradient norm, a float64 scalar on the device (GradFinalizer::grad_norm).
  at::Tensor grad_norm() const { return finalizer_->grad_norm(*buffer_); }
  void scale_grads(double coef) { buffer_->scale(coef); }
  void scale_grads(const at::Tensor& coef) { buffer_->scale(coef); }
  // AdamW on this rank's part (none where `skip` is 1: AdamW::step), then
  // (ZeRO-1) all-gather, then local tied copies.
  void step(double lr, const std::optional<at::Tensor>& skip = std::nullopt);

  int64_t optimizer_state_bytes() const { return optimizer_->adam().state_bytes(); }
  // This rank's AdamW (its segments are its ZeRO shard under zero = 1).
  AdamW& optimizer() { return optimizer_->adam(); }
  bool zero() const { return o_.zero1; }
  int num_buckets() const { return static_cast<int>(buffer_->buckets().size()); }
  int64_t dp_reduced_elements() const { return buffer_->dp_reduced_elements(); }

 private:
  DataParallelOptions o_;
  std::unique_ptr<GradBuffer> buffer_;
  std::unique_ptr<GradFinalizer> finalizer_;
  std::unique_ptr<ZeroOptimizer> optimizer_;
};

}  // namespace trident
