// Tensor-parallel mappings, deferred-weight-gradient linear, TP layers and
// vocab-parallel cross-entropy. See tensor_parallel.h.
#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include "parallel/autograd_group.h"

namespace trident {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t pack_group(const Group* g) { return reinterpret_cast<int64_t>(g); }
const Group& unpack_group(const c10::IValue& saved) { return *reinterpret_cast<const Group*>(saved.toInt()); }

namespace {

int64_t pack(const TpContext& tp) { return pack_group(tp.group); }
// A backward's group: the forward's, or its twin (NOTE [two tp groups] in tensor_parallel.h).
const Group& unpack(AutogradContext* ctx) {
  const Group& g = unpack_group(ctx->saved_data["group"]);
  return g.backward ? *g.backward : g;
}

// NOTE [TP collectives]
// What crosses the TP group travels in the dtype it is computed in: under bf16 (NOTE [bf16] in
// models/gpt/gpt.h) activations and their gradients are all-reduced, gathered and
// reduce-scattered as bf16, half the bytes of fp32 and no cast on either side, as Megatron-LM's
// mappings do (they hand the tensor to the collective as it is). The backend sums bf16 element
// by element (Gloo widens each pair to float and rounds the sum, NCCL likewise), so at tp = 2
// the result is the fp32 sum rounded once; at tp > 2 every step of the ring rounds. Gloo's ring
// sums an element in an order that depends on its position in the buffer, so at tp > 2 fp32
// results depend on the layout at the 1e-7 level (at tp = 2 a sum of two is the same in any order).
// NOTE [TP collective copies]
// Every collective writes into one contiguous tensor through the into-tensor forms
// (_allgather_base, _reduce_scatter_base; Gloo has both on the CPU, NCCL on CUDA): the ranks'
// parts are the outermost dimension of that tensor, so a gather or reduce-scatter along `dim`
// costs no copy when every dimension before `dim` has size 1 (the sequence dimension of a
// (1, s, h) micro-batch, or dim 0), and one copy otherwise (the parts interleave along `dim`:
// (b, s, h) split along s at b > 1, or the last dimension). Megatron keeps activations (s, b, h)
// so that the sequence dimension leads; Trident's are (b, s, h) (NOTE [larger micro-batches
// under TP] in tests/regression/test_tp_regression.cpp). On the CPU, Gloo's into-tensor forms
// are its list forms underneath (it gathers into a buffer of its own and copies the chunks out;
// its reduce-scatter all-reduces a clone and copies this rank's chunk out), so there only
// Trident's own copies are saved; NCCL writes into the tensors given.

// x summed over the group, in place: `x` must be contiguous and owned by the
// caller (nothing else reads it afterwards).
void all_reduce_in_place(const Group& g, at::Tensor x) { all_reduce(g, x); }

// Product of the sizes of x's dimensions before `dim`: 1 when rank r's part
// of `dim` is one contiguous block of a contiguous x.
int64_t outer_size(const at::Tensor& x, int64_t dim) {
  int64_t n = 1;
  for (int64_t d = 0; d < dim; ++d) n *= x.size(d);
  return n;
}

// Every rank's x, concatenated along `dim` in rank order.
at::Tensor gathered(const Group& g, const at::Tensor& x, int64_t dim) {
  at::Tensor part = x.contiguous();
  auto shape = part.sizes().vec();
  shape[static_cast<size_t>(dim)] *= g.size();
  if (outer_size(part, dim) == 1) {  // the parts lie one after the other already
    at::Tensor out = at::empty(shape, part.options());
    all_gather_into(g, out, part);
    return out;
  }
  auto stacked = part.sizes().vec();
  stacked.insert(stacked.begin(), g.size());
  at::Tensor full = at::empty(stacked, part.options());  // (tp, ...): rank r's part at [r]
  all_gather_into(g, full, part);
  return full.movedim(0, dim).reshape(shape);  // the one copy: the parts interleave along `dim`
}

// Each rank's share of x's dimension `dim`, which must split evenly over the group.
int64_t part_size(const Group& g, const at::Tensor& x, int64_t dim) {
  const int64_t n = x.size(dim);
  TORCH_CHECK(n % g.size() == 0, "dimension ", dim, " of size ", n, " does not split over tp=", g.size());
  return n / g.size();
}

// x summed over the group, this rank's 1/tp slice along `dim` kept: one
// reduce-scatter from a (tp, ...) layout whose rank r block is r's slice, so
// the received part is already in x's own layout (no copy after; none before
// either when the dimensions before `dim` have size 1).
at::Tensor reduce_scattered(const Group& g, const at::Tensor& x, int64_t dim) {
  const int64_t n = part_size(g, x, dim);
  auto split = x.sizes().vec();
  split[static_cast<size_t>(dim)] = n;
  auto part_shape = split;
  split.insert(split.begin() + dim, g.size());                   // (..., tp, n, ...)
  at::Tensor full = x.reshape(split).movedim(dim, 0).contiguous();  // (tp, ..., n, ...)
  at::Tensor part = at::empty(part_shape, x.options());
  reduce_scatter(g, part, full);
  return part;
}

at::Tensor my_slice(const Group& g, const at::Tensor& x, int64_t dim) {
  const int64_t part = part_size(g, x, dim);
  return x.narrow(dim, g.rank * part, part).contiguous();
}

// NOTE [TP collectives in place]
// The all-reduces of copy_to_tp's backward and reduce_from_tp's forward sum
// the tensor they are given where it lies, as Megatron-LM's _reduce does,
// instead of into a copy: the tensor is owned by this step of the graph.
//  - reduce_from_tp's input is the partial product of a row-parallel layer
//    (linear() writes it into a fresh tensor, no view) or the vocab-parallel
//    embedding's masked lookup; nothing else holds it. The forward marks it
//    dirty, so autograd's version check refuses any later reader that saved
//    it, rather than let it read the sum. A view, a strided input or a leaf
//    that requires grad is copied first.
//  - copy_to_tp's backward receives dX of the column-parallel linear(s)
//    that read its output (a fresh mm result, or the engine's sum of
//    several), which no other node reads.
struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x;  // autograd makes the output an alias of x: no copy (NOTE [TP collectives in place])
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    at::Tensor grad = g[0].contiguous();
    all_reduce_in_place(unpack(ctx), grad);
    return {grad, at::Tensor()};
  }
};

