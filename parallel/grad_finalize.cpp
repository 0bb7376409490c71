// Gradient finalisation: see grad_finalize.h.
#include "parallel/grad_finalize.h"

#include <cmath>
#include <set>
#include <stdexcept>

namespace trident {

TiedParams find_tied(const std::vector<Param*>& params, const std::map<std::string, bool>& tied_local) {
  TiedParams t;
  std::map<std::string, Param*> primary;
  for (Param* p : params)
    if (tied_local.count(p->info.name) && !p->info.tied_copy) primary[p->info.name] = p;
  for (Param* p : params) {
    auto it = tied_local.find(p->info.name);
    if (it == tied_local.end()) continue;
    if (!it->second) {
      t.remote.push_back(p);
    } else if (p->info.tied_copy) {
      if (!primary.count(p->info.name)) throw std::logic_error("tied copy " + p->info.name + " without its primary");
      t.pairs.emplace_back(primary[p->info.name], p);
    }
  }
  return t;
}

std::map<std::string, bool> tied_placement(const std::vector<TiedGroup>& groups,
                                           const std::function<int(int)>& rank_of_stage, int pp_rank, int pp) {
  std::map<std::string, bool> out;
  for (const TiedGroup& g : groups) {
    std::set<int> ranks;
    for (int s : g.stages) ranks.insert(rank_of_stage(s));
    if (!ranks.count(pp_rank)) continue;
    if (ranks.size() == 1) {
      out[g.name] = true;
    } else if (ranks == std::set<int>{0, pp - 1}) {
      out[g.name] = false;
    } else {
      throw std::runtime_error("tied parameter " + g.name +
                               " has copies on pipeline ranks other than the first and the last; "
                               "this placement is not supported");
    }
  }
  return out;
}

std::map<std::string, size_t> norm_slots(const std::vector<ParamInfo>& unique) {
  std::map<std::string, size_t> slots;
  for (const ParamInfo& info : unique) slots.emplace(info.name, slots.size());
  return slots;
}

GradFinalizer::GradFinalizer(FinalizeGroups groups, TiedParams tied, NormInputs norm)
    : g_(groups),
      tied_(std::move(tied)),
      num_slots_(norm.slots.size()),
      sharded_(norm.sharded),
      over_dp_(norm.sharded || groups.expert_parallel()) {
  std::vector<int64_t> slot_of;
  for (const OwnedGrad& o : norm.owned) {
    if (o.param->info.tied_copy) continue;                          // counted through its primary
    // Replicated over TP: once. Not the routed experts: their replicas are their expert-data-
    // parallel group's (at etp = 1 the tp ranks may hold different experts, NOTE [expert grid]).
    if (o.param->info.shard_dim < 0 && !o.param->info.expert && g_.tp->rank != 0) continue;
    // Summed over DP below but not sharded (expert parallelism): the replicas
    // holding the same gradient count it once, on the first of its group (the
    // dense ones on dp rank 0, each expert set on its edp rank 0).
    if (over_dp_ && !sharded_ && o.group_rank != 0) continue;
    norm_views_.push_back(o.grad);
    slot_of.push_back(static_cast<int64_t>(norm.slots.at(o.param->info.name)));
  }
  norm_index_ = at::tensor(slot_of, at::kLong).to(norm.device);
}

void GradFinalizer::reduce_model_parallel(const at::Tensor& sp_grads) {
  at::NoGradGuard no_grad;
  if (sp_grads.defined() && sp_grads.numel() > 0 && g_.tp->size() > 1) {
    at::Tensor t = sp_grads;  // a view of the late bucket: reduced in place
    all_reduce(*g_.tp, t);
  }
  // Tied copies: two addends, so the order of the addition cannot change the bits.
  for (auto& [prim, copy] : tied_.pairs) {
    prim->tensor.mutable_grad().add_(copy->tensor.grad());
    copy->tensor.mutable_grad().zero_();
  }
  for (Param* p : tied_.remote) {
    at::Tensor g = p->tensor.grad();
    all_reduce(*g_.embedding, g);
  }
}

at::Tensor GradFinalizer::grad_norm() const {
  at::NoGradGuard no_grad;
  // Each parameter's norm comes from one _foreach_norm over all of them,
  // computed in float64 (its dtype argument: the fp32 gradients are read as
  // doubles; an fp32 norm of the embedding's gradient is far enough off on
  // the CPU to break the reference contract, NOTE [fp32 norms on CPU] in
  // tests/reference/reference_train.py), squared into its slot on the device; the slots are reduced
  // over the groups there and summed one after another (a running sum, in
  // the canonical order), so every layout adds the same doubles in the same
  // order. Nothing comes back to the host here (NOTE [host reads]):
  // DataParallel::clip_grads and the trainer's guard use the tensor.
  const auto doubles = at::TensorOptions().dtype(at::kDouble).device(norm_index_.device());
  at::Tensor slots = at::zeros({static_cast<int64_t>(num_slots_)}, doubles);
  if (!norm_views_.empty())
    slots.index_add_(0, norm_index_, at::stack(at::_foreach_norm(norm_views_, 2, at::kDouble)).square_());
  all_reduce(*g_.model_parallel, slots);
  if (over_dp_) all_reduce(*g_.dp, slots);
  return slots.numel() > 0 ? slots.cumsum(0)[-1].sqrt_() : at::zeros({}, doubles);
}

void GradFinalizer::copy_tied() {
  at::NoGradGuard no_grad;
  for (auto& [prim, copy] : tied_.pairs) copy->tensor.copy_(prim->tensor);
}

}  // namespace trident
