// Worker for test_tensor_parallel: every TP mapping and layer of
// parallel/tensor_parallel.h, and a whole GptStage, at tp = world against the
// dense single-process computation that every rank repeats on the same full
// tensors. Prints "PASS <check> max_err=<e>" per check; the first failure
// prints "FAIL ..." and exits 1. Run as:
//   trident launch --nproc-per-node T -- mp_tensor_parallel
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>

#include "models/gpt/gpt.h"
#include "parallel/process_groups.h"
#include "parallel/tensor_parallel.h"

namespace trident {
namespace {

constexpr double kTol = 1e-6;  // fp32 layer checks (error scaled as in err())

// The same "random" tensor on every rank: a function of `seed` only.
at::Tensor rnd(std::vector<int64_t> shape, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat));
}

at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().set_requires_grad(true); }

// max |a - b| / max(1, max |b|): absolute error for O(1) values, relative
// above. Shapes must match exactly (a silent broadcast would hide bugs).
double err(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined()) throw std::runtime_error("undefined tensor in comparison");
  if (a.sizes() != b.sizes()) {
    std::ostringstream os;
    os << "shape " << a.sizes() << " != expected " << b.sizes();
    throw std::runtime_error(os.str());
  }
  const double scale = std::max(1.0, b.abs().max().item<double>());
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / scale;
}

class Checker {
 public:
  explicit Checker(int tp) : tp_(tp) {}
  // Records the worst of several comparisons under one check name.
  void expect(const std::string& name, std::initializer_list<double> errs, double tol = kTol) {
    double worst = 0;
    for (double e : errs) worst = std::isnan(e) || std::isnan(worst) ? NAN : std::max(worst, e);
    if (!(worst <= tol)) {  // also catches NaN
      std::ostringstream os;
      os << name << " at tp=" << tp_ << ": max_err=" << worst << " exceeds " << tol;
      throw std::runtime_error(os.str());
    }
    std::printf("PASS %s max_err=%.3g\n", name.c_str(), worst);
    std::fflush(stdout);
  }

 private:
  int tp_;
};

// Slice `part` of `parts` along dim (the shard TP rank `part` holds).
at::Tensor part_of(const at::Tensor& t, int64_t dim, int parts, int part) {
  const int64_t n = t.size(dim) / parts;
  return t.narrow(dim, part * n, n);
}

std::string sp_name(const std::string& base, bool sp) { return base + (sp ? "/sp" : ""); }

// --- Mappings ------------------------------------------------------------------
void check_mappings(const TpContext& tp, Checker& c) {
  const int T = tp.size(), r = tp.rank();
  const int64_t b = 2, s = 8, h = 4 * T;
  const at::Tensor X = rnd({b, s, h}, 11), G = rnd({b, s, h}, 12);
  // Per-rank tensors (partial sums); every rank can rebuild all of them.
  auto per_rank = [&](uint64_t seed, int k) { return rnd({b, s, h}, seed + 1000 * (k + 1)); };
  auto sum_over_ranks = [&](uint64_t seed) {
    at::Tensor acc = at::zeros({b, s, h});
    for (int k = 0; k < T; ++k) acc += per_rank(seed, k);
    return acc;
  };
  {  // copy_to_tp: identity, backward sums the ranks' gradients
    at::Tensor x = leaf(X);
    at::Tensor y = copy_to_tp(tp, x);
    y.backward(per_rank(13, r));
    c.expect("copy_to_tp", {err(y, X), err(x.grad(), sum_over_ranks(13))});
  }
  {  // reduce_from_tp: sums the ranks' inputs, backward identity
    at::Tensor x = leaf(per_rank(14, r));
    at::Tensor y = reduce_from_tp(tp, x);
    y.backward(G);
    c.expect("reduce_from_tp", {err(y, sum_over_ranks(14)), err(x.grad(), G)});
  }
  {  // scatter_last_dim: keeps this rank's columns, backward gathers them
    at::Tensor x = leaf(X);
    at::Tensor y = scatter_last_dim(tp, x);
    y.backward(part_of(G, 2, T, r).contiguous());
    c.expect("scatter_last_dim", {err(y, part_of(X, 2, T, r)), err(x.grad(), G)});
  }
  {  // gather_last_dim: rebuilds the full columns, backward keeps this rank's
    at::Tensor x = leaf(part_of(X, 2, T, r));
    at::Tensor y = gather_last_dim(tp, x);
    y.backward(G);
    c.expect("gather_last_dim", {err(y, X), err(x.grad(), part_of(G, 2, T, r))});
  }
  {  // gather_seq: all-gather along seq, backward reduce-scatters partial grads
    at::Tensor x = leaf(part_of(X, 1, T, r));
    at::Tensor y = gather_seq(tp, x);
    y.backward(per_rank(15, r));
    c.expect("gather_seq", {err(y, X), err(x.grad(), part_of(sum_over_ranks(15), 1, T, r))});
  }
  {  // reduce_scatter_seq: this rank's seq slice of the sum, backward all-gathers
    at::Tensor x = leaf(per_rank(16, r));
    at::Tensor y = reduce_scatter_seq(tp, x);
    y.backward(part_of(G, 1, T, r).contiguous());
    c.expect("reduce_scatter_seq", {err(y, part_of(sum_over_ranks(16), 1, T, r)), err(x.grad(), G)});
  }
  {  // scatter_seq: keeps this rank's seq slice, backward all-gathers
    at::Tensor x = leaf(X);
    at::Tensor y = scatter_seq(tp, x);
    y.backward(part_of(G, 1, T, r).contiguous());
    c.expect("scatter_seq", {err(y, part_of(X, 1, T, r)), err(x.grad(), G)});
  }
}

