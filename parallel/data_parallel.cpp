// Data parallelism: see data_parallel.h, NOTE [gradient buckets] and
// NOTE [ZeRO-1 reduce-scatter].
#include "parallel/data_parallel.h"

#include <cmath>
#include <stdexcept>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace trident {

struct DataParallel::Bucket {
  std::vector<size_t> params;  // indices into params_
  at::Tensor data, grad;       // flat (padded to a multiple of dp)
  int64_t used = 0;            // elements holding parameters
  bool late = false;           // reduced in finish_grad_sync after TP / tied reductions
  bool local = false;          // local tied copies: never reduced, sharded or gathered
  int64_t sp_end = 0;          // late bucket: elements [0, sp_end) are sequence-parallel gradients
  int pending = 0;             // parameters not yet final this step
  c10::intrusive_ptr<c10d::Work> work;
  bool reduced = false;
  at::Tensor shard_grad;       // zero = 1, dp > 1: this rank's reduced shard (NOTE [ZeRO-1 reduce-scatter])
};

// Runs after a parameter's AccumulateGrad node: its gradient for this
// backward has been added to .grad.
struct DataParallel::Hook : torch::autograd::FunctionPostHook {
  Hook(DataParallel* dp, size_t index) : dp_(dp), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& inputs) override {
    if (!inputs.empty() && inputs[0].defined() && dp_->armed_[static_cast<size_t>(dp_->chunk_of_[index_])])
      dp_->mark_ready(index_);
    return outputs;
  }
  DataParallel* dp_;
  size_t index_;
};

