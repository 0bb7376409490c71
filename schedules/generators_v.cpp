// The V-placed schedules: ZB-V, V-Half, V-Min and DualPipeV. Each rank holds
// chunk 0 (virtual stage r) and chunk 1 (virtual stage 2p-1-r), NOTE
// [placement] in action.h.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "schedules/generators.h"

namespace trident::sched {

namespace {

// Per-rank counters of the next micro-batch for each kind and chunk, plus the
// queue of weight-gradient passes an I left behind.
struct Cursor {
  ActionList* out;
  int m;  // real micro-batches: anything numbered >= m is dropped (see zb_v)
  int f[2] = {0, 0}, b[2] = {0, 0};
  std::deque<Action> w;

  Cursor(ActionList* list, int microbatches) : out(list), m(microbatches) {}

  void emit(Action a) {
    if (a.mb < m) out->push_back(a);
  }
  void F(int c) { emit(Action(ActionKind::F, f[c]++, c)); }
  void B(int c) { emit(Action(ActionKind::B, b[c]++, c)); }
  void I(int c) {  // input gradient now, weight gradient queued
    w.push_back(Action(ActionKind::W, b[c], c));
    emit(Action(ActionKind::I, b[c]++, c));
  }
  void W() {
    if (w.empty()) throw std::logic_error("V schedule generator: a W with no I before it (a bug in generators_v.cpp)");
    emit(w.front());
    w.pop_front();
  }
  bool has_w(int c) const {
    for (const Action& a : w)
      if (a.chunk == c) return true;
    return false;
  }
  void W(int c) {  // the oldest queued weight gradient of chunk c
    for (auto it = w.begin(); it != w.end(); ++it)
      if (it->chunk == c) {
        emit(*it);
        w.erase(it);
        return;
      }
  }
};

}  // namespace

// NOTE [zb-v] ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024):
// chunk 0's forwards run down the V, chunk 1's come back up, and once the
// first micro-batch is back on a rank its chunk-1 input gradient runs at once
// (the backward chain starts where the V ends, on rank 0), each I
// followed by its W while the pipeline fills. In the steady state every rank
// alternates F, I, W on chunk 0 and on chunk 1; in the cool-down the I's go
// first and the held-back W's fill the gaps. The phase lengths are those of
// the paper's figure (and of PyTorch's ScheduleZBVZeroBubble); with F = I = W
// every rank is busy from its first action to its last (test_schedule_simulate).
// The pattern is laid out for max(m, 2p-1) micro-batches and the surplus ones
// are dropped, which removes whole chains of dependencies and so keeps the
// rest deadlock-free: any m >= 1.
Schedule zb_v(int p, int m) {
  check_supported("zb-v", p, m, 2);
  Schedule s = empty_schedule(p, m, 2, Placement::v);
  const int n = std::max(m, 2 * p - 1);
  for (int r = 0; r < p; ++r) {
    Cursor k(&s.ranks[r], m);
    k.out->reserve(6 * static_cast<size_t>(m) + 2);  // F, I/B, W per chunk, and two REDUCE_GRAD
    for (int i = 0; i < 2 * (p - r) - 1; ++i) k.F(0);  // warm-up: fill the down-stroke of the V
    for (int i = 0; i < r; ++i) k.F(1), k.F(0);       //          chunk 1's forwards come back up
    for (int i = 0; i < p - r; ++i) k.F(1), k.I(1), k.W();  //    first backwards, weight right after
    while (k.f[1] < k.f[0] || k.f[0] < n) {           // steady: F I W on each chunk in turn
      if (k.f[0] < n) k.F(0);
      k.I(0), k.W();
      k.F(1), k.I(1), k.W();
    }
    for (int i = 0; i < r; ++i) k.I(0), k.I(1);  // cool-down: input gradients first...
    for (int i = 0; i < p - r; ++i) k.I(0), k.W(0);  // ...weights fill the gaps
    while (k.has_w(1)) k.W(1);  // the rest: chunk 1's, then chunk 0's
    while (k.has_w(0)) k.W(0);
  }
  return add_reduce_grad(std::move(s));  // each chunk's REDUCE_GRAD right after its last W
}

namespace {

// One rank's time slots (one chunk pass each) and which are taken; next_free
// finds the first free slot at or after t in near-constant time (union-find
// over taken slots pointing to their successor).
class SlotRow {
 public:
  int64_t take(int64_t t) {
    t = find(t);
    if (static_cast<size_t>(t) + 1 >= next_.size()) grow(t + 2);
    next_[t] = t + 1;
    return t;
  }

