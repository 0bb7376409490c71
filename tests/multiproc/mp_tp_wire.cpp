// Worker for test_tp_wire: what the TP mappings of parallel/tensor_parallel.h
// put on the wire and what they copy (NOTE [TP collectives], [TP collective copies], NOTE [TP
// collectives in place] in parallel/tensor_parallel.cpp), at tp = 2:
//  - wire/<mapping>/<dtype>: the bytes a forward + backward hands to the TP
//    group's collectives (Group::comm_bytes) are the collective's elements
//    times the size of the input's dtype (bf16 travels as bf16, not widened to
//    fp32); output and input gradient keep that dtype; bf16 results equal the
//    dense bf16 computation bit for bit (at tp = 2 a bf16 sum is the exact sum
//    rounded once).
//  - copies/<mapping>/b<B>: the copies (top-level aten::copy_, clone, cat,
//    _to_copy) this thread dispatches in a forward + backward, less what the
//    backend's own collectives copy (copies/backend): none when every
//    dimension before the split one has size 1, one per collective otherwise.
//  - gpt_stage/bf16_wire: a bf16 GptStage's forward + backward moves half the
//    activation bytes of the fp32 one (the cross-entropy's fp32 statistics
//    aside), with and without sequence parallelism.
// Prints "PASS <check>" per check; the first failure prints "FAIL ..." and
// exits 1. Run as: trident launch --nproc-per-node 2 -- mp_tp_wire
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <c10/util/Backtrace.h>
#include <torch/csrc/autograd/autograd.h>

#include "models/gpt/gpt.h"
#include "parallel/process_groups.h"
#include "parallel/tensor_parallel.h"

