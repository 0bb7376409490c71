// Gradient finalisation: see grad_finalize.h.
#include "parallel/grad_finalize.h"

#include <cmath>
#include <stdexcept>

#include "core/host_read.h"

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

double GradFinalizer::grad_norm(const GradBuffer& buffer) const {
  at::NoGradGuard no_grad;
  // Each parameter's sum of squares goes into its slot on the device, the
  // slots are reduced over the groups there, and only the norm comes back:
  // one host read a step (NOTE [host reads]). The additions are the ones the
  // host made before, in the same order (index_add_ adds in index order on
  // the CPU; each slot gets one addend per rank), so the doubles are too.
  std::vector<at::Tensor> squares;
  std::vector<size_t> slot_of;
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
      squares.push_back(bucket->grad.narrow(0, a, e - a).to(at::kDouble).pow(2).sum());
      slot_of.push_back(norm_slots_.at(p->info.name));
    }
  }
  const at::Device device = buffer.buckets().empty() ? at::Device(at::kCPU) : buffer.buckets().front()->grad.device();
  const auto doubles = at::TensorOptions().dtype(at::kDouble).device(device);
  at::Tensor slots = at::zeros({static_cast<int64_t>(norm_slots_.size())}, doubles);
  if (!squares.empty()) {
    // The slots' order is the same every step: their index goes to the device once.
    if (!norm_index_.defined() || norm_index_.numel() != static_cast<int64_t>(slot_of.size())) {
      std::vector<int64_t> idx(slot_of.begin(), slot_of.end());
      norm_index_ = at::tensor(idx, at::kLong).to(device);
    }
    slots.index_add_(0, norm_index_, at::stack(squares));
  }
  all_reduce(*g_.model_parallel, slots);
  if (buffer.sharded()) all_reduce(*g_.dp, slots);
  // The slots summed one after another (a running sum), as the host did.
  const at::Tensor total = slots.numel() > 0 ? slots.cumsum(0)[-1] : at::zeros({}, doubles);
  return std::sqrt(read_scalar(total, "gradient norm"));
}

void GradFinalizer::copy_tied() {
  at::NoGradGuard no_grad;
  for (auto& [prim, copy] : tied_.pairs) copy->tensor.copy_(prim->tensor);
}

}  // namespace trident
