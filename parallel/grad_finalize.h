// What a step's gradients need besides data parallelism's reduction, between
// the backward and the optimizer: the model-parallel reductions
// (sequence-parallel gradients over TP, the tied word embedding's copies),
// the global gradient norm over TP, PP and DP counting every parameter once,
// and (after the step) the refresh of tied copies. The order of a step is
// DataParallel's (parallel/data_parallel.h).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "core/param.h"
#include "parallel/dp_shard.h"
#include "parallel/process_groups.h"

namespace trident {

// How each tied parameter's copies on pipeline rank `pp_rank` get their
// summed gradient: true when every copy is here (added locally), false when
// they are split over the first and the last of `pp` pipeline ranks
// (all-reduced over the embedding group, which joins those two: the only
// cross-rank tie supported; any other placement throws). rank_of_stage gives
// the pipeline rank of a virtual stage.
std::map<std::string, bool> tied_placement(const std::vector<TiedGroup>& groups,
                                           const std::function<int(int)>& rank_of_stage, int pp_rank, int pp);

// The tied parameters among a rank's: pairs whose two copies are both here
// (the copy's gradient is added into the primary's; its value is copied back
// after the step), and copies whose partner is on another pipeline rank
// (all-reduced over the embedding group).
struct TiedParams {
  std::vector<std::pair<Param*, Param*>> pairs;  // (primary, copy)
  std::vector<Param*> remote;
};

// `tied_local` (tied_placement) says, per tied name present on this rank,
// whether all its copies are here. Throws std::logic_error for a copy
// without its primary.
TiedParams find_tied(const std::vector<Param*>& params, const std::map<std::string, bool>& tied_local);

// The canonical order in which the norm adds the squares of the parameters'
// gradients: global name -> slot, in the order of `unique` (Model::unique_params).
std::map<std::string, size_t> norm_slots(const std::vector<ParamInfo>& unique);

struct FinalizeGroups {
  const Group* dp = nullptr;
  const Group* tp = nullptr;
  const Group* model_parallel = nullptr;  // tp x pp ranks of one replica
  const Group* embedding = nullptr;       // the pipeline ranks holding the tied word embedding's copies
  // The routed experts' data-parallel group (NOTE [expert grid] in
  // parallel/layout.h); null or the dp group itself at ep = 1, etp = tp.
  const Group* expert_dp = nullptr;
  // Whether the experts' replicas are other ranks than the dense ones' (their own
  // gradient buckets): ep > 1, or etp = 1 under tp > 1, except where the two fold alike.
  bool expert_parallel() const { return expert_dp && dp && expert_dp->members != dp->members; }
};

// What the norm reads.
struct NormInputs {
  std::map<std::string, size_t> slots;  // norm_slots
  std::vector<OwnedGrad> owned;         // what this rank owns of each gradient (GradBuffer::owned_grads)
  bool sharded = false;                 // ZeRO-1: the owned parts are DP shards, so the norm adds over DP too
  c10::Device device{c10::kCPU};        // where the gradients live
};

class GradFinalizer {
 public:
  GradFinalizer(FinalizeGroups groups, TiedParams tied, NormInputs norm);
  // Before the late bucket's DP reduction: `sp_grads` (the late bucket's
  // sequence-parallel part; undefined or empty when there is none)
  // all-reduced over TP, then the tied copies' reductions.
  void reduce_model_parallel(const at::Tensor& sp_grads);
  // The global gradient norm over TP, PP and DP, each parameter counted once,
  // per-parameter squares added in float64 in the canonical slot order: a
  // float64 scalar on the gradients' device (nothing is read on the host).
  at::Tensor grad_norm() const;
  // After the optimizer step: each local tied copy takes its primary's value.
  void copy_tied();

 private:
  FinalizeGroups g_;
  TiedParams tied_;
  size_t num_slots_ = 0;
  bool sharded_ = false;
  bool over_dp_ = false;  // the slots are summed over DP: ZeRO-1's shards, or expert parallelism (grad_norm)
  // The views of what this rank counts of each gradient (made once: the
  // buckets are allocated once), and the slot of each, on the device.
  std::vector<at::Tensor> norm_views_;
  at::Tensor norm_index_;
};

}  // namespace trident
