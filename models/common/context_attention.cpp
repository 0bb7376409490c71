// Attention over a context-parallel sequence: see context_attention.h.
#include "models/common/context_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <vector>

#include "core/context_split.h"
#include "models/common/attention.h"

namespace trident {

namespace {

// The sum over each query group of a (b, kv · group, n, d) gradient: (b, kv, n, d).
at::Tensor sum_heads(const at::Tensor& x, int64_t group) {
  if (group == 1) return x;
  return x.view({x.size(0), x.size(1) / group, group, x.size(2), x.size(3)}).sum(2);
}

// NOTE [ring steps]
// At step i of the ring, rank r holds the key/value block of rank
// j = (r − i) mod cp: chunks j and 2cp−1−j, while its queries are chunks r
// and 2cp−1−r (NOTE [context split]). Under the causal mask:
//   j = r (step 0): the block is the rank's own two chunks, in sequence order
//     with a gap, so the plain causal mask over the 2c local rows and columns
//     is exactly "key position <= query position";
//   j < r: chunk j precedes both query chunks (every query sees it) and chunk
//     2cp−1−j follows both (none sees it): all queries, the block's first half,
//     no mask;
//   j > r: chunk j and chunk 2cp−1−j both lie after chunk r and before chunk
//     2cp−1−r: only the second half of the queries sees the block, all of it,
//     no mask.
// So every step after the first computes half a block's products, the same
// amount on every rank: the load balance the zigzag split is for.
struct StepRule {
  int64_t q_begin, q_len, k_len;  // query rows [q_begin, q_begin + q_len), key columns [0, k_len)
  bool causal;
};

StepRule step_rule(int64_t r, int64_t j, int64_t l) {
  if (j == r) return {0, l, l, true};
  if (j < r) return {0, l, l / 2, false};
  return {l / 2, l / 2, l, false};
}

// fp32 scores of one step: (b, heads, rows, cols), the causal mask applied.
at::Tensor scores(const at::Tensor& q, const at::Tensor& k, bool causal, double scale) {
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)).mul_(scale);
  if (causal) {
    const at::Tensor future = at::ones({s.size(-2), s.size(-1)}, s.options().dtype(at::kBool)).triu(1);
    s.masked_fill_(future, -std::numeric_limits<float>::infinity());
  }
  return s;
}

// NOTE [ring step kernels]
// One step's attention of some query rows over some key columns, and its
// backward from the whole output and log-sum-exp. kFused: libtorch's flash
// attention for the CPU, which returns the log-sum-exp and whose backward
// takes it (the partial products stay in its tiles: memory linear in the
// block, not quadratic), grouped heads read in place. kExplicit: the same
// arithmetic in fp32 ATen products (scores, exp, matmuls), the form every
// device runs; on CUDA the fused kernels' log-sum-exp layouts differ per
// kernel (flash, memory-efficient), and they wait for a device to be tested on.
struct StepOut {
  at::Tensor out, lse;  // (b, heads, rows, d) fp32, (b, heads, rows) fp32
};

StepOut step_forward(RingKernel kernel, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                     double scale) {
  if (kernel == RingKernel::kFused) {
    auto [o, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, std::nullopt, scale);
    return {o.to(at::kFloat), lse};
  }
  const int64_t group = q.size(1) / k.size(1);
  const at::Tensor sc = scores(q.to(at::kFloat), repeat_kv_heads(k.to(at::kFloat), group), causal, scale);
  const at::Tensor lse = at::logsumexp(sc, -1);
  return {at::matmul(at::exp(sc - lse.unsqueeze(-1)), repeat_kv_heads(v.to(at::kFloat), group)), lse};
}

// The running output (fp32, zero) and log-sum-exp (−inf) of q's rows before any step.
void start_merge(const at::Tensor& q, at::Tensor& out, at::Tensor& lse) {
  out = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
  lse = at::full({q.size(0), q.size(1), q.size(2)}, -std::numeric_limits<float>::infinity(), q.options().dtype(at::kFloat));
}