// --- Linear layers ---------------------------------------------------------------
struct Dense {  // y = x W^T + b and its gradients under upstream G
  at::Tensor y, dx, dw, db;
};
Dense dense_linear(const at::Tensor& X, const at::Tensor& W, const at::Tensor& B, const at::Tensor& G) {
  at::Tensor x = leaf(X), w = leaf(W), b = leaf(B);
  at::Tensor y = at::linear(x, w, b);
  y.backward(G);
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

// x (2, 8, 16) -> y (2, 8, 8T); W (8T, 16) split by rows.
void check_column(const TpContext& tp, bool gather_output, Checker& c) {
  const int T = tp.size(), r = tp.rank();
  const bool sp = tp.sequence_parallel;
  const at::Tensor X = rnd({2, 8, 16}, 21), W = rnd({8 * T, 16}, 22), B = rnd({8 * T}, 23),
                   G = rnd({2, 8, 8 * T}, 24);
  const Dense d = dense_linear(X, W, B, G);
  at::Tensor x = leaf(sp ? part_of(X, 1, T, r) : X);  // (2, 8[/T], 16)
  at::Tensor w = leaf(part_of(W, 0, T, r)), b = leaf(part_of(B, 0, T, r));
  at::Tensor y = column_parallel_linear(tp, x, w, b, gather_output);
  y.backward(gather_output ? G : part_of(G, 2, T, r).contiguous());
  c.expect(sp_name(gather_output ? "column_parallel_linear/gather" : "column_parallel_linear", sp),
           {err(y, gather_output ? d.y : part_of(d.y, 2, T, r)),
            err(x.grad(), sp ? part_of(d.dx, 1, T, r) : d.dx), err(w.grad(), part_of(d.dw, 0, T, r)),
            err(b.grad(), part_of(d.db, 0, T, r))});
}

// x (2, 8, 8T) split along its last dim -> y (2, 8[/T], 16); W (16, 8T) split by columns.
void check_row(const TpContext& tp, Checker& c) {
  const int T = tp.size(), r = tp.rank();
  const bool sp = tp.sequence_parallel;
  const at::Tensor X = rnd({2, 8, 8 * T}, 31), W = rnd({16, 8 * T}, 32), B = rnd({16}, 33),
                   G = rnd({2, 8, 16}, 34);
  const Dense d = dense_linear(X, W, B, G);
  at::Tensor x = leaf(part_of(X, 2, T, r)), w = leaf(part_of(W, 1, T, r)), b = leaf(B);
  at::Tensor y = row_parallel_linear(tp, x, w, b);
  y.backward(sp ? part_of(G, 1, T, r).contiguous() : G);
  // Under SP the replicated bias sees only this rank's tokens: its gradient is
  // a partial sum that the trainer all-reduces over TP (sequence_parallel_grad).
  at::Tensor db = b.grad().clone();
  if (sp) all_reduce(*tp.group, db);
  c.expect(sp_name("row_parallel_linear", sp),
           {err(y, sp ? part_of(d.y, 1, T, r) : d.y), err(x.grad(), part_of(d.dx, 2, T, r)),
            err(w.grad(), part_of(d.dw, 1, T, r)), err(db, d.db)});
}

// Two micro-batches through a column- then row-parallel layer, with and
// without a WeightGradQueue: input grads immediately, weight grads only after
// run(), and then bit-identical to the undeferred ones.
void check_deferred(const TpContext& tp, Checker& c) {
  const int T = tp.size(), r = tp.rank();
  const bool sp = tp.sequence_parallel;
  const at::Tensor W1 = part_of(rnd({8 * T, 16}, 41), 0, T, r), B1 = part_of(rnd({8 * T}, 42), 0, T, r);
  const at::Tensor W2 = part_of(rnd({16, 8 * T}, 43), 1, T, r);
  auto run = [&](WeightGradQueue* q, std::vector<at::Tensor>& params, std::vector<at::Tensor>& xgrads) {
    params = {leaf(W1), leaf(B1), leaf(W2)};
    for (int mb = 0; mb < 2; ++mb) {
      at::Tensor X = rnd({2, 8, 16}, 44 + mb);
      at::Tensor x = leaf(sp ? part_of(X, 1, T, r) : X);
      at::Tensor y;
      {
        WeightGradScope scope(q);  // the forward records the queue, the armed queue defers
        at::Tensor h = column_parallel_linear(tp, x, params[0], params[1]);
        y = row_parallel_linear(tp, at::gelu(h, "tanh"), params[2], at::Tensor());
      }
      if (q) q->arm(true);
      y.backward(at::ones_like(y));
      xgrads.push_back(x.grad());
    }
  };
  std::vector<at::Tensor> ref, refx, def, defx;
  run(nullptr, ref, refx);
  WeightGradQueue queue;
  run(&queue, def, defx);
  for (const auto& p : def)
    if (p.grad().defined()) throw std::runtime_error("deferred weight grad present before WeightGradQueue::run()");
  if (queue.size() != 4)  // two linears with weights x two micro-batches
    throw std::runtime_error("WeightGradQueue holds " + std::to_string(queue.size()) + " items, expected 4");
  queue.run();
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!at::equal(ref[i].grad(), def[i].grad()))
      throw std::runtime_error("deferred grad of parameter " + std::to_string(i) + " differs from undeferred");
    worst = std::max(worst, err(def[i].grad(), ref[i].grad()));
  }
  for (size_t i = 0; i < refx.size(); ++i)
    if (!at::equal(refx[i], defx[i])) throw std::runtime_error("input grad differs under deferral");
  c.expect(sp_name("deferred_weight_grads", sp), {worst}, 0.0);
}