DataParallel::DataParallel(std::vector<std::vector<Param*>> chunks, DataParallelGroups groups,
                           DataParallelOptions opts, AdamWOptions adam, const std::map<std::string, bool>& tied_local,
                           std::map<std::string, size_t> norm_slots)
    : g_(groups), o_(opts), norm_slots_(std::move(norm_slots)) {
  if (o_.zero != 0 && o_.zero != 1) throw std::runtime_error("parallel.zero must be 0 or 1");
  for (size_t c = 0; c < chunks.size(); ++c)
    for (Param* p : chunks[c]) params_.push_back(p), chunk_of_.push_back(static_cast<int>(c));
  armed_.assign(chunks.size(), false);
  const size_t n = params_.size();
  ready_.assign(n, false);
  bucket_of_.assign(n, 0);
  offset_in_bucket_.assign(n, 0);

  // Tied copies: pairs on this rank, or one copy whose partner is elsewhere.
  std::map<std::string, Param*> primary;
  for (Param* p : params_)
    if (tied_local.count(p->info.name) && !p->info.tied_copy) primary[p->info.name] = p;
  for (Param* p : params_) {
    auto it = tied_local.find(p->info.name);
    if (it == tied_local.end()) continue;
    if (!it->second) {
      tied_remote_.push_back(p);
    } else if (p->info.tied_copy) {
      if (!primary.count(p->info.name)) throw std::logic_error("tied copy " + p->info.name + " without its primary");
      tied_pairs_.emplace_back(primary[p->info.name], p);
    }
  }
  // A tied copy whose primary is on this rank: its gradient is added to the
  // primary's before the DP reduction and then zeroed, and its value is
  // copied from the primary after the step, so it needs no reduction at
  // all (reducing it would double the late bucket: for GPT's tied head, the
  // largest matrix of a small model).
  auto is_local_copy = [&](const Param* p) {
    auto it = tied_local.find(p->info.name);
    return p->info.tied_copy && it != tied_local.end() && it->second;
  };
  auto is_late = [&](const Param* p) {
    return !is_local_copy(p) &&
           (tied_local.count(p->info.name) > 0 || (o_.sequence_parallel && p->info.sequence_parallel_grad));
  };

  // Buckets in reverse forward order; the late bucket last.
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(o_.bucket_mb * 1024 * 1024 / 4));
  std::vector<std::vector<size_t>> plan;
  int64_t fill = cap;
  for (size_t k = n; k-- > 0;) {
    if (is_late(params_[k]) || is_local_copy(params_[k])) continue;
    if (fill >= cap) plan.emplace_back(), fill = 0;
    plan.back().push_back(k);
    fill += params_[k]->tensor.numel();
  }
  std::vector<size_t> late;
  for (size_t k = 0; k < n; ++k)  // sequence-parallel ones first, then tied (see sync_late)
    if (is_late(params_[k]) && !tied_local.count(params_[k]->info.name)) late.push_back(k);
  for (size_t k = 0; k < n; ++k)
    if (is_late(params_[k]) && tied_local.count(params_[k]->info.name)) late.push_back(k);
  const size_t none = static_cast<size_t>(-1);  // no such bucket
  size_t late_index = none, local_index = none;
  if (!late.empty()) late_index = plan.size(), plan.push_back(late);
  std::vector<size_t> local;
  for (size_t k = 0; k < n; ++k)
    if (is_local_copy(params_[k])) local.push_back(k);
  if (!local.empty()) local_index = plan.size(), plan.push_back(local);

  const int64_t dp = g_.dp->size();
  at::NoGradGuard no_grad;
  for (size_t b = 0; b < plan.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    bucket->params = plan[b];
    bucket->late = b == late_index;
    bucket->local = b == local_index;
    for (size_t k : plan[b]) {
      offset_in_bucket_[k] = bucket->used;
      bucket->used += params_[k]->tensor.numel();
      if (bucket->late && !tied_local.count(params_[k]->info.name)) bucket->sp_end = bucket->used;
    }
    const int64_t padded = (bucket->used + dp - 1) / dp * dp;
    const auto on_device = at::TensorOptions().dtype(at::kFloat).device(o_.device);
    bucket->data = at::zeros({padded}, on_device);
    bucket->grad = at::zeros({padded}, on_device);
    if (o_.zero && dp > 1 && !bucket->local) bucket->shard_grad = at::zeros({padded / dp}, on_device);
    for (size_t k : plan[b]) {
      bucket_of_[k] = b;
      Param* p = params_[k];
      const auto shape = p->tensor.sizes().vec();
      at::Tensor view = bucket->data.narrow(0, offset_in_bucket_[k], p->tensor.numel());
      view.copy_(p->tensor.reshape({-1}));
      p->tensor = view.view(shape).detach().requires_grad_(true);
      p->tensor.mutable_grad() = bucket->grad.narrow(0, offset_in_bucket_[k], view.numel()).view(shape);
    }
    buckets_.push_back(std::move(bucket));
  }
  // Final-gradient hooks, on the nodes that accumulate into .grad.
  for (size_t k = 0; k < n; ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[k]->tensor);
    acc->add_post_hook(std::make_unique<Hook>(this, k));
    accumulators_.push_back(std::move(acc));
  }

  // The optimizer's segments: whole parameters, or the pieces of this rank's shards.
  std::vector<OptimSegment> segs;
  std::map<Param*, bool> skip;
  for (auto& [prim, copy] : tied_pairs_) skip[copy] = true;  // stepped through its primary
  for (const auto& bucket : buckets_) {
    if (bucket->local) continue;
    const int64_t shard = shard_size(*bucket), lo = o_.zero ? g_.dp->rank * shard : 0,
                  hi = o_.zero ? lo + shard : bucket->used;
    for (size_t k : bucket->params) {
      Param* p = params_[k];
      if (skip.count(p)) continue;
      const int64_t a = std::max(lo, offset_in_bucket_[k]), e = std::min(hi, offset_in_bucket_[k] + p->tensor.numel());
      if (a < e) segs.push_back({p, a - offset_in_bucket_[k], e - a});
    }
  }
  opt_ = std::make_unique<AdamW>(std::move(segs), adam);
}

DataParallel::~DataParallel() = default;

int64_t DataParallel::shard_size(const Bucket& b) const { return b.data.numel() / g_.dp->size(); }

int64_t DataParallel::dp_reduced_elements() const {
  if (g_.dp->size() == 1) return 0;
  int64_t n = 0;
  for (const auto& b : buckets_)
    if (!b->local) n += b->used;
  return n;
}

void DataParallel::zero_grads() {
  for (auto& b : buckets_) {
    b->grad.zero_();
    b->pending = static_cast<int>(b->params.size());
    b->work.reset();
    b->reduced = false;
  }
  ready_.assign(ready_.size(), false);
  armed_.assign(armed_.size(), false);
}

void DataParallel::final_backward_begins(int chunk) { armed_.at(static_cast<size_t>(chunk)) = true; }

void DataParallel::grads_final(int chunk) {
  for (size_t k = 0; k < params_.size(); ++k)
    if (chunk_of_[k] == chunk) mark_ready(k);
}

void DataParallel::mark_ready(size_t k) {
  if (ready_[k]) return;
  ready_[k] = true;
  Bucket& b = *buckets_[bucket_of_[k]];
  if (--b.pending == 0 && o_.overlap && !b.late && !b.local) launch(b);
}

void DataParallel::launch(Bucket& b) {
  if (g_.dp->size() == 1) return;
  if (b.shard_grad.defined()) {
    b.work = reduce_scatter_async(*g_.dp, b.shard_grad, b.grad);
    return;
  }
  std::vector<at::Tensor> ts{b.grad};
  b.work = g_.dp->pg->allreduce(ts);
}