// One step's partial output merged into the running one by log-sum-exp in fp32 (NOTE [ring
// attention]); the diagonal step comes first, so every row is finite after it.
void merge(at::Tensor& out, at::Tensor& lse, const StepRule& s, const StepOut& o) {
  at::Tensor o_rows = out.narrow(2, s.q_begin, s.q_len), lse_rows = lse.narrow(2, s.q_begin, s.q_len);
  const at::Tensor merged = at::logaddexp(lse_rows, o.lse);
  o_rows.copy_(o_rows * at::exp(lse_rows - merged).unsqueeze(-1) + o.out * at::exp(o.lse - merged).unsqueeze(-1));
  lse_rows.copy_(merged);
}

struct StepGrads {
  at::Tensor dq, dk, dv;  // fp32: (b, heads, rows, d), (b, kv, cols, d) twice
};

// dout, out: the step's rows of the whole output's gradient and of the whole
// output (fp32); lse: its rows of the whole log-sum-exp.
StepGrads step_backward(RingKernel kernel, const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                        const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, bool causal, double scale) {
  if (kernel == RingKernel::kFused) {
    const auto dt = q.scalar_type();
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        dout.to(dt).contiguous(), q, k, v, out.to(dt).contiguous(), lse.contiguous(), 0.0, causal, std::nullopt, scale);
    return {dq.to(at::kFloat), dk.to(at::kFloat), dv.to(at::kFloat)};
  }
  const int64_t group = q.size(1) / k.size(1);
  const at::Tensor qf = q.to(at::kFloat), kb = repeat_kv_heads(k.to(at::kFloat), group),
                   vb = repeat_kv_heads(v.to(at::kFloat), group);
  const at::Tensor p = at::exp(scores(qf, kb, causal, scale) - lse.unsqueeze(-1));
  const at::Tensor delta = (dout * out).sum(-1, /*keepdim=*/true);  // rowsum(dO ∘ O)
  const at::Tensor ds = p * (at::matmul(dout, vb.transpose(-2, -1)) - delta);
  return {at::matmul(ds, kb).mul_(scale), sum_heads(at::matmul(ds.transpose(-2, -1), qf).mul_(scale), group),
          sum_heads(at::matmul(p.transpose(-2, -1), dout), group)};
}

