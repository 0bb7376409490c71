// The finalisation of a step's gradients, between the backward and the
// optimizer: the reductions a gradient needs besides DP's (sequence-parallel
// gradients over TP, the tied word embedding's copies), the global gradient
// norm over TP, PP and DP counting every parameter once, and (after the
// step) the refresh of tied copies. Gradient clipping is the trainer's
// norm-derived coefficient applied with GradBuffer::scale.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "core/param.h"
#include "parallel/grad_buffer.h"
#include "parallel/process_groups.h"

namespace trident {

// The tied parameters among a rank's: pairs whose two copies are both here
// (the copy's gradient is added into the primary's; its value is copied back
// after the step), and copies whose partner is on another pipeline rank
// (all-reduced over the embedding group).
struct TiedParams {
  std::vector<std::pair<Param*, Param*>> pairs;  // (primary, copy)
  std::vector<Param*> remote;
};

// `tied_local` says, per tied name present on this rank, whether all its
// copies are here. Throws std::logic_error for a copy without its primary.
TiedParams find_tied(const std::vector<Param*>& params, const std::map<std::string, bool>& tied_local);

// Where each gradient goes (grad_buffer.h): a tied copy whose primary is here
// is never reduced; other tied parameters are late, then sequence-parallel
// ones (with sequence parallelism); everything else is bucketed.
GradPlace grad_place(const Param& p, const std::map<std::string, bool>& tied_local, bool sequence_parallel);

struct FinalizeGroups {
  const Group* dp = nullptr;
  const Group* tp = nullptr;
  const Group* model_parallel = nullptr;  // tp x pp ranks of one replica
  const Group* embedding = nullptr;       // the pipeline ranks holding the tied word embedding's copies
};

class GradFinalizer {
 public:
  // norm_slots: global name -> slot of the canonical order (Model::unique_params).
  GradFinalizer(FinalizeGroups groups, TiedParams tied, std::map<std::string, size_t> norm_slots);
  // Before the late bucket's DP reduction: `sp_grads` (the late bucket's
  // sequence-parallel part) all-reduced over TP, then the tied reductions.
  void reduce_model_parallel(at::Tensor sp_grads);
  // The global gradient norm over TP, PP and DP, each parameter counted once,
  // per-parameter squares added in float64 in the canonical slot order: a
  // float64 scalar on the buffer's device (nothing is read on the host).
  // Reads the elements this rank owns of `buffer` (its shard under ZeRO-1).
  at::Tensor grad_norm(const GradBuffer& buffer) const;
  // After the optimizer step: each local tied copy takes its primary's value.
  void copy_tied();

 private:
  FinalizeGroups g_;
  TiedParams tied_;
  std::map<std::string, size_t> norm_slots_;
  // grad_norm()'s inputs, made on its first call (the buckets' gradients are
  // allocated once): the views of what this rank owns of each parameter's
  // gradient, the slot of each on the device, and the buckets they view.
  mutable std::vector<at::Tensor> norm_views_, norm_of_;
  mutable at::Tensor norm_index_;
};

}  // namespace trident