// NOTE [TP fault] Test only, like TRIDENT_FAULT_ACTION and TRIDENT_SAVE_FAULT:
// TRIDENT_TP_SKIP_ALL_REDUCE=N makes this process's N-th row-parallel output
// reduction (counted from 1) keep the rank's partial sum, as a dropped
// reduction would. Every TP rank makes the same calls in the same order, so
// all skip the same one and nothing waits. It shows that the TP regression
// tolerance catches one such fault (tests/regression/test_tp_regression.cpp).
bool skip_this_reduction() {
  static const long long skip = [] {
    const char* v = std::getenv("TRIDENT_TP_SKIP_ALL_REDUCE");
    if (!v || !*v) return 0LL;
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (*end != '\0' || n < 1)
      throw std::runtime_error(std::string("TRIDENT_TP_SKIP_ALL_REDUCE='") + v + "': expected a call number >= 1");
    return n;
  }();
  static std::atomic<long long> calls{0};
  return skip > 0 && ++calls == skip;
}

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    if (skip_this_reduction()) return x.clone();  // NOTE [TP fault]
    const Group& g = *reinterpret_cast<const Group*>(group);
    // A leaf that requires grad is the caller's to keep (autograd refuses to change it).
    if (x.is_contiguous() && !x.is_view() && !(x.is_leaf() && x.requires_grad())) {  // reduced where it lies
      all_reduce_in_place(g, x);
      ctx->mark_dirty({x});
      return x;
    }
    at::Tensor y = x.contiguous();
    if (y.is_same(x)) y = y.clone();  // a contiguous view: not ours to overwrite
    all_reduce_in_place(g, y);
    return y;
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], at::Tensor()}; }
};

// Forward keeps this rank's slice of `dim`; backward all-gathers it.
struct ScatterDim : torch::autograd::Function<ScatterDim> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t dim) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["dim"] = dim;
    return my_slice(*reinterpret_cast<const Group*>(group), x, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {gathered(unpack(ctx), g[0], ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
  }
};

// Forward all-gathers `dim`; backward keeps this rank's slice (reduce=false)
// or reduce-scatters (reduce=true, sequence parallelism: every rank's
// gradient is a partial sum).
struct GatherDim : torch::autograd::Function<GatherDim> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t dim, bool reduce) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["reduce"] = reduce;
    return gathered(*reinterpret_cast<const Group*>(group), x, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const Group& grp = unpack(ctx);
    const int64_t dim = ctx->saved_data["dim"].toInt();
    at::Tensor dx = ctx->saved_data["reduce"].toBool() ? reduce_scattered(grp, g[0], dim) : my_slice(grp, g[0], dim);
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Forward reduce-scatters along `dim`; backward all-gathers.
struct ReduceScatterDim : torch::autograd::Function<ReduceScatterDim> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, int64_t dim) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["dim"] = dim;
    const Group& grp = *reinterpret_cast<const Group*>(group);
    return reduce_scattered(grp, x, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {gathered(unpack(ctx), g[0], ctx->saved_data["dim"].toInt()), at::Tensor(), at::Tensor()};
  }
};

