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

// (b, kv, n, d) -> (b, kv · group, n, d): each key/value head for its query group.
at::Tensor repeat_heads(const at::Tensor& x, int64_t group) {
  if (group == 1) return x;
  const int64_t b = x.size(0), kv = x.size(1), n = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({b, kv, group, n, d}).reshape({b, kv * group, n, d});
}

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
// from the saved fp32 output and log-sum-exp (P = exp(S − lse), dS =
// P ∘ (dP − rowsum(dO ∘ O))), the flash-attention backward, so no step's
// probabilities are kept between forward and backward.
struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const Group* g) {
    const CpContext cp{g, CpComm::kP2p};
    const int64_t n = cp.size(), r = cp.rank(), l = q.size(2), group = q.size(1) / k.size(1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    const at::Tensor qf = q.to(at::kFloat);
    at::Tensor out = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
    at::Tensor lse = at::full({q.size(0), q.size(1), l}, -std::numeric_limits<float>::infinity(),
                              q.options().dtype(at::kFloat));
    at::Tensor block = at::stack({k, v}).contiguous();  // (2, b, kv, 2c, d)
    for (int64_t i = 0; i < n; ++i) {
      std::optional<RingStep> step;
      at::Tensor next;
      if (i + 1 < n) {
        next = at::empty_like(block);
        step.emplace(cp, std::vector<at::Tensor>{block}, std::vector<at::Tensor>{next});
      }
      const StepRule s = step_rule(r, (r - i + n) % n, l);
      const at::Tensor kb = repeat_heads(block[0].narrow(2, 0, s.k_len).to(at::kFloat), group);
      const at::Tensor vb = repeat_heads(block[1].narrow(2, 0, s.k_len).to(at::kFloat), group);
      const at::Tensor sc = scores(qf.narrow(2, s.q_begin, s.q_len), kb, s.causal, scale);
      const at::Tensor lse_i = at::logsumexp(sc, -1);
      const at::Tensor o_i = at::matmul(at::exp(sc - lse_i.unsqueeze(-1)), vb);
      at::Tensor o_rows = out.narrow(2, s.q_begin, s.q_len), lse_rows = lse.narrow(2, s.q_begin, s.q_len);
      const at::Tensor merged = at::logaddexp(lse_rows, lse_i);  // step 0 comes first: every row finite after it
      o_rows.copy_(o_rows * at::exp(lse_rows - merged).unsqueeze(-1) + o_i * at::exp(lse_i - merged).unsqueeze(-1));
      lse_rows.copy_(merged);
      if (step) {
        step->wait();
        block = next;
      }
    }
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(g);
    ctx->save_for_backward({q, k, v, out, lse});
    return out.to(q.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const Group* g = reinterpret_cast<const Group*>(ctx->saved_data["group"].toInt());
    const CpContext cp{g, CpComm::kP2p};
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const int64_t n = cp.size(), r = cp.rank(), l = q.size(2), group = q.size(1) / k.size(1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    const at::Tensor qf = q.to(at::kFloat), dout = grads[0].to(at::kFloat);
    const at::Tensor delta = (dout * out).sum(-1);  // rowsum(dO ∘ O), (b, heads, 2c)
    at::Tensor dq = at::zeros_like(qf);
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
      const at::Tensor kb = repeat_heads(block[0].narrow(2, 0, s.k_len).to(at::kFloat), group);
      const at::Tensor vb = repeat_heads(block[1].narrow(2, 0, s.k_len).to(at::kFloat), group);
      const at::Tensor qs = qf.narrow(2, s.q_begin, s.q_len), dos = dout.narrow(2, s.q_begin, s.q_len);
      const at::Tensor p = at::exp(scores(qs, kb, s.causal, scale) - lse.narrow(2, s.q_begin, s.q_len).unsqueeze(-1));
      const at::Tensor dv = at::matmul(p.transpose(-2, -1), dos);
      const at::Tensor ds = p * (at::matmul(dos, vb.transpose(-2, -1)) - delta.narrow(2, s.q_begin, s.q_len).unsqueeze(-1));
      dq.narrow(2, s.q_begin, s.q_len).add_(at::matmul(ds, kb), scale);
      const at::Tensor dk = at::matmul(ds.transpose(-2, -1), qs).mul_(scale);
      at::Tensor mine = at::zeros({2, k.size(0), k.size(1), l, k.size(3)}, qf.options());
      mine[0].narrow(2, 0, s.k_len).copy_(sum_heads(dk, group));
      mine[1].narrow(2, 0, s.k_len).copy_(sum_heads(dv, group));
      if (step) step->wait();
      acc = i > 0 ? acc_in.add_(mine) : mine;
      if (next.defined()) block = next;
    }
    at::Tensor home = at::empty_like(acc);  // every rank's share of this rank's own block
    RingStep last(cp, {acc}, {home});
    last.wait();
    return {dq.to(q.scalar_type()), home[0].to(k.scalar_type()), home[1].to(v.scalar_type()), at::Tensor()};
  }
};

}  // namespace

at::Tensor context_attention(const CpContext& cp, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (cp.size() == 1) return causal_attention(q, k, v, 0.0);
  switch (cp.comm) {
    case CpComm::kP2p:
      return RingAttention::apply(q, k, v, cp.group);
    case CpComm::kAllGather: {
      // Every key and value of the sequence; the queries' real positions for the causal rule.
      const int64_t l = q.size(2), s = l * cp.size();
      const std::vector<int64_t> pos = context_positions(s, cp.size(), cp.rank());
      const at::Tensor qpos = at::tensor(pos, at::TensorOptions().dtype(at::kLong)).to(q.device());
      const at::Tensor visible = at::arange(s, qpos.options()).unsqueeze(0) <= qpos.unsqueeze(1);  // (2c, s)
      const int64_t group = q.size(1) / k.size(1);
      return at::scaled_dot_product_attention(q, repeat_heads(cp_gather_sequence(cp, k), group),
                                              repeat_heads(cp_gather_sequence(cp, v), group), visible);
    }
    case CpComm::kA2a:
      // Ulysses: this rank's share of the heads over the whole sequence, in order.
      return cp_sequence_to_heads(
          cp, causal_attention(cp_heads_to_sequence(cp, q), cp_heads_to_sequence(cp, k), cp_heads_to_sequence(cp, v), 0.0));
  }
  throw std::logic_error("context_attention: unknown cp_comm");
}

}  // namespace trident