 private:
  int64_t find(int64_t t) {
    if (static_cast<size_t>(t) >= next_.size()) grow(t + 1);
    int64_t root = t;
    while (next_[root] != root) root = next_[root];
    while (next_[t] != root) t = std::exchange(next_[t], root);  // path compression
    return root;
  }
  void grow(int64_t size) {
    const size_t old = next_.size();
    next_.resize(std::max<size_t>(static_cast<size_t>(size), 2 * old));
    std::iota(next_.begin() + static_cast<std::ptrdiff_t>(old), next_.end(), static_cast<int64_t>(old));
  }
  std::vector<int64_t> next_;
};

struct Slotted {
  int64_t t;
  Action a;
};

}  // namespace

// NOTE [v-half and v-min] V-Half and V-Min (Qi et al., "Pipeline Parallelism with Controllable
// Memory", 2024, arXiv 2405.15362): the V placement of ZB-V with the activation memory of 1F1B
// cut to about a half and a third. The paper builds them from a repeating building block; we
// place the same kind of block by its timing, in slots of one chunk pass (F = I = W): micro-batch
// k enters at slot max(2k, 6k - early) and its chain (F through the 2p virtual stages, then I
// back through them) takes on each rank the first free slot after its predecessor; then each
// rank's W take the first free slot after their I. A rank does 6 passes per micro-batch, so
// entering every 6 slots is the steady state: with early = 0 (V-Min) no chain ever waits unless
// 3 divides p, and a micro-batch's activations live on rank r for (4p-2r) + (2r+2) slots, i.e.
// about (4p+2)/6 chunk activations, a third of 1F1B's 2p; the fill costs about 2/3 of 1F1B's
// bubble. early = p+1 (V-Half) lets the first micro-batches in faster (every 2 slots), about p
// chunk activations in flight and half of 1F1B's bubble. Each rank's list is its slots in time
// order, so with equal costs the simulator reproduces the slot timing and the lists are
// deadlock-free (the validator checks them anyway); other costs keep the order. Any m >= 1
// (tests/unit/test_schedule_memory.cpp checks memory and bubble against the paper's ratios).
Schedule v_controlled(const std::string& kind, int p, int m, int early) {
  check_supported(kind, p, m, 2);
  Schedule s = empty_schedule(p, m, 2, Placement::v);
  const int stages = 2 * p;
  std::vector<SlotRow> rows(static_cast<size_t>(p));
  std::vector<std::vector<Slotted>> out(static_cast<size_t>(p));
  auto rank_of = [&](int st) { return st < p ? st : stages - 1 - st; };
  for (int k = 0; k < m; ++k) {
    int64_t t = std::max<int64_t>(2 * int64_t{k}, 6 * int64_t{k} - early);
    for (int st = 0; st < stages; ++st) {  // forward down the V and back up
      const int r = rank_of(st);
      t = rows[r].take(t);
      out[r].push_back({t++, Action(ActionKind::F, k, st < p ? 0 : 1)});
    }
    for (int st = stages - 1; st >= 0; --st) {  // input gradients back
      const int r = rank_of(st);
      t = rows[r].take(t);
      out[r].push_back({t++, Action(ActionKind::I, k, st < p ? 0 : 1)});
    }
  }
  for (int r = 0; r < p; ++r) {
    auto& list = out[r];
    std::sort(list.begin(), list.end(), [](const Slotted& a, const Slotted& b) { return a.t < b.t; });
    const size_t passes = list.size();
    for (size_t i = 0; i < passes; ++i)  // each I's W: the first free slot after it
      if (list[i].a.kind == ActionKind::I)
        list.push_back({rows[r].take(list[i].t + 1), Action(ActionKind::W, list[i].a.mb, list[i].a.chunk)});
    std::sort(list.begin(), list.end(), [](const Slotted& a, const Slotted& b) { return a.t < b.t; });
    s.ranks[r].reserve(list.size() + 2);
    for (const Slotted& x : list) s.ranks[r].push_back(x.a);
  }
  return add_reduce_grad(std::move(s));  // each chunk's REDUCE_GRAD right after its last W
}

Schedule v_half(int p, int m) { return v_controlled("v-half", p, m, p + 1); }
Schedule v_min(int p, int m) { return v_controlled("v-min", p, m, 0); }

// NOTE [dualpipev] DualPipeV is DeepSeek-V3's DualPipe (DeepSeek-AI, "DeepSeek-V3
// Technical Report", 2024, section 3.2.1) folded into a V on p ranks: the
// eight steps of deepseek-ai/DualPipe's dualpipev.py, which PyTorch's
// ScheduleDualPipeV reproduces (its artifact dualpipev_4rank_10mb.csv is our
// test). In the main steps DualPipe overlaps a forward of one chunk with the
// full backward of the other, which in DeepSeek's setting hides one's
// all-to-all behind the other's compute; here each such pair is the F and
// then the B, one after the other (NOTE [no overlapped pairs]). Needs m >= 2p.
//
// NOTE [no overlapped pairs] (DualPipeV as generated) `dualpipev` is
// DualPipeV's order with each pair as the F and then the B, each waiting only
// for its own input: PyTorch's ScheduleDualPipeV with each OVERLAP_F_B read
// as its two actions in order (what PyTorch's runtime runs on CPU too). Pairs
// that run together are a pass over any generated list, made where a run
// has all-to-alls to hide (schedule.overlap_moe; NOTE [overlapped pairs] in
// schedules/overlap.h), not a property of this generator.
Schedule dualpipe_v(int p, int m) {
  check_supported("dualpipev", p, m, 2);
  Schedule s = empty_schedule(p, m, 2, Placement::v);
  for (int r = 0; r < p; ++r) {
    Cursor k(&s.ranks[r], m);
    k.out->reserve(6 * static_cast<size_t>(m) + 2);  // F, I/B, W per chunk, and two REDUCE_GRAD
    for (int i = 0; i < 2 * (p - r - 1); ++i) k.F(0);           // 1: chunk 0 forwards
    for (int i = 0; i < r + 1; ++i) k.F(0), k.F(1);             // 2: F0 F1
    for (int i = 0; i < p - r - 1; ++i) k.I(1), k.W(), k.F(1);  // 3: zero-bubble I1 W F1
    for (int i = 0; i < m - 2 * p + r + 1; ++i) {               // 4: main step: F0 B1, F1 B0
      k.F(0), k.B(1);  // DualPipe overlaps each of these pairs
      k.F(1), k.B(0);
    }
    for (int i = 0; i < p - r - 1; ++i) k.B(1), k.F(1), k.B(0);  // 5: B1, F1 then B0
    bool zb = false;  // 6: B1 B0, the second half with the I/W split
    for (int i = 0; i < r + 1; ++i) {
      if (i == (r + 1) / 2 && r % 2 == 1) zb = true;
      zb ? k.I(1) : k.B(1);
      if (i == (r + 1) / 2 && r % 2 == 0) zb = true;
      zb ? k.I(0) : k.B(0);
    }
    for (int i = 0; i < p - r - 1; ++i) k.W(), k.I(0);  // 7: W then zero-bubble I0
    while (!k.w.empty()) k.W();                          // 8: the remaining W
  }
  return add_reduce_grad(std::move(s));  // each chunk's REDUCE_GRAD right after its last W
}

}  // namespace trident::sched