// --- Vocab-parallel embedding and cross-entropy -----------------------------------
// Ids (2, 8) that hit every rank's rows of a vocabulary of `vocab`.
at::Tensor ids_on_every_rank(int64_t vocab, int64_t valid, int T, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor ids = at::randint(valid, {2, 8}, gen, at::TensorOptions().dtype(at::kLong));
  const int64_t rows = vocab / T;
  for (int k = 0; k < T; ++k)  // one id at the start of each rank's slice, if valid
    if (k * rows < valid) ids.view(-1)[k] = k * rows + (k % rows);
  return ids;
}

void check_embedding(const TpContext& tp, Checker& c) {
  const int T = tp.size(), r = tp.rank();
  const bool sp = tp.sequence_parallel;
  const int64_t V = 8 * T, h = 12;
  const at::Tensor E = rnd({V, h}, 51), G = rnd({2, 8, h}, 52), ids = ids_on_every_rank(V, V, T, 53);
  at::Tensor e = leaf(E);
  at::Tensor ref = at::embedding(e, ids);
  ref.backward(G);
  at::Tensor w = leaf(part_of(E, 0, T, r));
  at::Tensor y = vocab_parallel_embedding(tp, ids, w, r * (V / T));
  y.backward(sp ? part_of(G, 1, T, r).contiguous() : G);
  c.expect(sp_name("vocab_parallel_embedding", sp),
           {err(y, sp ? part_of(ref, 1, T, r) : ref), err(w.grad(), part_of(e.grad(), 0, T, r))});
}

// Logits (2, 8, V) split by columns; only the first `valid` columns are real.
void check_cross_entropy(const TpContext& tp, int64_t valid, const std::string& name, Checker& c) {
  const int T = tp.size(), r = tp.rank();
  const int64_t V = 8 * T;
  const at::Tensor L = rnd({2, 8, V}, 61) * 3, G = rnd({2, 8}, 62), targets = ids_on_every_rank(V, valid, T, 63);
  // Dense: log_softmax over the valid columns only; padded columns get no gradient.
  at::Tensor l = leaf(L);
  at::Tensor ref = at::nll_loss_nd(at::log_softmax(l.narrow(2, 0, valid), 2).view({-1, valid}), targets.view(-1),
                                   {}, at::Reduction::None)
                       .view({2, 8});
  ref.backward(G);
  at::Tensor x = leaf(part_of(L, 2, T, r));
  at::Tensor loss = vocab_parallel_cross_entropy(tp, x, targets, r * (V / T), valid);
  loss.backward(G);
  c.expect(name, {err(loss, ref), err(x.grad(), part_of(l.grad(), 2, T, r))});
}

