// Activation recomputation: see NOTE [recomputation] in recompute.h.
#include "parallel/recompute.h"

#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "parallel/weight_grad_queue.h"

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
// The generators a forward on `device` may draw from: the CPU's, and the
// device's own (CUDA's dropout draws from it).
std::vector<at::Generator> generators_for(const c10::Device& device) {
  std::vector<at::Generator> gens{at::detail::getDefaultCPUGenerator()};
  if (device.is_cuda()) gens.push_back(at::globalContext().defaultGenerator(device));
  return gens;
}

std::vector<at::Tensor> get_states(std::vector<at::Generator>& gens) {
  std::vector<at::Tensor> states;
  for (at::Generator& g : gens) {
    std::lock_guard<std::mutex> lock(g.mutex());
    states.push_back(g.get_state());
  }
  return states;
}

void set_states(std::vector<at::Generator>& gens, const std::vector<at::Tensor>& states) {
  for (size_t i = 0; i < gens.size(); ++i) {
    std::lock_guard<std::mutex> lock(gens[i].mutex());
    gens[i].set_state(states[i]);
  }
}

struct FnHolder : torch::CustomClassHolder {
  std::function<at::Tensor(const at::Tensor&)> fn;
  c10::Device device{c10::kCPU};
  std::vector<at::Tensor> rng_states;  // every generator's state before the forward (dropout)
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
    holder->device = x.device();
    auto gens = generators_for(holder->device);
    holder->rng_states = get_states(gens);
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    ctx->save_for_backward({x});
    return fn(x);  // grad mode is off inside Function::forward: nothing is saved
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    const at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    auto gens = generators_for(holder->device);
    const std::vector<at::Tensor> now = get_states(gens);
    set_states(gens, holder->rng_states);  // replay the forward's dropout masks
    at::Tensor out;
    {
      at::AutoGradMode enable(true);
      WeightGradScope scope(holder->queue ? &*holder->queue : nullptr);
      out = holder->fn(x);
    }
    set_states(gens, now);  // the rest of the run's random stream is unchanged
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
