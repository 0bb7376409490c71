// The gradient buffer: see grad_buffer.h, NOTE [gradient buckets].
#include "parallel/grad_buffer.h"

#include <algorithm>
#include <stdexcept>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace trident {

// Runs after a parameter's AccumulateGrad node: its gradient for this
// backward has been added to .grad.
struct GradBuffer::Hook : torch::autograd::FunctionPostHook {
  Hook(GradBuffer* buffer, size_t index) : buffer_(buffer), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& inputs) override {
    if (!inputs.empty() && inputs[0].defined() && buffer_->armed_[static_cast<size_t>(buffer_->chunk_of_[index_])])
      buffer_->mark_ready(index_);
    return outputs;
  }
  GradBuffer* buffer_;
  size_t index_;
};

GradPlace grad_place(const Param& p, const std::map<std::string, bool>& tied_local, bool sequence_parallel,
                     bool expert_parallel) {
  if (expert_parallel && p.info.expert) return GradPlace::kExpert;
  auto it = tied_local.find(p.info.name);
  // A tied copy whose primary is on this rank: its gradient is added to the
  // primary's before the DP reduction and then zeroed, and its value is
  // copied from the primary after the step, so it needs no reduction at
  // all (reducing it would double the late bucket: for GPT's tied head, the
  // largest matrix of a small model).
  if (it != tied_local.end()) return p.info.tied_copy && it->second ? GradPlace::kLocal : GradPlace::kLateTied;
  // Summed over TP with the sequence-parallel ones (GradFinalizer::reduce_model_parallel).
  if ((sequence_parallel && p.info.sequence_parallel_grad) || p.info.tp_partial_grad)
    return GradPlace::kLateSequenceParallel;
  return GradPlace::kBucket;
}

GradBuffer::GradBuffer(const std::vector<std::vector<Param*>>& chunks, const Group& dp, GradBufferOptions opts,
                       const std::function<GradPlace(const Param&)>& place)
    : dp_(dp), o_(opts) {
  for (size_t c = 0; c < chunks.size(); ++c)
    for (Param* p : chunks[c]) params_.push_back(p), chunk_of_.push_back(static_cast<int>(c));
  armed_.assign(chunks.size(), false);
  ready_.assign(params_.size(), false);
  bucket_of_.assign(params_.size(), 0);
  offset_in_bucket_.assign(params_.size(), 0);
  plan_buckets(place);
  // Final-gradient hooks, on the nodes that accumulate into .grad.
  for (size_t k = 0; k < params_.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[k]->tensor);
    acc->add_post_hook(std::make_unique<Hook>(this, k));
    accumulators_.push_back(std::move(acc));
  }
}

GradBuffer::~GradBuffer() = default;

void GradBuffer::plan_buckets(const std::function<GradPlace(const Param&)>& place) {
  const size_t n = params_.size();
  std::vector<GradPlace> where(n);
  for (size_t k = 0; k < n; ++k) where[k] = place(*params_[k]);
  // Buckets in reverse forward order; then the late bucket (sequence-parallel
  // gradients first, then tied ones), then the local one.
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(o_.bucket_mb * 1024 * 1024 / 4));
  std::vector<std::vector<size_t>> plan;
  std::vector<bool> expert_bucket;
  // Dense buckets and the experts' apart, each in reverse forward order.
  for (GradPlace kind : {GradPlace::kBucket, GradPlace::kExpert}) {
    int64_t fill = cap;
    for (size_t k = n; k-- > 0;) {
      if (where[k] != kind) continue;
      if (fill >= cap) plan.emplace_back(), expert_bucket.push_back(kind == GradPlace::kExpert), fill = 0;
      plan.back().push_back(k);
      fill += params_[k]->tensor.numel();
    }
  }
  if (std::find(where.begin(), where.end(), GradPlace::kExpert) != where.end() && !o_.expert_dp)
    throw std::logic_error("GradBuffer: expert gradients without an expert-data-parallel group");
  const size_t none = static_cast<size_t>(-1);  // no such bucket
  size_t late_index = none, local_index = none;
  std::vector<size_t> late, local;
  for (GradPlace kind : {GradPlace::kLateSequenceParallel, GradPlace::kLateTied})
    for (size_t k = 0; k < n; ++k)
      if (where[k] == kind) late.push_back(k);
  for (size_t k = 0; k < n; ++k)
    if (where[k] == GradPlace::kLocal) local.push_back(k);
  if (!late.empty()) late_index = plan.size(), plan.push_back(late);
  if (!local.empty()) local_index = plan.size(), plan.push_back(local);

  at::NoGradGuard no_grad;
  for (size_t b = 0; b < plan.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    bucket->params = plan[b];
    bucket->group = b < expert_bucket.size() && expert_bucket[b] ? o_.expert_dp : &dp_;
    const int64_t dp = bucket->group->size();
    bucket->late = b == late_index;
    bucket->local = b == local_index;
    for (size_t k : plan[b]) {
      offset_in_bucket_[k] = bucket->used;
      bucket->used += params_[k]->tensor.numel();
      if (bucket->late && where[k] == GradPlace::kLateSequenceParallel) bucket->sp_end = bucket->used;
    }
    const int64_t padded = (bucket->used + dp - 1) / dp * dp;
    const auto on_device = at::TensorOptions().dtype(at::kFloat).device(o_.device);
    bucket->data = at::zeros({padded}, on_device);
    bucket->grad = at::zeros({padded}, on_device);
    if (o_.sharded && dp > 1 && !bucket->local) bucket->shard_grad = at::zeros({padded / dp}, on_device);
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
}

