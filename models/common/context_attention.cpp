// Attention over a context-parallel sequence: see context_attention.h.
#include "models/common/context_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/context_split.h"
#include "models/common/document_attention.h"
#include "models/common/attention.h"
#include "parallel/autograd_group.h"

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
DocumentSpan step_rule(int64_t r, int64_t j, int64_t l) {
  if (j == r) return {0, l, 0, l, true};
  if (j < r) return {0, l, 0, l / 2, false};
  return {l / 2, l / 2, 0, l, false};
}

// 1 / sqrt(head width): the scale of every step's scores.
double softmax_scale(const at::Tensor& q) { return 1.0 / std::sqrt(static_cast<double>(q.size(3))); }

// One product of a step: batch rows [b_begin, b_begin + b_len) at one span.
// Without documents a step is one piece over every row (NOTE [ring steps]);
// with them, each run of rows alike in layout gets its documents' spans (NOTE
// [documents under context parallelism] in core/context_split.h).
struct Piece {
  int64_t b_begin, b_len;
  DocumentSpan span;
  // The piece's query rows of a (b, heads, rows, ...) tensor; its key columns of a (b, kv, cols, d) one.
  at::Tensor rows(const at::Tensor& t) const { return t.narrow(0, b_begin, b_len).narrow(2, span.q_begin, span.q_len); }
  at::Tensor cols(const at::Tensor& t) const { return t.narrow(0, b_begin, b_len).narrow(2, span.k_begin, span.k_len); }
};

