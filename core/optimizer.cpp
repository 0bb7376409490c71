// AdamW: see optimizer.h.
#include "core/optimizer.h"

#include <cmath>
#include <stdexcept>

#include <ATen/core/grad_mode.h>

namespace trident {
namespace {

std::vector<OptimSegment> whole(const std::vector<Param*>& params) {
  std::vector<OptimSegment> segs;
  for (Param* p : params) segs.push_back({p, 0, p->tensor.numel()});
  return segs;
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
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < m_.size(); ++i) bytes += (m_[i].numel() + v_[i].numel()) * m_[i].element_size();
  return bytes;
}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++t_;
  const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
  for (size_t i = 0; i < segs_.size(); ++i) {
    const OptimSegment& s = segs_[i];
    const at::Tensor& full_grad = s.param->tensor.grad();
    if (!full_grad.defined()) continue;
    at::Tensor w = s.param->tensor.view({-1}).narrow(0, s.offset, s.numel);
    at::Tensor g = full_grad.reshape({-1}).narrow(0, s.offset, s.numel);
    if (!s.param->info.no_decay && o_.weight_decay != 0) w.mul_(1.0 - lr * o_.weight_decay);
    m_[i].mul_(o_.beta1).add_(g, 1.0 - o_.beta1);
    v_[i].mul_(o_.beta2).addcmul_(g, g, 1.0 - o_.beta2);
    // w -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
    at::Tensor denom = (v_[i] / bc2).sqrt_().add_(o_.eps);
    w.addcdiv_(m_[i], denom, -lr / bc1);
  }
}

}  // namespace trident
