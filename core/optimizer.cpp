// AdamW: see optimizer.h.
#include "core/optimizer.h"

#include <stdexcept>

#include <ATen/core/grad_mode.h>

namespace trident {
namespace {

std::vector<OptimSegment> whole(const std::vector<Param*>& params) {
  std::vector<OptimSegment> segs;
  for (Param* p : params) segs.push_back({p, 0, p->tensor.numel()});
  return segs;
}

// Elements [offset, offset + numel) of `full` as a 1-D view.
at::Tensor segment_of(const at::Tensor& full, const OptimSegment& s) {
  return full.view({-1}).narrow(0, s.offset, s.numel);
}

}  // namespace

AdamW::AdamW(const std::vector<Param*>& params, AdamWOptions opts) : AdamW(whole(params), opts) {}

AdamW::AdamW(std::vector<OptimSegment> segments, AdamWOptions opts) : segs_(std::move(segments)), o_(opts) {
  for (const OptimSegment& s : segs_) {
    if (!s.param->tensor.is_contiguous() || s.offset < 0 || s.offset + s.numel > s.param->tensor.numel())
      throw std::logic_error("AdamW: bad segment of " + s.param->info.name);
    m_.push_back(at::zeros({s.numel}, s.param->tensor.options().requires_grad(false)));
    v_.push_back(at::zeros({s.numel}, s.param->tensor.options().requires_grad(false)));
  }
  views_.resize(segs_.size());
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < m_.size(); ++i) bytes += (m_[i].numel() + v_[i].numel()) * m_[i].element_size();
  return bytes;
}

// NOTE [fused AdamW]
// The update is libtorch's _fused_adamw_ (CPU since torch 2.4, CUDA before):
// one call per weight-decay group over all of its segments, instead of
// eight element-wise ATen calls per segment with full-size temporaries. It
// computes the same formulas (Loshchilov & Hutter 2019, with PyTorch's
// torch.optim.AdamW arrangement: w *= 1 - lr*wd; m = lerp(m, g, 1 - b1);
// v = b2 v + (1 - b2) g^2; w -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)), so
// it agrees with the element-wise form within fp32 rounding
// (tests/torch_unit/test_fused_adamw.cpp holds it to that). The step count
// is a float32 tensor the kernel reads, one per parameter group; `skip`
// (found_inf: 1.0 skips the whole update, on the device) is the trainer's
// non-finite guard. The segments' views of the weights and gradients are made
// once and reused while the gradient tensor is the same one, so a step adds
// no view operations.
void AdamW::refresh_views() {
  for (size_t i = 0; i < segs_.size(); ++i) {
    const OptimSegment& s = segs_[i];
    const at::Tensor& w = s.param->tensor;
    const at::Tensor& g = w.grad();
    SegmentViews& v = views_[i];
    if (!v.weight_of.is_same(w)) {
      v.weight = segment_of(w, s);
      v.weight_of = w;
    }
    if (!g.defined()) {
      v.grad = v.grad_of = at::Tensor();
    } else if (!v.grad_of.is_same(g) || !g.is_contiguous()) {  // a reshape's copy is not reusable
      v.grad = g.is_contiguous() ? segment_of(g, s) : g.reshape({-1}).narrow(0, s.offset, s.numel);
      v.grad_of = g;
    }
  }
}

void AdamW::step(double lr, const std::optional<at::Tensor>& skip) {
  at::NoGradGuard no_grad;
  ++t_;
  refresh_views();
  struct Group {
    std::vector<at::Tensor> w, g, m, v;
  } decay, plain;
  for (size_t i = 0; i < segs_.size(); ++i) {
    if (!views_[i].grad.defined()) continue;
    Group& grp = !segs_[i].param->info.no_decay && o_.weight_decay != 0 ? decay : plain;
    grp.w.push_back(views_[i].weight);
    grp.g.push_back(views_[i].grad);
    grp.m.push_back(m_[i]);
    grp.v.push_back(v_[i]);
  }
  if (decay.w.empty() && plain.w.empty()) return;
  // The kernel reads one step count per tensor: the same 0-dim tensor for all.
  const at::Device device = (decay.w.empty() ? plain : decay).w.front().device();
  if (!step_count_.defined() || step_count_.device() != device)
    step_count_ = at::zeros({}, at::TensorOptions(at::kFloat).device(device));
  step_count_.fill_(static_cast<double>(t_));
  for (Group* grp : {&decay, &plain}) {
    if (grp->w.empty()) continue;
    const double wd = grp == &decay ? o_.weight_decay : 0.0;
    const std::vector<at::Tensor> steps(grp->w.size(), step_count_);
    at::_fused_adamw_(grp->w, grp->g, grp->m, grp->v, /*max_exp_avg_sqs=*/{}, steps, lr, o_.beta1, o_.beta2, wd,
                      o_.eps, /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, skip);
    // The fused kernel writes the weights without moving their version counters
    // (libtorch 2.11: no ADInplaceOrView kernel for it), and the version is how a
    // model's bf16 copy knows its master changed (NOTE [cast once per step]).
    // A host-side counter bump per tensor: no kernel.
    for (const at::Tensor& w : grp->w) w.unsafeGetTensorImpl()->bump_version();
  }
}

}  // namespace trident
