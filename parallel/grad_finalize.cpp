// Gradient finalisation: see grad_finalize.h.
#include "parallel/grad_finalize.h"

#include <cmath>
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

GradPlace grad_place(const Param& p, const std::map<std::string, bool>& tied_local, bool sequence_parallel) {
  auto it = tied_local.find(p.info.name);
  // A tied copy whose primary is on this rank: its gradient is added to the
  // primary's before the DP reduction and then zeroed, and its value is
  // copied from the primary after the step, so it needs no reduction at
  // all (reducing it would double the late bucket: for GPT's tied head, the
  // largest matrix of a small model).
  if (it != tied_local.end()) return p.info.tied_copy && it->second ? GradPlace::kLocal : GradPlace::kLateTied;
  if (sequence_parallel && p.info.sequence_parallel_grad) return GradPlace::kLateSequenceParallel;
  return GradPlace::kBucket;
}

GradFinalizer::GradFinalizer(FinalizeGroups groups, TiedParams tied, std::map<std::string, size_t> norm_slots)
    : g_(groups), tied_(std::move(tied)), norm_slots_(std::move(norm_slots)) {}

void GradFinalizer::reduce_model_parallel(at::Tensor sp_grads) {
  at::NoGradGuard no_grad;
  if (sp_grads.numel() > 0 && g_.tp->size() > 1) all_reduce(*g_.tp, sp_grads);
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

at::Tensor GradFinalizer::grad_norm(const GradBuffer& buffer) const {
  at::NoGradGuard no_grad;
  // Each parameter's norm comes from one _foreach_norm over all of them,
  // computed in float64 (its dtype argument: the fp32 gradients are read as
  // doubles; an fp32 norm of the embedding's gradient is far enough off on
  // the CPU to break the reference contract, NOTE [fp32 norms on CPU] in
  // tests/reference/reference_train.py), squared into its slot on the device; the slots are reduced
  // over the groups there and summed one after another (a running sum, in
  // the canonical order), so every layout adds the same doubles in the same
  // order. Nothing comes back to the host here (NOTE [host reads]): the
  // trainer clips and guards with the tensor.
  std::vector<at::Tensor> buckets;
  for (const auto& bucket : buffer.buckets()) buckets.push_back(bucket->grad);
  bool same = buckets.size() == norm_of_.size();
  for (size_t i = 0; same && i < buckets.size(); ++i) same = buckets[i].is_same(norm_of_[i]);
  if (!same) {
    norm_of_ = buckets;
    norm_views_.clear();
    std::vector<int64_t> slot_of;
    for (const auto& bucket : buffer.buckets()) {
      if (bucket->local) continue;  // tied copies: counted through their primaries
      const ShardRange own = buffer.owned(*bucket);
      for (size_t k : bucket->params) {
        const Param* p = buffer.params()[k];
        if (p->info.tied_copy) continue;                          // counted through its primary
        if (p->info.shard_dim < 0 && g_.tp->rank != 0) continue;  // replicated over TP: once
        const int64_t at = buffer.offset_in_bucket(k);
        const int64_t a = std::max(own.lo, at), e = std::min(own.hi, at + p->tensor.numel());
        if (a >= e) continue;
        norm_views_.push_back(bucket->grad.narrow(0, a, e - a));
        slot_of.push_back(static_cast<int64_t>(norm_slots_.at(p->info.name)));
      }
    }
    const at::Device device = buckets.empty() ? at::Device(at::kCPU) : buckets.front().device();
    norm_index_ = at::tensor(slot_of, at::kLong).to(device);
  }
  const auto doubles = at::TensorOptions().dtype(at::kDouble).device(norm_index_.device());
  at::Tensor slots = at::zeros({static_cast<int64_t>(norm_slots_.size())}, doubles);
  if (!norm_views_.empty())
    slots.index_add_(0, norm_index_, at::stack(at::_foreach_norm(norm_views_, 2, at::kDouble)).square_());
  all_reduce(*g_.model_parallel, slots);
  if (buffer.sharded()) all_reduce(*g_.dp, slots);
  return slots.numel() > 0 ? slots.cumsum(0)[-1].sqrt_() : at::zeros({}, doubles);
}

void GradFinalizer::copy_tied() {
  at::NoGradGuard no_grad;
  for (auto& [prim, copy] : tied_.pairs) copy->tensor.copy_(prim->tensor);
}

}  // namespace trident
