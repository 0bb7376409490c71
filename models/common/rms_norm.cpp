// RMSNorm: see rms_norm.h.
#include "models/common/rms_norm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace trident {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// r = 1/sqrt(mean(x², last dim) + eps) for fp32 x, keeping the last dim (size 1).
at::Tensor inverse_rms(const at::Tensor& x32, double eps) { return at::rsqrt(x32.pow(2).mean({-1}, true) + eps); }

struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps) {
    const at::Tensor x32 = x.to(at::kFloat);
    const at::Tensor r = inverse_rms(x32, eps);
    ctx->save_for_backward({x, r, weight});
    return weight * (x32 * r).to(x.scalar_type());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &r = saved[1], &weight = saved[2];
    const at::Tensor& g = grads[0];
    const at::Tensor n32 = x.to(at::kFloat) * r;
    at::Tensor g_weight;
    if (ctx->needs_input_grad(1)) {
      // Σ over every dimension but the last of g·n, n in x's dtype as the forward multiplied it.
      const at::Tensor gn = g * n32.to(x.scalar_type());
      g_weight = gn.reshape({-1, gn.size(-1)}).sum(0);
    }
    at::Tensor g_x;
    if (ctx->needs_input_grad(0)) {
      const at::Tensor g_n = (g * weight).to(at::kFloat);
      g_x = (r * (g_n - n32 * (g_n * n32).mean({-1}, true))).to(x.scalar_type());
    }
    return {g_x, g_weight, at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return RmsNormFn::apply(x, weight, eps);
}

at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  return weight * (x32 * inverse_rms(x32, eps)).to(x.scalar_type());
}

}  // namespace trident