// NOTE [ring attention]
// The forward passes each rank's key/value block around the group (cp − 1
// transfers, the next one in flight while the current block's products run)
// and merges the partial outputs by their log-sum-exp in fp32: with the
// running (o, lse) and a step's (o_i, lse_i), lse' = log(e^lse + e^lse_i) and
// o' = e^(lse − lse')·o + e^(lse_i − lse')·o_i. The backward passes the blocks
// around again, each with a gradient accumulator one step behind it: step i
// adds this rank's dK/dV for the block it holds into the accumulator that
// came from the previous rank (which added its own at step i − 1 for the
// same block) and sends it on; after cp steps each accumulator arrives back
// at its block's rank with every rank's share. Each step's dQ, dK, dV come
// from the saved fp32 output and log-sum-exp of the whole (P = exp(S − lse),
// dS = P ∘ (dP − rowsum(dO ∘ O))), the flash-attention backward, so no step's
// probabilities are kept between forward and backward (NOTE [ring step kernels]).
struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const Group* g, int64_t kernel_id) {
    const auto kernel = static_cast<RingKernel>(kernel_id);
    const CpContext cp{g, CpComm::kP2p};
    const int64_t n = cp.size(), r = cp.rank(), l = q.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    at::Tensor out, lse;
    start_merge(q, out, lse);
    at::Tensor block = at::stack({k, v}).contiguous();  // (2, b, kv, 2c, d)
    for (int64_t i = 0; i < n; ++i) {
      std::optional<RingStep> step;
      at::Tensor next;
      if (i + 1 < n) {
        next = at::empty_like(block);
        step.emplace(cp, std::vector<at::Tensor>{block}, std::vector<at::Tensor>{next});
      }
      const StepRule s = step_rule(r, (r - i + n) % n, l);
      const StepOut o = step_forward(kernel, q.narrow(2, s.q_begin, s.q_len), block[0].narrow(2, 0, s.k_len),
                                     block[1].narrow(2, 0, s.k_len), s.causal, scale);
      merge(out, lse, s, o);
      if (step) {
        step->wait();
        block = next;
      }
    }
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(g);
    ctx->saved_data["kernel"] = kernel_id;
    ctx->save_for_backward({q, k, v, out, lse});
    return out.to(q.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const Group* g = reinterpret_cast<const Group*>(ctx->saved_data["group"].toInt());
    const auto kernel = static_cast<RingKernel>(ctx->saved_data["kernel"].toInt());
    const CpContext cp{g, CpComm::kP2p};
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const int64_t n = cp.size(), r = cp.rank(), l = q.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    const at::Tensor dout = grads[0].to(at::kFloat);
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
    at::Tensor block = at::stack({k, v}).contiguous();  // (2, b, kv, 2c, d)
    at::Tensor acc;                                     // (2, b, kv, 2c, d) fp32: the held block's dK, dV so far
    for (int64_t i = 0; i < n; ++i) {
      std::vector<at::Tensor> send, recv;
      at::Tensor next, acc_in;
      if (i + 1 < n) {
        next = at::empty_like(block);
        send.push_back(block);
        recv.push_back(next);
      }
      if (i > 0) {  // the accumulator of the block this rank now holds, from the rank that held it before
        acc_in = at::empty_like(acc);
        send.push_back(acc);
        recv.push_back(acc_in);
      }
      std::optional<RingStep> step;
      if (!send.empty()) step.emplace(cp, send, recv);
      const StepRule s = step_rule(r, (r - i + n) % n, l);
      const auto rows = [&](const at::Tensor& t) { return t.narrow(2, s.q_begin, s.q_len); };
      const StepGrads d = step_backward(kernel, rows(dout), rows(q), block[0].narrow(2, 0, s.k_len),
                                        block[1].narrow(2, 0, s.k_len), rows(out), rows(lse), s.causal, scale);
      rows(dq).add_(d.dq);
      at::Tensor mine = at::zeros({2, k.size(0), k.size(1), l, k.size(3)}, dq.options());
      mine[0].narrow(2, 0, s.k_len).copy_(d.dk);
      mine[1].narrow(2, 0, s.k_len).copy_(d.dv);
      if (step) step->wait();
      acc = i > 0 ? acc_in.add_(mine) : mine;
      if (next.defined()) block = next;
    }
    at::Tensor home = at::empty_like(acc);  // every rank's share of this rank's own block
    RingStep last(cp, {acc}, {home});
    last.wait();
    return {dq.to(q.scalar_type()), home[0].to(k.scalar_type()), home[1].to(v.scalar_type()), at::Tensor(),
            at::Tensor()};
  }
};