void DataParallel::land(Bucket& b) {
  if (!b.work) return;
  wait_work(*g_.dp, b.work, b.shard_grad.defined() ? "gradient reduce_scatter" : "gradient all_reduce", -1);
  b.work.reset();
  if (b.shard_grad.defined()) b.grad.narrow(0, g_.dp->rank * shard_size(b), shard_size(b)).copy_(b.shard_grad);
}

void DataParallel::sync_late(Bucket& b) {
  at::NoGradGuard no_grad;
  if (b.sp_end > 0 && g_.tp->size() > 1) {
    at::Tensor sp = b.grad.narrow(0, 0, b.sp_end);
    all_reduce(*g_.tp, sp);
  }
  // Tied copies: two addends, so the order of the addition cannot change the bits.
  for (auto& [prim, copy] : tied_pairs_) {
    prim->tensor.mutable_grad().add_(copy->tensor.grad());
    copy->tensor.mutable_grad().zero_();
  }
  for (Param* p : tied_remote_) {
    at::Tensor g = p->tensor.grad();
    all_reduce(*g_.embedding, g);
  }
  if (g_.dp->size() > 1) launch(b), land(b);
}

void DataParallel::finish_grad_sync() {
  at::NoGradGuard no_grad;
  const double dp = g_.dp->size();
  for (auto& b : buckets_) {
    if (b->local) continue;  // zeroed by sync_late, after adding into the primaries
    if (b->late) {
      sync_late(*b);
    } else {
      if (!b->work) launch(*b);  // not launched during the backward (no overlap)
      land(*b);
    }
    if (dp > 1) b->grad.div_(dp);
  }
}

double DataParallel::grad_norm() {
  at::NoGradGuard no_grad;
  // Each parameter's sum of squares stays on the device until all are
  // computed, then comes back in one copy; the host adds them into their
  // slots in the same order as before (so the same doubles on the CPU).
  std::vector<at::Tensor> squares;
  std::vector<size_t> slot_of;
  for (const auto& bucket : buckets_) {
    if (bucket->local) continue;  // tied copies: counted through their primaries
    const int64_t shard = shard_size(*bucket), lo = o_.zero ? g_.dp->rank * shard : 0,
                  hi = o_.zero ? lo + shard : bucket->used;
    for (size_t k : bucket->params) {
      const Param* p = params_[k];
      if (p->info.tied_copy) continue;                             // counted through its primary
      if (p->info.shard_dim < 0 && g_.tp->rank != 0) continue;     // replicated over TP: once
      const int64_t a = std::max(lo, offset_in_bucket_[k]), e = std::min(hi, offset_in_bucket_[k] + p->tensor.numel());
      if (a >= e) continue;
      squares.push_back(bucket->grad.narrow(0, a, e - a).to(at::kDouble).pow(2).sum());
      slot_of.push_back(norm_slots_.at(p->info.name));
    }
  }
  at::Tensor slots = at::zeros({static_cast<int64_t>(norm_slots_.size())}, at::kDouble);
  double* s = slots.data_ptr<double>();
  if (!squares.empty()) {
    const at::Tensor host = at::stack(squares).to(at::kCPU);
    const double* h = host.data_ptr<double>();
    for (size_t i = 0; i < slot_of.size(); ++i) s[slot_of[i]] += h[i];
  }
  all_reduce(*g_.model_parallel, slots);
  if (o_.zero) all_reduce(*g_.dp, slots);
  double total = 0;
  for (int64_t i = 0; i < slots.numel(); ++i) total += s[i];
  return std::sqrt(total);
}

void DataParallel::scale_grads(double coef) {
  at::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    if (b->local) continue;
    if (o_.zero)
      b->grad.narrow(0, g_.dp->rank * shard_size(*b), shard_size(*b)).mul_(coef);
    else
      b->grad.mul_(coef);
  }
}

void DataParallel::step(double lr) {
  opt_->step(lr);
  at::NoGradGuard no_grad;
  if (o_.zero && g_.dp->size() > 1) {
    for (auto& b : buckets_) {
      if (b->local) continue;  // copied from the primaries below
      const int64_t shard = shard_size(*b);
      at::Tensor mine = b->data.narrow(0, g_.dp->rank * shard, shard).clone();  // not aliasing the output
      all_gather_into(*g_.dp, b->data, mine);
    }
  }
  for (auto& [prim, copy] : tied_pairs_) copy->tensor.copy_(prim->tensor);
}

}  // namespace trident