std::vector<Piece> step_pieces(int64_t r, int64_t j, int64_t n, const at::Tensor& q, const DocumentLengths& docs) {
  if (docs.empty()) return {Piece{0, q.size(0), step_rule(r, j, q.size(2))}};
  std::vector<Piece> out;
  for (size_t b = 0, end = 0; b < docs.size(); b = end) {
    for (end = b + 1; end < docs.size() && docs[end] == docs[b];) ++end;
    for (const DocumentSpan& span : document_spans(docs[b], n, r, j))
      out.push_back({static_cast<int64_t>(b), static_cast<int64_t>(end - b), span});
  }
  return out;
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

// One piece's partial output merged into the running one by log-sum-exp in fp32 (NOTE [ring
// attention]); the diagonal step comes first, and every row sees itself there, so every row is
// finite after it. A row no piece of a step covers is left as it is.
void merge(at::Tensor& out, at::Tensor& lse, const Piece& p, const StepOut& o) {
  at::Tensor o_rows = p.rows(out), lse_rows = p.rows(lse);
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
// The loop over a rank's key/value blocks is one, whatever brings them (a
// KvSource: the ring's transfers or one all-gather): the diagonal block first,
// each step's partial output merged by its log-sum-exp in fp32 (with the
// running (o, lse) and a step's (o_i, lse_i), lse' = log(e^lse + e^lse_i) and
// o' = e^(lse − lse')·o + e^(lse_i − lse')·o_i). The ring passes each block to
// the next rank, the next in flight while the current one's products run; its
// backward passes the blocks around again, each with a dK/dV accumulator one
// step behind that every rank adds its share to, home after cp steps. Each
// step's dQ, dK, dV come from the saved fp32 output and log-sum-exp (P =
// exp(S − lse), dS = P ∘ (dP − rowsum(dO ∘ O)), the flash-attention backward),
// so no step's probabilities are kept (NOTE [ring step kernels]).
//
// NOTE [gathered attention]
// parallel.cp_comm = "all_gather": one all-gather brings every rank's block
// (what Llama 3 did) and the loop runs against them with no further transfer;
// the backward keeps each block's dK/dV and one reduce-scatter sums every
// rank's share into its owner. The gathered blocks stay for the backward: the
// whole sequence's K/V per layer, where the ring holds one block.
class KvSource {
 public:
  virtual ~KvSource() = default;
  // The rank whose block step i meets: the diagonal first in the forward (and the ring's backward).
  virtual int64_t block_of(int64_t i, int64_t n, int64_t r, bool backward) const = 0;
  // Step i's block (2, b, kv, 2c, d), transfers for the next step posted.
  virtual at::Tensor start(int64_t i, int64_t n, bool backward) = 0;
  // After step i's products: `grads` (2, b, kv, 2c, d) fp32 this rank's dK, dV for block j in the
  // backward (undefined in the forward); the step's transfers finished.
  virtual void finish(int64_t j, const at::Tensor& grads) = 0;
  // After the backward's steps: every rank's share of this rank's own block's dK, dV.
  virtual at::Tensor home() = 0;
};

// parallel.cp_comm = "p2p": the blocks around the ring (NOTE [ring order] in parallel/context_parallel.cpp).
class RingSource : public KvSource {
 public:
  RingSource(const Group* g, at::Tensor own) : cp_{g, CpComm::kP2p}, block_(std::move(own)) {}
  int64_t block_of(int64_t i, int64_t n, int64_t r, bool) const override { return (r - i + n) % n; }
  at::Tensor start(int64_t i, int64_t n, bool backward) override {
    std::vector<at::Tensor> send, recv;
    next_ = at::Tensor();
    if (i + 1 < n) {
      next_ = at::empty_like(block_);
      send.push_back(block_);
      recv.push_back(next_);
    }
    if (backward && i > 0) {  // the held block's accumulator, from the rank that held it before
      acc_in_ = at::empty_like(acc_);
      send.push_back(acc_);
      recv.push_back(acc_in_);
    }
    step_.reset();
    if (!send.empty()) step_.emplace(cp_, send, recv);
    return block_;
  }
  void finish(int64_t /*j*/, const at::Tensor& grads) override {
    if (step_) step_->wait();
    if (grads.defined()) acc_ = acc_in_.defined() ? acc_in_.add_(grads) : grads;
    acc_in_ = at::Tensor();
    if (next_.defined()) block_ = next_;
  }
  at::Tensor home() override {
    at::Tensor home = at::empty_like(acc_);
    RingStep last(cp_, {acc_}, {home});
    last.wait();
    return home;
  }

 private:
  CpContext cp_;
  at::Tensor block_, next_, acc_, acc_in_;
  std::optional<RingStep> step_;
};

// parallel.cp_comm = "all_gather": every rank's block at once (NOTE [gathered attention]).
class GatheredSource : public KvSource {
 public:
  GatheredSource(const Group* g, at::Tensor blocks) : group_(g), blocks_(std::move(blocks)) {}
  // (cp, 2, b, kv, 2c, d) in group order from this rank's (2, b, kv, 2c, d).
  static at::Tensor gather(const Group& g, const at::Tensor& own) {
    std::vector<int64_t> shape = own.sizes().vec();
    shape.insert(shape.begin(), g.size());
    at::Tensor blocks = at::empty(shape, own.options()), mine = own;
    all_gather_into(g, blocks, mine);
    return blocks;
  }
  int64_t block_of(int64_t i, int64_t n, int64_t r, bool backward) const override {
    return backward ? i : (r - i + n) % n;
  }
  at::Tensor start(int64_t i, int64_t n, bool backward) override {
    if (backward && !grads_.defined()) grads_ = at::zeros(blocks_.sizes(), blocks_.options().dtype(at::kFloat));
    return blocks_[block_of(i, n, group_->rank, backward)];
  }
  void finish(int64_t j, const at::Tensor& grads) override {
    if (grads.defined()) grads_[j].copy_(grads);
  }
  at::Tensor home() override {
    at::Tensor home = at::empty(grads_.sizes().slice(1), grads_.options());  // (2, b, kv, 2c, d)
    reduce_scatter(*group_, home, grads_);
    return home;
  }

 private:
  const Group* group_;
  at::Tensor blocks_, grads_;
};

std::unique_ptr<KvSource> kv_source(CpComm comm, const Group* g, const at::Tensor& kv) {
  if (comm == CpComm::kAllGather) return std::make_unique<GatheredSource>(g, kv);
  return std::make_unique<RingSource>(g, kv);
}

// The forward's loop: the fp32 output and log-sum-exp of q's rows over every block.
// Every step's transfers run whatever its pieces (none, with documents apart).
std::pair<at::Tensor, at::Tensor> attend(RingKernel kernel, const at::Tensor& q, KvSource& src, int64_t n, int64_t r,
                                         const DocumentLengths& docs) {
  const double scale = softmax_scale(q);
  at::Tensor out, lse;
  start_merge(q, out, lse);
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor block = src.start(i, n, false);
    for (const Piece& p : step_pieces(r, src.block_of(i, n, r, false), n, q, docs))
      merge(out, lse, p,
            step_forward(kernel, p.rows(q), p.cols(block[0]), p.cols(block[1]), p.span.causal, scale));
    src.finish(0, at::Tensor());
  }
  return {out, lse};
}

// The backward's loop: dq (fp32) and every rank's share of this rank's block's dK, dV (2, ...).
std::pair<at::Tensor, at::Tensor> attend_backward(RingKernel kernel, const at::Tensor& dout, const at::Tensor& q,
                                                  const at::Tensor& out, const at::Tensor& lse, const at::Tensor& own,
                                                  KvSource& src, int64_t n, int64_t r, const DocumentLengths& docs) {
  const double scale = softmax_scale(q);
  at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor block = src.start(i, n, true);
    const int64_t j = src.block_of(i, n, r, true);
    at::Tensor mine = at::zeros(own.sizes(), dq.options());  // (2, b, kv, 2c, d)
    for (const Piece& p : step_pieces(r, j, n, q, docs)) {
      const StepGrads d = step_backward(kernel, p.rows(dout), p.rows(q), p.cols(block[0]), p.cols(block[1]),
                                        p.rows(out), p.rows(lse), p.span.causal, scale);
      p.rows(dq).add_(d.dq);
      p.cols(mine[0]).add_(d.dk);
      p.cols(mine[1]).add_(d.dv);
    }
    src.finish(j, mine);  // passed on (the ring) or kept (gathered) with no piece too
  }
  return {dq, src.home()};
}

