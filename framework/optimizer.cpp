// AdamW: see optimizer.h.
#include "framework/optimizer.h"

#include <cmath>

namespace trident {

AdamW::AdamW(std::vector<Param*> params, AdamWOptions opts) : params_(std::move(params)), o_(opts) {
  for (Param* p : params_) {
    m_.push_back(at::zeros_like(p->tensor.detach()));
    v_.push_back(at::zeros_like(p->tensor.detach()));
  }
}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++t_;
  const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor w = params_[i]->tensor;
    const at::Tensor& g = w.grad();
    if (!g.defined()) continue;
    if (!params_[i]->info.no_decay && o_.weight_decay != 0) w.mul_(1.0 - lr * o_.weight_decay);
    m_[i].mul_(o_.beta1).add_(g, 1.0 - o_.beta1);
    v_[i].mul_(o_.beta2).addcmul_(g, g, 1.0 - o_.beta2);
    // w -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
    at::Tensor denom = (v_[i] / bc2).sqrt_().add_(o_.eps);
    w.addcdiv_(m_[i], denom, -lr / bc1);
  }
}

}  // namespace trident