namespace trident {
namespace {

at::Tensor rnd(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype);
}

void pass(const std::string& name, const std::string& detail) {
  std::printf("PASS %s %s\n", name.c_str(), detail.c_str());
  std::fflush(stdout);
}

void require(bool ok, const std::string& name, const std::string& what) {
  if (!ok) throw std::runtime_error(name + ": " + what);
}

// --- Copy counter: top-level copies dispatched on the thread that armed it ----
std::atomic<bool> g_counting{false};
std::thread::id g_thread;
std::atomic<int64_t> g_copies{0};
thread_local int t_depth = 0;  // copy ops open on this thread (a clone's inner copy_ is not a second copy)

bool is_copy(const char* name) {
  for (const char* c : {"aten::copy_", "aten::clone", "aten::cat", "aten::_to_copy"})
    if (std::strcmp(name, c) == 0) return true;
  return false;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (g_counting && std::this_thread::get_id() == g_thread && is_copy(fn.name())) {
    if (t_depth++ == 0) {
      ++g_copies;
      if (std::getenv("MP_TP_WIRE_VERBOSE")) std::printf("copy: %s\n%s\n", fn.name(), c10::get_backtrace().c_str());  // who copies
    }
  }
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (g_counting && std::this_thread::get_id() == g_thread && is_copy(fn.name())) --t_depth;
}

int64_t copies_in(const std::function<void()>& f) {
  g_thread = std::this_thread::get_id();
  g_copies = 0;
  g_counting = true;
  f();
  g_counting = false;
  return g_copies;
}

// --- One mapping: forward, backward, what crossed the wire --------------------
struct Mapping {
  std::string name;
  // x's shape given (b, s, h) (split inputs hold s/T or h/T).
  std::function<std::vector<int64_t>(int64_t, int64_t, int64_t, int)> in_shape;
  std::function<at::Tensor(const TpContext&, const at::Tensor&)> apply;
  // Elements handed to collectives by a forward + backward, for (b, s, h).
  std::function<int64_t(int64_t, int64_t, int64_t)> wire_elements;
  // Copies Trident makes in a forward + backward: at b = 1 and at b = 2.
  int copies_b1, copies_b2;
  // Collectives of a forward + backward: all-gathers, reduce-scatters, all-reduces.
  int ag, rs, ar;
};

std::vector<Mapping> mappings() {
  auto full = [](int64_t b, int64_t s, int64_t h, int) { return std::vector<int64_t>{b, s, h}; };
  auto seq_part = [](int64_t b, int64_t s, int64_t h, int T) { return std::vector<int64_t>{b, s / T, h}; };
  auto last_part = [](int64_t b, int64_t s, int64_t h, int T) { return std::vector<int64_t>{b, s, h / T}; };
  auto one = [](int64_t b, int64_t s, int64_t h) { return b * s * h; };
  auto two = [](int64_t b, int64_t s, int64_t h) { return 2 * b * s * h; };
  // Before: copy_to_tp cloned its input and all-reduced a clone of the
  // gradient (2 copies, 4 under bf16 with the fp32 round trip); the seq
  // mappings made 2 transposed copies per reduce-scatter and a cat per gather.
  return {
      {"copy_to_tp", full, copy_to_tp, one, 0, 0, 0, 0, 1},
      {"reduce_from_tp", full, reduce_from_tp, one, 0, 0, 0, 0, 1},
      {"gather_seq", seq_part, gather_seq, two, 0, 2, 1, 1, 0},
      {"reduce_scatter_seq", full, reduce_scatter_seq, two, 0, 2, 1, 1, 0},
      {"scatter_seq", full, scatter_seq, one, 0, 2, 1, 0, 0},
      // The last dimension always interleaves the ranks' parts: one copy each way.
      {"gather_last_dim", last_part, gather_last_dim, one, 2, 2, 1, 0, 0},
      {"scatter_last_dim", full, scatter_last_dim, one, 2, 2, 1, 0, 0},
  };
}

// The dense result every rank can compute: per-rank inputs rank_in(k).
at::Tensor dense(const Mapping& m, const std::function<at::Tensor(int)>& rank_in, int T, int r) {
  auto sum = [&] {
    at::Tensor acc = rank_in(0).to(at::kFloat);
    for (int k = 1; k < T; ++k) acc = acc + rank_in(k).to(at::kFloat);
    return acc.to(rank_in(0).scalar_type());  // one rounding: what a bf16 sum over 2 ranks gives
  };
  auto part = [&](const at::Tensor& t, int64_t dim) { return t.chunk(T, dim)[r]; };
  std::vector<at::Tensor> all;
  for (int k = 0; k < T; ++k) all.push_back(rank_in(k));
  if (m.name == "copy_to_tp") return rank_in(r);
  if (m.name == "reduce_from_tp") return sum();
  if (m.name == "gather_seq") return at::cat(all, 1);
  if (m.name == "reduce_scatter_seq") return part(sum(), 1);
  if (m.name == "scatter_seq") return part(rank_in(r), 1);
  if (m.name == "gather_last_dim") return at::cat(all, 2);
  return part(rank_in(r), 2);  // scatter_last_dim
}

void check_wire(const TpContext& tp, const Mapping& m, at::ScalarType dtype) {
  const int T = tp.size(), r = tp.rank();
  const int64_t b = 2, s = 8, h = 4 * T;
  const std::string name = "wire/" + m.name + "/" + (dtype == at::kBFloat16 ? "bf16" : "fp32");
  const auto shape = m.in_shape(b, s, h, T);
  auto rank_in = [&](int k) { return rnd(shape, 100 + static_cast<uint64_t>(k), dtype); };
  const at::Tensor leaf = rank_in(r).set_requires_grad(true);
  const at::Tensor x = leaf * 1;  // not a leaf: reduce_from_tp may sum into it
  const int64_t before = tp.group->comm_bytes;
  at::Tensor y = m.apply(tp, x);
  const at::Tensor expect = dense(m, rank_in, T, r);
  require(y.scalar_type() == dtype, name, std::string("output is ") + c10::toString(y.scalar_type()));
  require(at::equal(y, expect), name, "output differs from the dense computation");
  const at::Tensor gy = rnd(y.sizes().vec(), 7, dtype);  // the same on every rank
  y.backward(gy);
  require(leaf.grad().scalar_type() == dtype, name, std::string("gradient is ") + c10::toString(leaf.grad().scalar_type()));
  const int64_t bytes = tp.group->comm_bytes - before;
  const int64_t want = m.wire_elements(b, s, h) * static_cast<int64_t>(c10::elementSize(dtype));
  require(bytes == want, name, "collectives carried " + std::to_string(bytes) + " bytes, expected " + std::to_string(want));
  pass(name, "bytes=" + std::to_string(bytes));
}

// The copies the backend itself makes on the calling thread per collective
// (Gloo's _reduce_scatter_base on the CPU all-reduces a clone of the input and
// copies this rank's chunk out: 2; NCCL none), measured on bare calls so that
// check_copies counts Trident's own.
struct BackendCopies {
  int64_t ag = 0, rs = 0, ar = 0;
};

BackendCopies backend_copies(const Group& g) {
  BackendCopies c;
  at::Tensor part = at::ones({4, 8}), full = at::ones({g.size() * 4, 8});
  c.ag = copies_in([&] { all_gather_into(g, full, part); });
  c.rs = copies_in([&] { reduce_scatter(g, part, full); });
  c.ar = copies_in([&] { all_reduce(g, full); });
  pass("copies/backend", "all_gather=" + std::to_string(c.ag) + " reduce_scatter=" + std::to_string(c.rs) +
                             " all_reduce=" + std::to_string(c.ar));
  return c;
}

void check_copies(const TpContext& tp, const Mapping& m, int64_t b, const BackendCopies& backend) {
  const int T = tp.size();
  const int64_t s = 8, h = 4 * T;
  const std::string name = "copies/" + m.name + "/b" + std::to_string(b);
  const auto shape = m.in_shape(b, s, h, T);
  const at::Tensor leaf = rnd(shape, 200 + static_cast<uint64_t>(tp.rank()), at::kFloat).set_requires_grad(true);
  const at::Tensor x = leaf * 1;
  at::Tensor gy;
  const int64_t n = copies_in([&] {
    at::Tensor y = m.apply(tp, x);
    gy = at::ones_like(y);
    torch::autograd::grad({y}, {x}, {gy});  // dX as the mapping makes it, no accumulation into .grad
  });
  const int64_t ours = n - (m.ag * backend.ag + m.rs * backend.rs + m.ar * backend.ar);
  const int want = b == 1 ? m.copies_b1 : m.copies_b2;
  require(ours == want, name, std::to_string(ours) + " copies besides the backend's, expected " + std::to_string(want));
  pass(name, "copies=" + std::to_string(ours));
}

// bf16 halves what a GptStage's TP collectives carry; the cross-entropy's three
// fp32 (b, s) statistics (max, sum of exps, target logit) stay fp32.
void check_gpt_wire(const TpContext& tp) {
  ModelConfig cfg;
  cfg.layers = 2;
  cfg.hidden = 32;
  cfg.heads = 4;
  cfg.ffn_hidden = 64;
  cfg.seq_len = 8;
  cfg.vocab_size = 256;
  const int64_t b = 2;
  const ChunkSpec spec{0, cfg.layers, true, true};
  at::Generator gen = at::detail::createCPUGenerator(5);
  const at::Tensor ids = at::randint(cfg.vocab_size, {b, cfg.seq_len}, gen, at::TensorOptions().dtype(at::kLong));
  auto bytes_of = [&](at::ScalarType dtype) {
    GptStage stage(cfg, spec, tp, 99);
    stage.set_compute_dtype(dtype);
    const int64_t before = tp.group->comm_bytes;
    stage.forward(ids, ids).backward();
    return tp.group->comm_bytes - before;
  };
  const int64_t fp32 = bytes_of(at::kFloat), bf16 = bytes_of(at::kBFloat16);
  const int64_t ce = 3 * b * cfg.seq_len * 4;
  const std::string name = std::string("gpt_stage/bf16_wire") + (tp.sequence_parallel ? "/sp" : "");
  require(fp32 > ce && 2 * (bf16 - ce) == fp32 - ce, name,
          "fp32 moved " + std::to_string(fp32) + " bytes and bf16 " + std::to_string(bf16) + " (" +
              std::to_string(ce) + " of each the cross-entropy's): expected bf16's activations to be half");
  pass(name, "fp32_bytes=" + std::to_string(fp32) + " bf16_bytes=" + std::to_string(bf16));
}

void run_all(ProcessGroups& pg) {
  const TpContext tp{&pg.tp, false};
  const BackendCopies backend = backend_copies(pg.tp);
  for (const Mapping& m : mappings()) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) check_wire(tp, m, dtype);
    for (int64_t b : {1, 2}) check_copies(tp, m, b, backend);
  }
  check_gpt_wire(tp);
  check_gpt_wire(TpContext{&pg.tp, true});
}

}  // namespace
}  // namespace trident

int main() {
  using namespace trident;
  try {
    const WorldEnv env = read_world_env();
    if (env.world_size != 2) throw std::runtime_error("run under `trident launch --nproc-per-node 2`");
    ProcessGroups pg(env, Layout::make(env.world_size, env.world_size, 1, 1), "gloo", std::chrono::seconds(30));
    at::RecordFunctionCallback cb(on_start, on_end);
    const at::CallbackHandle handle = at::addGlobalCallback(cb.scopes({at::RecordScope::FUNCTION}));
    run_all(pg);
    at::removeCallback(handle);
    barrier(pg.world);
    std::printf("DONE all wire checks\n");
  } catch (const std::exception& e) {
    std::printf("FAIL %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
  return 0;
}