// A micro-batch's document lengths as one list (rows, then each row's count and lengths), the
// form the autograd context keeps; empty: no documents.
std::vector<int64_t> flatten(const DocumentLengths& docs) {
  if (docs.empty()) return {};
  std::vector<int64_t> flat{static_cast<int64_t>(docs.size())};
  for (const std::vector<int64_t>& row : docs) {
    flat.push_back(static_cast<int64_t>(row.size()));
    flat.insert(flat.end(), row.begin(), row.end());
  }
  return flat;
}

DocumentLengths unflatten(const std::vector<int64_t>& flat) {
  DocumentLengths docs(flat.empty() ? 0 : static_cast<size_t>(flat[0]));
  size_t at = 1;
  for (std::vector<int64_t>& row : docs) {
    const auto count = static_cast<size_t>(flat[at++]);
    row.assign(flat.begin() + static_cast<std::ptrdiff_t>(at), flat.begin() + static_cast<std::ptrdiff_t>(at + count));
    at += count;
  }
  return docs;
}

// Attention over this rank's chunks against every rank's key/value blocks, by the source
// parallel.cp_comm names (NOTE [ring attention]), inside documents where `docs` lists them.
// Saved: q, the source's blocks (the ring: this rank's own; gathered: every rank's), the fp32
// output and log-sum-exp.
struct ContextAttentionFn : torch::autograd::Function<ContextAttentionFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const Group* g, int64_t comm, int64_t kernel,
                            const std::vector<int64_t>& docs) {
    const at::Tensor own = at::stack({k, v}).contiguous();  // (2, b, kv, 2c, d)
    const auto kind = static_cast<CpComm>(comm);
    const at::Tensor kv = kind == CpComm::kAllGather ? GatheredSource::gather(*g, own) : own;
    const auto src = kv_source(kind, g, kv);
    const auto [out, lse] = attend(static_cast<RingKernel>(kernel), q, *src, g->size(), g->rank, unflatten(docs));
    ctx->saved_data["group"] = pack_group(g);
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["docs"] = docs;
    ctx->save_for_backward({q, kv, out, lse});
    return out.to(q.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const Group& g = unpack_group(ctx->saved_data["group"]);
    const auto kind = static_cast<CpComm>(ctx->saved_data["comm"].toInt());
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &kv = saved[1], &out = saved[2], &lse = saved[3];
    const auto src = kv_source(kind, &g, kv);
    const at::Tensor own_shape = kind == CpComm::kAllGather ? kv[0] : kv;
    const auto [dq, home] = attend_backward(static_cast<RingKernel>(ctx->saved_data["kernel"].toInt()),
                                            grads[0].to(at::kFloat), q, out, lse, own_shape, *src, g.size(), g.rank,
                                            unflatten(ctx->saved_data["docs"].toIntVector()));
    return {dq.to(q.scalar_type()), home[0].to(kv.scalar_type()), home[1].to(kv.scalar_type()), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The documents a context-parallel call computes inside: none (the plain causal path, bit for
// bit) where every row is one document. Throws std::invalid_argument where they do not
// describe the whole sequences q's chunks are cut from.
std::vector<int64_t> checked_documents(const CpContext& cp, const at::Tensor& q, const DocumentLengths* docs) {
  if (docs == nullptr || undivided(*docs)) return {};
  const int64_t s = q.size(2) * cp.size();
  if (static_cast<int64_t>(docs->size()) != q.size(0))
    throw std::invalid_argument("context_attention: " + std::to_string(docs->size()) + " rows of documents for " +
                                std::to_string(q.size(0)) + " rows of queries");
  for (const std::vector<int64_t>& row : *docs) {
    int64_t total = 0;
    for (int64_t len : row) total += len > 0 ? len : s + 1;  // an empty document fails the sum
    if (total != s)
      throw std::invalid_argument("context_attention: documents of " + std::to_string(total) +
                                  " tokens (or an empty one) for sequences of " + std::to_string(s));
  }
  return flatten(*docs);
}

at::Tensor apply(const CpContext& cp, CpComm comm, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 RingKernel kernel, const DocumentLengths* docs) {
  return ContextAttentionFn::apply(q, k, v, cp.group, static_cast<int64_t>(comm), static_cast<int64_t>(kernel),
                                   checked_documents(cp, q, docs));
}

RingKernel default_kernel(const at::Tensor& q) { return q.device().is_cpu() ? RingKernel::kFused : RingKernel::kExplicit; }

}  // namespace

at::Tensor ring_attention(const CpContext& cp, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          RingKernel kernel, const DocumentLengths* docs) {
  if (kernel == RingKernel::kFused && !q.device().is_cpu())
    throw std::invalid_argument("ring_attention: the fused step kernel is the CPU's (NOTE [ring step kernels])");
  return apply(cp, CpComm::kP2p, q, k, v, kernel, docs);
}

at::Tensor context_attention(const CpContext& cp, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (cp.size() == 1) return causal_attention(q, k, v, 0.0);
  switch (cp.comm) {
    case CpComm::kP2p:
      return ring_attention(cp, q, k, v, default_kernel(q));
    case CpComm::kAllGather:
      return apply(cp, CpComm::kAllGather, q, k, v, default_kernel(q), nullptr);
    case CpComm::kA2a:
      // Ulysses: this rank's share of the heads over the whole sequence, in order.
      return cp_sequence_to_heads(
          cp, causal_attention(cp_heads_to_sequence(cp, q), cp_heads_to_sequence(cp, k), cp_heads_to_sequence(cp, v), 0.0));
  }
  throw std::logic_error("context_attention: unknown cp_comm");
}

at::Tensor context_attention(const CpContext& cp, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const DocumentLengths& docs) {
  if (cp.size() == 1) return document_attention(q, k, v, docs, 0.0);
  if (undivided(docs)) return context_attention(cp, q, k, v);  // today's path, bit for bit
  switch (cp.comm) {
    case CpComm::kP2p:
    case CpComm::kAllGather:
      return apply(cp, cp.comm, q, k, v, default_kernel(q), &docs);
    case CpComm::kA2a:  // the whole sequence in order: one process's documents
      return cp_sequence_to_heads(cp, document_attention(cp_heads_to_sequence(cp, q), cp_heads_to_sequence(cp, k),
                                                         cp_heads_to_sequence(cp, v), docs, 0.0));
  }
  throw std::logic_error("context_attention: unknown cp_comm");
}

}  // namespace trident