void accumulate_grad(at::Tensor param, const at::Tensor& g) {
  at::NoGradGuard no_grad;
  at::Tensor& acc = param.mutable_grad();
  if (!acc.defined())
    acc = g.detach().clone();
  else
    acc.add_(g);
}

// The leaves whose AccumulateGrad nodes the graph of `t` reaches.
std::vector<at::Tensor> leaves_of(const at::Tensor& t) {
  std::vector<at::Tensor> leaves;
  std::vector<torch::autograd::Node*> todo{t.grad_fn().get()}, seen;
  while (!todo.empty()) {
    torch::autograd::Node* n = todo.back();
    todo.pop_back();
    if (!n || std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
    seen.push_back(n);
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(n)) {
      leaves.push_back(acc->variable);
      continue;
    }
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
  return leaves;
}

}  // namespace

// A deferred weight gradient, added where the undeferred backward would have
// added it (NOTE [queued dW]): a leaf's .grad, or through a computed weight's
// grad_fn (under bf16 the cast of the fp32 master: ToCopyBackward, bf16 ->
// fp32) into its leaves' .grad. torch::autograd::grad runs the same backward
// functions as the engine did in a B; the leaves' AccumulateGrad nodes (and
// their post-hooks) do not run, as for a leaf.
void accumulate_weight_grad(const at::Tensor& w, const at::Tensor& gw) {
  if (!w.grad_fn()) {
    accumulate_grad(w, gw);
    return;
  }
  const std::vector<at::Tensor> leaves = leaves_of(w);
  const variable_list g = torch::autograd::grad({w}, leaves, {gw}, /*retain_graph=*/true, /*create_graph=*/false,
                                                /*allow_unused=*/true);
  for (size_t i = 0; i < leaves.size(); ++i)
    if (g[i].defined()) accumulate_grad(leaves[i], g[i]);
}

namespace {

// y = x W^T (+ b). libtorch's custom functions take no undefined tensors as
// inputs, so the bias-free variant is its own function; both share the math.
at::Tensor linear_forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  ctx->saved_data["w"] = w;
  ctx->saved_data["b"] = b;
  ctx->save_for_backward({x});
  keep_weight_grad_queue(ctx);
  const at::Tensor x2 = x.reshape({-1, x.size(-1)});  // (tokens, in)
  auto shape = x.sizes().vec();
  shape.back() = w.size(0);
  // Written into a tensor of the output's shape, so the output is no view
  // (a row-parallel layer's all-reduce may then overwrite it in place: NOTE
  // [TP collectives in place]); addmm_out/mm_out are the kernels addmm/mm run.
  at::Tensor y = at::empty(shape, x2.options());
  at::Tensor y2 = y.view({-1, w.size(0)});
  if (b.defined())
    at::addmm_out(y2, b, x2, w.t());
  else
    at::mm_out(y2, x2, w.t());
  return y;
}

// Returns {dx, dW, db}; dW and db are undefined when deferred to a queue.
variable_list linear_backward(AutogradContext* ctx, const variable_list& grads) {
  const at::Tensor x = ctx->get_saved_variables()[0];
  const at::Tensor w = ctx->saved_data["w"].toTensor();
  const at::Tensor b = ctx->saved_data["b"].toTensor();
  const at::Tensor gy = grads[0].reshape({-1, w.size(0)}).contiguous();  // (tokens, out)
  const at::Tensor gx = at::mm(gy, w).view(x.sizes());
  if (!w.requires_grad()) return {gx, at::Tensor(), at::Tensor()};
  const at::Tensor x2 = x.reshape({-1, x.size(-1)});
  auto weight_grads = [gy, x2, b]() {
    at::Tensor gw = at::mm(gy.t(), x2);
    at::Tensor gb = b.defined() ? gy.sum(0) : at::Tensor();
    return std::make_pair(gw, gb);
  };
  if (WeightGradQueue* q = deferring_weight_grad_queue(ctx)) {
    q->push([weight_grads, w, b]() {
      auto [gw, gb] = weight_grads();
      accumulate_weight_grad(w, gw);
      if (b.defined()) accumulate_weight_grad(b, gb);
    });
    return {gx, at::Tensor(), at::Tensor()};
  }
  auto [gw, gb] = weight_grads();
  return {gx, gw, gb};
}