// --- Whole model -------------------------------------------------------------------
// One GptStage (embedding, 2 blocks, head) at tp = T against tp = 1 on this
// rank: same loss, and every shard's gradient is its slice of the full one.
void check_gpt(const TpContext& tp, Checker& c) {
  const int T = tp.size();
  const bool sp = tp.sequence_parallel;
  ModelConfig cfg;
  cfg.layers = 2;
  cfg.hidden = 32;
  cfg.heads = 4;
  cfg.ffn_hidden = 64;
  cfg.seq_len = 8;
  cfg.init_std = 0.2;  // larger than GPT-2's 0.02 so the loss is far from log(vocab) and sensitive
  cfg.vocab_size = 250;  // padded to 256 at tp 1, 2 and 4: the padded rows must stay out
  if (cfg.padded_vocab(1) != cfg.padded_vocab(T)) throw std::logic_error("padded vocab differs across tp");
  const ChunkSpec spec{0, cfg.layers, true, true};
  at::Generator gen = at::detail::createCPUGenerator(71);
  const at::Tensor ids = at::randint(cfg.vocab_size, {2, cfg.seq_len}, gen, at::TensorOptions().dtype(at::kLong));
  const at::Tensor targets = at::randint(cfg.vocab_size, {2, cfg.seq_len}, gen, at::TensorOptions().dtype(at::kLong));

  GptStage ref(cfg, spec, TpContext{}, 1234);
  at::Tensor ref_loss = ref.forward(ids, targets);
  ref_loss.backward();
  GptStage par(cfg, spec, tp, 1234);
  at::Tensor loss = par.forward(ids, targets);
  loss.backward();

  const double loss_err = std::abs(loss.item<double>() - ref_loss.item<double>()) / std::abs(ref_loss.item<double>());
  double worst = 0;
  if (ref.params().size() != par.params().size()) throw std::runtime_error("tp=1 and tp=T plans differ in length");
  for (size_t i = 0; i < par.params().size(); ++i) {
    const Param& p = par.params()[i];
    const Param& q = ref.params()[i];
    if (p.info.name != q.info.name) throw std::runtime_error("plan order differs at " + p.info.name);
    at::Tensor g = p.tensor.grad().clone();
    if (sp && p.info.sequence_parallel_grad) all_reduce(*tp.group, g);  // partial over this rank's tokens
    at::Tensor full = q.tensor.grad();
    if (p.info.shard_dim >= 0) full = full.narrow(p.info.shard_dim, p.info.shard_offset, g.size(p.info.shard_dim));
    // Gradients are O(init_std): compare relative to the largest entry.
    const double scale = std::max(full.abs().max().item<double>(), 1e-30);
    const double e = (g - full).abs().max().item<double>() / scale;
    if (!(e <= 1e-5))
      throw std::runtime_error("gradient of " + p.info.name + (p.info.tied_copy ? " (head copy)" : "") +
                               " differs from its tp=1 slice: rel err " + std::to_string(e));
    worst = std::max(worst, e);
  }
  c.expect(sp_name("gpt_stage_loss", sp), {loss_err}, 1e-5);
  c.expect(sp_name("gpt_stage_grads", sp), {worst}, 1e-5);
}

void run_all(ProcessGroups& pg) {
  Checker c(pg.tp.size());
  for (bool sp : {false, true}) {
    const TpContext tp{&pg.tp, sp};
    if (!sp) check_mappings(tp, c);
    check_column(tp, false, c);
    check_column(tp, true, c);
    check_row(tp, c);
    check_embedding(tp, c);
    check_deferred(tp, c);
    check_gpt(tp, c);
  }
  const TpContext tp{&pg.tp, false};
  const int T = tp.size();
  const int64_t V = 8 * T;
  check_cross_entropy(tp, V, "vocab_parallel_cross_entropy", c);
  check_cross_entropy(tp, V - 3, "vocab_parallel_cross_entropy/padded", c);
  // Padding beyond a whole rank's slice: the last rank holds no valid column.
  check_cross_entropy(tp, V - V / T - 2, "vocab_parallel_cross_entropy/padded_rank", c);
}

}  // namespace
}  // namespace trident

int main() {
  using namespace trident;
  try {
    const WorldEnv env = read_world_env();
    if (env.world_size < 2) throw std::runtime_error("run under `trident launch --nproc-per-node T` with T >= 2");
    ProcessGroups pg(env, Layout::make(env.world_size, env.world_size, 1, 1), "gloo", std::chrono::seconds(30));
    run_all(pg);
    barrier(pg.world);
    std::printf("DONE all checks at tp=%d\n", pg.tp.size());
  } catch (const std::exception& e) {
    std::printf("FAIL %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
  return 0;
}
