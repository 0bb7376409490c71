// Activation recomputation: see NOTE [recomputation] in recompute.h.
#include "parallel/recompute.h"

#include <optional>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "parallel/tensor_parallel.h"

namespace trident {

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::kNone;
  if (name == "full") return Recompute::kFull;
  if (name == "selective") return Recompute::kSelective;
  throw std::invalid_argument("recompute mode \"" + name + "\": expected none, full or selective");
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// saved_data holds IValues; a capsule carries the function to the backward.
struct FnHolder : torch::CustomClassHolder {
  std::function<at::Tensor(const at::Tensor&)> fn;
  at::Tensor rng_state;  // the CPU generator's state before the forward (dropout)
  // The forward's weight-gradient scope (NOTE [I/W split]), re-opened around
  // the re-forward: on CUDA that runs on the engine's thread, not the caller's.
  std::optional<WeightGradQueue> queue;
};

struct RecomputeFn : torch::autograd::Function<RecomputeFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const std::function<at::Tensor(const at::Tensor&)>& fn) {
    auto holder = c10::make_intrusive<FnHolder>();
    holder->fn = fn;
    if (const WeightGradQueue* q = weight_grad_scope()) holder->queue = *q;
    auto gen = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      holder->rng_state = gen.get_state();
    }
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    ctx->save_for_backward({x});
    return fn(x);  // grad mode is off inside Function::forward: nothing is saved
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    const at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    auto gen = at::detail::getDefaultCPUGenerator();
    at::Tensor now;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      now = gen.get_state();
      gen.set_state(holder->rng_state);  // replay the forward's dropout masks
    }
    at::Tensor out;
    {
      at::AutoGradMode enable(true);
      WeightGradScope scope(holder->queue ? &*holder->queue : nullptr);
      out = holder->fn(x);
    }
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(now);  // the rest of the run's random stream is unchanged
    }
    torch::autograd::backward({out}, {grads[0]});
    return {x.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor recompute(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x) {
  if (!at::GradMode::is_enabled()) return fn(x);
  // The custom function's graph edge is x: without it fn's parameters would get no gradient.
  if (!x.requires_grad()) throw std::logic_error("recompute() needs an input that requires grad");
  return RecomputeFn::apply(x, fn);
}

}  // namespace trident