struct LinearFn : torch::autograd::Function<LinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return linear_forward(ctx, x, w, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return linear_backward(ctx, grads); }
};

struct LinearNoBiasFn : torch::autograd::Function<LinearNoBiasFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    return linear_forward(ctx, x, w, at::Tensor());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = linear_backward(ctx, grads);
    return {g[0], g[1]};
  }
};

// NOTE [cross-entropy passes]: logits are (tokens x vocab/tp), by far the
// largest tensor of a small model (103 MB per micro-batch for GPT-2's vocab at
// hidden 128), so every full pass over them costs as much as a sizeable matmul.
// Forward keeps exp(l - max) and its row sums and makes the softmax only in
// backward, padded columns are zeroed after exp instead of -inf-filled in a
// copy, and the target logit is gathered from the input. Each value is the
// same float operation on the same operands as in the direct computation
// (softmax made in forward, padding filled with -inf), so losses and
// gradients are the same bit for bit, with four fewer passes.
struct VocabParallelCE : torch::autograd::Function<VocabParallelCE> {
  // logits (b, s, v/tp) fp32; targets (b, s) int64 global ids.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets, int64_t group,
                            int64_t vocab_start, int64_t valid_vocab) {
    const Group& g = *reinterpret_cast<const Group*>(group);  // tp > 1 (tp = 1: WholeVocabCE)
    const int64_t rows = logits.size(-1);
    const at::Tensor l = logits.to(at::kFloat).contiguous();
    // Padded ids never win: they are left out of the max and count as exp(-inf) = 0.
    const int64_t valid = std::clamp<int64_t>(valid_vocab - vocab_start, 0, rows);
    at::Tensor mx = valid > 0 ? std::get<0>(l.narrow(-1, 0, valid).max(-1))
                              : at::full(l.sizes().slice(0, l.dim() - 1), -std::numeric_limits<float>::infinity(),
                                         l.options());
    all_reduce(g, mx, c10d::ReduceOp::MAX);
    at::Tensor e = (l - mx.unsqueeze(-1)).exp_();
    if (valid < rows) e.narrow(-1, valid, rows - valid).zero_();
    at::Tensor se = e.sum(-1);
    all_reduce(g, se);
    at::Tensor local = targets - vocab_start;
    at::Tensor in_range = (local >= 0).logical_and(local < rows);
    at::Tensor idx = local.clamp(0, rows - 1).unsqueeze(-1);
    at::Tensor picked = (l.gather(-1, idx).squeeze(-1) - mx) * in_range.to(at::kFloat);
    all_reduce(g, picked);
    ctx->save_for_backward({e, se, idx, in_range});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return se.log() - picked;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor g = saved[0] / saved[1].unsqueeze(-1);  // softmax - onehot(target), only where the target is ours
    g.scatter_add_(-1, saved[2], -saved[3].to(at::kFloat).unsqueeze(-1));
    g.mul_(grads[0].unsqueeze(-1));
    g = g.to(static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt()));
    return {g, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor copy_to_tp(const TpContext& tp, const at::Tensor& x) {
  return tp.size() == 1 ? x : CopyToTp::apply(x, pack(tp));
}
at::Tensor reduce_from_tp(const TpContext& tp, const at::Tensor& x) {
  return tp.size() == 1 ? x : ReduceFromTp::apply(x, pack(tp));
}
at::Tensor scatter_last_dim(const TpContext& tp, const at::Tensor& x) {
  return tp.size() == 1 ? x : ScatterDim::apply(x, pack(tp), x.dim() - 1);
}
at::Tensor gather_last_dim(const TpContext& tp, const at::Tensor& x) {
  return tp.size() == 1 ? x : GatherDim::apply(x, pack(tp), x.dim() - 1, false);
}
at::Tensor gather_seq(const TpContext& tp, const at::Tensor& x) {
  return tp.size() == 1 ? x : GatherDim::apply(x, pack(tp), 1, true);
}
at::Tensor reduce_scatter_seq(const TpContext& tp, const at::Tensor& x) {
  return tp.size() == 1 ? x : ReduceScatterDim::apply(x, pack(tp), 1);
}
at::Tensor scatter_seq(const TpContext& tp, const at::Tensor& x) {
  return tp.size() == 1 ? x : ScatterDim::apply(x, pack(tp), 1);
}
at::Tensor scatter_along(const TpContext& tp, const at::Tensor& x, int64_t dim) {
  return tp.size() == 1 ? x : ScatterDim::apply(x, pack(tp), dim);
}
at::Tensor gather_along(const TpContext& tp, const at::Tensor& x, int64_t dim) {
  return tp.size() == 1 ? x : GatherDim::apply(x, pack(tp), dim, false);
}
at::Tensor enter_column_parallel(const TpContext& tp, const at::Tensor& x) {
  return tp.sequence_parallel ? gather_seq(tp, x) : copy_to_tp(tp, x);
}
at::Tensor leave_row_parallel(const TpContext& tp, const at::Tensor& x) {
  return tp.sequence_parallel ? reduce_scatter_seq(tp, x) : reduce_from_tp(tp, x);
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return b.defined() ? LinearFn::apply(x, w, b) : LinearNoBiasFn::apply(x, w);
}

at::Tensor column_parallel_linear(const TpContext& tp, const at::Tensor& x, const at::Tensor& w,
                                  const at::Tensor& b, bool gather_output) {
  at::Tensor y = linear(enter_column_parallel(tp, x), w, b);
  return gather_output ? gather_last_dim(tp, y) : y;
}

at::Tensor row_parallel_linear(const TpContext& tp, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  at::Tensor y = leave_row_parallel(tp, linear(x, w, at::Tensor()));
  return b.defined() ? y + b : y;
}

at::Tensor vocab_parallel_embedding(const TpContext& tp, const at::Tensor& ids, const at::Tensor& w,
                                    int64_t vocab_start) {
  if (tp.size() == 1) return scatter_seq(tp, at::embedding(w, ids));
  const int64_t rows = w.size(0);
  at::Tensor local = ids - vocab_start;
  at::Tensor outside = (local < 0).logical_or(local >= rows);
  at::Tensor out = at::embedding(w, local.masked_fill(outside, 0));  // (b, s, hidden)
  out = out.masked_fill(outside.unsqueeze(-1), 0.0);
  return leave_row_parallel(tp, out);
}

// NOTE [whole-vocabulary cross-entropy]: with tp = 1 one rank holds every
// column, and libtorch's log_softmax (one vectorised kernel) beats
// VocabParallelCE's separate passes. Padded columns (>= valid_vocab) are left
// out of the softmax as VocabParallelCE leaves them out, by writing -inf into
// them in place (a few columns, not a pass): the logits are made for this loss
// alone and the head's backward does not read them, and any narrowed copy of
// the (tokens x vocab) logits, or the zero-filled buffers that nll_loss's and
// narrow's backwards allocate, would cost a full pass each. The backward makes
// softmax - onehot in place in the saved log-softmax (no second logits-sized
// buffer); exp(-inf) = 0 leaves the padded columns' gradient 0. (Saving the
// softmax instead, from libtorch's softmax kernel, would spare the backward's
// exp pass, 6 % of a gpt-small-brown step, but that kernel's faster exp put
// the gradient norm outside the fp32 reference contract: 4.5x torch's error.)
struct WholeVocabCE : torch::autograd::Function<WholeVocabCE> {
  // logits (b, s, v) fp32; targets (b, s) int64. Returns the per-token loss (b, s).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t valid_vocab) {
    const int64_t rows = logits.size(-1);
    at::Tensor l = logits.scalar_type() == at::kFloat && logits.is_contiguous() ? logits : logits.to(at::kFloat).contiguous();
    l = l.view({-1, rows});
    if (valid_vocab < rows) l.narrow(1, valid_vocab, rows - valid_vocab).fill_(-std::numeric_limits<float>::infinity());
    const at::Tensor lsm = at::_log_softmax(l, 1, false);  // (tokens, vocab)
    const at::Tensor t = targets.reshape({-1, 1});
    ctx->save_for_backward({lsm, t});
    return lsm.gather(1, t).neg_().view(targets.sizes());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor g = grads[0].reshape({-1, 1}).to(at::kFloat);  // (tokens, 1)
    // The saved log-softmax is this backward's alone (it runs once): it becomes the gradient.
    at::Tensor out = saved[0];
    out.exp_().mul_(g);                      // softmax * g
    out.scatter_add_(1, saved[1], g.neg());  // - onehot(target) * g
    auto shape = grads[0].sizes().vec();
    shape.push_back(out.size(1));
    return {out.view(shape), at::Tensor(), at::Tensor()};
  }
};

at::Tensor vocab_parallel_cross_entropy(const TpContext& tp, const at::Tensor& logits, const at::Tensor& targets,
                                        int64_t vocab_start, int64_t valid_vocab) {
  if (tp.size() == 1) return WholeVocabCE::apply(logits, targets, valid_vocab);
  return VocabParallelCE::apply(logits, targets, pack(tp), vocab_start, valid_vocab);
}

}  // namespace trident
