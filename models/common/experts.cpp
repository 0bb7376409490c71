// The routed experts of an MoE layer (Megatron's experts.py): each expert a
// SwiGLU run on its contiguous block of the permuted rows (NOTE [MoE
// permutation] in parallel/token_permutation.h), as grouped GEMMs whose weight
// gradients defer to a zero-bubble W; and the dense SwiGLU of a shared expert.
#include "models/common/experts.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <stdexcept>
#include <vector>

#include "parallel/tensor_parallel.h"
#include "parallel/weight_grad_queue.h"

namespace trident {

at::Tensor swiglu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down) {
  // trident::linear: a zero-bubble W computes the weight gradients (NOTE [I/W split]).
  return linear(at::silu(linear(x, gate, at::Tensor())) * linear(x, up, at::Tensor()), down, at::Tensor());
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// a · b written into `out` (a view: a slice of a larger result).
void mm_into(at::Tensor out, const at::Tensor& a, const at::Tensor& b) { at::mm_out(out, a, b); }

// NOTE [experts on the CPU]
// Without a grouped GEMM the experts run as one autograd function over the
// sorted rows: per expert and projection one GEMM written into its slice of
// one output (mm_out), the SwiGLU's element-wise ops once over all rows, and
// the backward written out: per expert dH = dY down_e, dRows = dG gate_e +
// dU up_e, and the weight gradients dgate_e = dGᵀ rows_e, dup_e = dUᵀ rows_e,
// ddown_e = dYᵀ H_e, each into its slice of one gradient per projection (no
// whole-projection zeros per expert, as autograd through per-expert selects
// would fill). The counts are host values, read once per call.
//
// NOTE [grouped experts]
// Where libtorch has a grouped GEMM (at::_grouped_mm: CUDA, and the CPU) for
// fp32, bf16 or fp16 rows 16-byte aligned (grouped_experts_fit), the same
// function runs each product as one grouped GEMM over the offsets (the counts'
// running sums, no host read): g = rows·gateᵀ, dH = dY·down, the weight
// gradients as 2-d x 2-d groups (dGᵀ·rows per block of rows, zero for an
// expert without rows). Either way the weight gradients defer to a zero-bubble
// W as linear()'s do (NOTE [I/W split]), computed by the same code.
struct ExpertGemms {
  std::vector<int64_t> counts;  // host counts: one GEMM per expert (offs undefined)
  at::Tensor offs;              // int32 running sums of the counts: one grouped GEMM per product

  // a (n, K), w (E, N, K) -> (n, N): each expert's rows times w[e]ᵀ.
  at::Tensor by_transposed(const at::Tensor& a, const at::Tensor& w) const {
    if (offs.defined()) return at::_grouped_mm(a, w.transpose(1, 2), offs);
    at::Tensor out = at::empty({a.size(0), w.size(1)}, a.options());
    for_each_expert([&](int64_t e, int64_t b, int64_t c) { mm_into(out.narrow(0, b, c), a.narrow(0, b, c), w[e].t()); });
    return out;
  }
  // d (n, N), w (E, N, K) -> (n, K): each expert's rows times w[e].
  at::Tensor by(const at::Tensor& d, const at::Tensor& w) const {
    if (offs.defined()) return at::_grouped_mm(d, w, offs);
    at::Tensor out = at::empty({d.size(0), w.size(2)}, d.options());
    for_each_expert([&](int64_t e, int64_t b, int64_t c) { mm_into(out.narrow(0, b, c), d.narrow(0, b, c), w[e]); });
    return out;
  }
  // d (n, N), a (n, K) -> (E, N, K): each expert's dᵀ·a over its rows (zero without rows).
  at::Tensor outer(const at::Tensor& d, const at::Tensor& a, const at::Tensor& like) const {
    if (offs.defined()) return at::_grouped_mm(d.t(), a, offs);
    at::Tensor out = at::zeros_like(like);
    for_each_expert([&](int64_t e, int64_t b, int64_t c) { mm_into(out[e], d.narrow(0, b, c).t(), a.narrow(0, b, c)); });
    return out;
  }
  // f(expert, first row, rows) for each expert with rows.
  template <typename F>
  void for_each_expert(F&& f) const {
    int64_t begin = 0;
    for (size_t e = 0; e < counts.size(); ++e) {
      if (counts[e] > 0) f(static_cast<int64_t>(e), begin, counts[e]);
      begin += counts[e];
    }
  }
};

struct ExpertsSwigluFn : torch::autograd::Function<ExpertsSwigluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, const at::Tensor& gate, const at::Tensor& up,
                            const at::Tensor& down, const ExpertGemms& gemms) {
    const at::Tensor g = gemms.by_transposed(rows, gate), u = gemms.by_transposed(rows, up);
    const at::Tensor h = at::silu(g) * u;
    const at::Tensor y = gemms.by_transposed(h, down);
    ctx->save_for_backward({rows, g, u, h});
    ctx->saved_data["gate"] = gate, ctx->saved_data["up"] = up, ctx->saved_data["down"] = down;
    ctx->saved_data["counts"] = gemms.counts;
    if (gemms.offs.defined()) ctx->saved_data["offs"] = gemms.offs;
    keep_weight_grad_queue(ctx);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &g = saved[1], &u = saved[2], &h = saved[3];
    const at::Tensor gate = ctx->saved_data["gate"].toTensor(), up = ctx->saved_data["up"].toTensor(),
                     down = ctx->saved_data["down"].toTensor();
    ExpertGemms gemms;
    gemms.counts = ctx->saved_data["counts"].toIntVector();
    if (ctx->saved_data.count("offs") != 0) gemms.offs = ctx->saved_data["offs"].toTensor();
    const at::Tensor dy = grads[0].contiguous();
    const at::Tensor dh = gemms.by(dy, down);
    const at::Tensor du = dh * at::silu(g);
    const at::Tensor dg = at::silu_backward(dh * u, g);
    // Two products added, as autograd sums a tensor's two gradients (addmm_ would
    // accumulate one product into the other, rounding otherwise).
    const at::Tensor drows = gemms.by(dg, gate).add_(gemms.by(du, up));
    if (!gate.requires_grad() && !up.requires_grad() && !down.requires_grad())
      return {drows, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    // Experts without rows get zero gradients (defined: every rank's buckets
    // become final in the same backward, NOTE [expert dispatch]).
    auto weight_grads = [rows, h, dy, dg, du, gemms, gate, up, down]() {
      at::NoGradGuard no_grad;  // a W runs outside the engine, and mm_out records no graph
      return std::array<at::Tensor, 3>{gemms.outer(dg, rows, gate), gemms.outer(du, rows, up),
                                       gemms.outer(dy, h, down)};
    };
    if (WeightGradQueue* q = deferring_weight_grad_queue(ctx)) {
      q->push([weight_grads, gate, up, down]() {
        const auto w = weight_grads();
        accumulate_weight_grad(gate, w[0]);
        accumulate_weight_grad(up, w[1]);
        accumulate_weight_grad(down, w[2]);
      });
      return {drows, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    const auto w = weight_grads();
    return {drows, w[0], w[1], w[2], at::Tensor()};
  }
};

}  // namespace

bool grouped_experts_fit(const at::Tensor& rows, const at::Tensor& gate) {
  const auto t = rows.scalar_type();
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) return false;
  const int64_t align = 16 / static_cast<int64_t>(rows.element_size());  // 16-byte strides
  return gate.size(1) % align == 0 && gate.size(2) % align == 0;
}