// NOTE [gathered attention]
// parallel.cp_comm = "all_gather": one all-gather brings every rank's key/value
// block (what Llama 3 did), then the ring's steps run against the gathered
// blocks with no further transfer, each with its causal rule (NOTE [ring
// steps]) and its partial output merged by log-sum-exp (NOTE [ring
// attention]); the backward computes each block's dK/dV here and one
// reduce-scatter sums every rank's share into each block's owner. The
// gathered keys and values stay for the backward: this kind's memory is the
// whole sequence's K/V per layer, the ring's is one block.
struct GatheredAttention : torch::autograd::Function<GatheredAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const Group* g, int64_t kernel_id) {
    const auto kernel = static_cast<RingKernel>(kernel_id);
    const int64_t n = g->size(), r = g->rank, l = q.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    at::Tensor mine = at::stack({k, v}).contiguous();  // (2, b, kv, 2c, d)
    std::vector<int64_t> shape = mine.sizes().vec();
    shape.insert(shape.begin(), n);
    at::Tensor blocks = at::empty(shape, mine.options());  // (cp, 2, b, kv, 2c, d), group order
    all_gather_into(*g, blocks, mine);
    at::Tensor out, lse;
    start_merge(q, out, lse);
    for (int64_t i = 0; i < n; ++i) {  // the diagonal block first, as in the ring
      const int64_t j = (r - i + n) % n;
      const StepRule s = step_rule(r, j, l);
      const StepOut o = step_forward(kernel, q.narrow(2, s.q_begin, s.q_len), blocks[j][0].narrow(2, 0, s.k_len),
                                     blocks[j][1].narrow(2, 0, s.k_len), s.causal, scale);
      merge(out, lse, s, o);
    }
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(g);
    ctx->saved_data["kernel"] = kernel_id;
    ctx->save_for_backward({q, blocks, out, lse});
    return out.to(q.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const Group* g = reinterpret_cast<const Group*>(ctx->saved_data["group"].toInt());
    const auto kernel = static_cast<RingKernel>(ctx->saved_data["kernel"].toInt());
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &blocks = saved[1], &out = saved[2], &lse = saved[3];
    const int64_t n = g->size(), r = g->rank, l = q.size(2);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    const at::Tensor dout = grads[0].to(at::kFloat);
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
    at::Tensor dblocks = at::zeros(blocks.sizes(), blocks.options().dtype(at::kFloat));  // every block's dK, dV from here
    for (int64_t j = 0; j < n; ++j) {
      const StepRule s = step_rule(r, j, l);
      const auto rows = [&](const at::Tensor& t) { return t.narrow(2, s.q_begin, s.q_len); };
      const StepGrads d = step_backward(kernel, rows(dout), rows(q), blocks[j][0].narrow(2, 0, s.k_len),
                                        blocks[j][1].narrow(2, 0, s.k_len), rows(out), rows(lse), s.causal, scale);
      rows(dq).add_(d.dq);
      dblocks[j][0].narrow(2, 0, s.k_len).copy_(d.dk);
      dblocks[j][1].narrow(2, 0, s.k_len).copy_(d.dv);
    }
    at::Tensor home = at::empty(dblocks.sizes().slice(1), dblocks.options());  // (2, b, kv, 2c, d)
    reduce_scatter(*g, home, dblocks);
    return {dq.to(q.scalar_type()), home[0].to(blocks.scalar_type()), home[1].to(blocks.scalar_type()), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor ring_attention(const CpContext& cp, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          RingKernel kernel) {
  if (kernel == RingKernel::kFused && !q.device().is_cpu())
    throw std::invalid_argument("ring_attention: the fused step kernel is the CPU's (NOTE [ring step kernels])");
  return RingAttention::apply(q, k, v, cp.group, static_cast<int64_t>(kernel));
}

at::Tensor context_attention(const CpContext& cp, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (cp.size() == 1) return causal_attention(q, k, v, 0.0);
  switch (cp.comm) {
    case CpComm::kP2p:
      return ring_attention(cp, q, k, v, q.device().is_cpu() ? RingKernel::kFused : RingKernel::kExplicit);
    case CpComm::kAllGather:
      return GatheredAttention::apply(q, k, v, cp.group,
                                      static_cast<int64_t>(q.device().is_cpu() ? RingKernel::kFused : RingKernel::kExplicit));
    case CpComm::kA2a:
      // Ulysses: this rank's share of the heads over the whole sequence, in order.
      return cp_sequence_to_heads(
          cp, causal_attention(cp_heads_to_sequence(cp, q), cp_heads_to_sequence(cp, k), cp_heads_to_sequence(cp, v), 0.0));
  }
  throw std::logic_error("context_attention: unknown cp_comm");
}

}  // namespace trident