ShardRange GradBuffer::owned(const Bucket& b) const {
  return owned_range(b.data.numel(), b.used, b.group->size(), b.group->rank, o_.sharded);
}

int64_t GradBuffer::dp_reduced_elements() const {
  int64_t n = 0;
  for (const auto& b : buckets_)
    if (!b->local && b->group->size() > 1) n += b->used;
  return n;
}

void GradBuffer::zero_grads() {
  for (auto& b : buckets_) {
    b->grad.zero_();
    b->pending = static_cast<int>(b->params.size());
    b->work.reset();
  }
  ready_.assign(ready_.size(), false);
  armed_.assign(armed_.size(), false);
}

void GradBuffer::final_backward_begins(int chunk) { armed_.at(static_cast<size_t>(chunk)) = true; }

void GradBuffer::grads_final(int chunk) {
  for (size_t k = 0; k < params_.size(); ++k)
    if (chunk_of_[k] == chunk) mark_ready(k);
}

void GradBuffer::mark_ready(size_t k) {
  if (ready_[k]) return;
  ready_[k] = true;
  Bucket& b = *buckets_[bucket_of_[k]];
  if (--b.pending == 0 && o_.overlap && !b.late && !b.local) start_reduction(b);
}

void GradBuffer::start_reduction(Bucket& b) {
  if (b.group->size() == 1) return;
  if (b.shard_grad.defined()) {
    b.work = reduce_scatter_async(*b.group, b.shard_grad, b.grad);
    return;
  }
  std::vector<at::Tensor> ts{b.grad};
  b.work = b.group->pg->allreduce(ts);
}

void GradBuffer::finish_reduction(Bucket& b) {
  if (!b.work) return;
  wait_work(*b.group, b.work, b.shard_grad.defined() ? "gradient reduce_scatter" : "gradient all_reduce", -1);
  b.work.reset();
  if (b.shard_grad.defined()) {
    const ShardRange own = owned(b);
    b.grad.narrow(0, own.lo, own.hi - own.lo).copy_(b.shard_grad);
  }
}

void GradBuffer::wait_reduction() {
  at::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    if (b->late || b->local) continue;
    if (!b->work) start_reduction(*b);  // not launched during the backward (no overlap)
    finish_reduction(*b);
    if (dp_.size() > 1) b->grad.div_(static_cast<double>(dp_.size()));
  }
}

GradBuffer::Bucket* GradBuffer::late_bucket() const {
  for (const auto& b : buckets_)
    if (b->late) return b.get();
  return nullptr;
}

at::Tensor GradBuffer::sequence_parallel_grads() const {
  const Bucket* late = late_bucket();
  return late ? late->grad.narrow(0, 0, late->sp_end) : at::Tensor();
}

void GradBuffer::reduce_late() {
  Bucket* late = late_bucket();
  if (!late || dp_.size() == 1) return;
  at::NoGradGuard no_grad;
  start_reduction(*late);
  finish_reduction(*late);
  late->grad.div_(static_cast<double>(dp_.size()));
}

std::vector<OwnedGrad> GradBuffer::owned_grads() const {
  std::vector<OwnedGrad> out;
  for (const auto& b : buckets_) {
    if (b->local) continue;  // tied copies: stepped and counted through their primaries
    const ShardRange own = owned(*b);
    for (size_t k : b->params) {
      const int64_t at = offset_in_bucket_[k];
      const int64_t lo = std::max(own.lo, at), hi = std::min(own.hi, at + params_[k]->tensor.numel());
      if (lo < hi) out.push_back({params_[k], lo - at, hi - lo, b->grad.narrow(0, lo, hi - lo), b->group->rank});
    }
  }
  return out;
}

int64_t GradBuffer::stepped_params() const {
  int64_t n = 0;
  for (const auto& b : buckets_)
    if (!b->local) n += b->used;
  return n;
}

namespace {
// Multiplies what this rank owns of every bucket but the local one by `coef`
// (a double or a device scalar: the same kernel, the same bits).
template <typename Coef>
void scale_owned(GradBuffer& buf, const Coef& coef) {
  at::NoGradGuard no_grad;
  for (auto& b : buf.buckets()) {
    if (b->local) continue;
    if (buf.sharded()) {
      const ShardRange own = buf.owned(*b);
      b->grad.narrow(0, own.lo, own.hi - own.lo).mul_(coef);
    } else {
      b->grad.mul_(coef);
    }
  }
}
}  // namespace

void GradBuffer::scale(double coef) { scale_owned(*this, coef); }
void GradBuffer::scale(const at::Tensor& coef) { scale_owned(*this, coef); }

}  // namespace trident