at::Tensor experts_swiglu_grouped(const at::Tensor& rows, const at::Tensor& counts, const at::Tensor& gate,
                                  const at::Tensor& up, const at::Tensor& down) {
  if (!grouped_experts_fit(rows, gate))
    throw std::invalid_argument("experts_swiglu_grouped: the grouped GEMM needs fp32, bf16 or fp16 rows and widths "
                                "whose rows are 16-byte aligned");
  ExpertGemms gemms;
  gemms.offs = counts.cumsum(0).to(at::kInt);
  return ExpertsSwigluFn::apply(rows.contiguous(), gate, up, down, gemms);
}

at::Tensor experts_swiglu(const at::Tensor& rows, const at::Tensor& counts, const at::Tensor& gate,
                          const at::Tensor& up, const at::Tensor& down) {
  if (rows.is_cuda() && grouped_experts_fit(rows, gate)) return experts_swiglu_grouped(rows, counts, gate, up, down);
  const at::Tensor host = counts.to(at::kCPU).contiguous();
  const int64_t* n = host.data_ptr<int64_t>();
  ExpertGemms gemms;
  gemms.counts.assign(n, n + host.numel());
  return ExpertsSwigluFn::apply(rows.contiguous(), gate, up, down, gemms);
}

}  // namespace trident
