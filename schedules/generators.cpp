// Schedule generators. Each writes compute actions only, with its warm-up,
// steady state and cool-down visible; add_communication() makes them runnable.
#include "schedules/generators.h"

#include <algorithm>
#include <thread>

#include "schedules/group_waits.h"
#include "schedules/pair_order.h"


namespace trident::sched {

namespace {

Action act(ActionKind k, int mb, int chunk = 0) { return Action{k, mb, chunk}; }

// In place: one REDUCE_GRAD per chunk right after its last B or W on the rank.
// Shifts from the back, so a list reserved with room for them is not
// reallocated (a planner's lists are large: README "At scale").
void place_reduce_grad(ActionList& list, int chunks) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> last(static_cast<size_t>(chunks), kNone);
  for (size_t i = 0; i < list.size(); ++i)
    if (adds_weight_grads(list[i].kind)) last[list[i].chunk] = i;
  const size_t n = list.size();
  const size_t extra = static_cast<size_t>(std::count_if(last.begin(), last.end(), [](size_t i) { return i != kNone; }));
  list.resize(n + extra);
  for (size_t i = n, w = n + extra; i-- > 0;) {
    const Action a = list[i];
    if (adds_weight_grads(a.kind) && last[a.chunk] == i) list[--w] = reduce_grad(a.chunk);
    list[--w] = a;
  }
}

std::string describe(const std::string& kind, int p, int m, int v) {
  return "kind '" + kind + "' with p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v);
}

// NOTE [interleaved order] Megatron's interleaved schedule walks the rank's
// m*v forward slots in rounds of micro-batches: within a round, every chunk in
// turn runs the round's micro-batches. With p | m a round is p micro-batches
// (Megatron's order, unchanged). Otherwise, like PyTorch's
// ScheduleInterleaved1F1B, there are floor(m/p) rounds; PyTorch then needs
// them equal (m % rounds == 0), we give the first m % rounds rounds one extra
// micro-batch, and the warm-up counts the first (largest) round. That order
// validates for every p <= 8, m in p..32, v <= 4 and keeps the closed-form
// bubble (p-1)/(v*m+p-1) (tests/unit/test_schedule_simulate.cpp). Backward
// slots use the same table with the chunks reversed.
std::vector<Action> interleaved_table(int p, int m, int v, int* first_round) {
  const int rounds = std::max(1, m / p), size = m / rounds, larger = m % rounds;
  *first_round = size + (larger > 0 ? 1 : 0);
  std::vector<Action> table;
  table.reserve(static_cast<size_t>(m) * v);
  for (int round = 0, first = 0; round < rounds; ++round) {
    const int end = first + size + (round < larger ? 1 : 0);
    for (int c = 0; c < v; ++c)
      for (int mb = first; mb < end; ++mb) table.push_back(act(ActionKind::F, mb, c));
    first = end;
  }
  return table;
}

// Runs fn(r) for every rank r; for large schedules the ranks are split
// between two threads (each writes only its own ranks' lists).
template <typename Fn>
void for_each_rank(int p, size_t actions, Fn fn) {
  if (actions < (1u << 20) || p < 2) {
    for (int r = 0; r < p; ++r) fn(r);
    return;
  }
  std::thread other([&] {
    for (int r = p / 2; r < p; ++r) fn(r);
  });
  for (int r = 0; r < p / 2; ++r) fn(r);
  other.join();
}

}  // namespace

Schedule gpipe(int p, int m) {
  Schedule s = empty_schedule(p, m, 1);
  for (int r = 0; r < p; ++r) {
    s.ranks[r].reserve(2 * static_cast<size_t>(m) + 1);
    for (int i = 0; i < m; ++i) s.ranks[r].push_back(act(ActionKind::F, i));      // all forwards
    // Then all backwards, in ascending micro-batch order (as PyTorch's GPipe
    // schedule does) so each gradient sums its micro-batches in the same
    // order as every other schedule: bit-identical to the pp = 1 reference.
    for (int i = 0; i < m; ++i) s.ranks[r].push_back(act(ActionKind::B, i));
    s.ranks[r].push_back(reduce_grad(0));  // the last B was the last to add to the weight gradients
  }
  return s;
}

Schedule one_f_one_b(int p, int m) {
  Schedule s = empty_schedule(p, m, 1);
  for_each_rank(p, 2 * static_cast<size_t>(m) * p, [&](int r) {
    auto& out = s.ranks[r];
    out.reserve(2 * static_cast<size_t>(m) + 1);
    const int warmup = std::min(p - r - 1, m);
    for (int i = 0; i < warmup; ++i) out.push_back(act(ActionKind::F, i));  // warm-up
    for (int i = 0; i < m - warmup; ++i) {                                   // steady: one F, one B
      out.push_back(act(ActionKind::F, warmup + i));
      out.push_back(act(ActionKind::B, i));
    }
    for (int i = m - warmup; i < m; ++i) out.push_back(act(ActionKind::B, i));  // cool-down
    out.push_back(reduce_grad(0));
  });
  return s;
}

Schedule interleaved(int p, int m, int v) {
  check_supported("interleaved", p, m, v);
  if (v == 1) return one_f_one_b(p, m);
  Schedule s = empty_schedule(p, m, v);
  int round = 0;
  const std::vector<Action> table = interleaved_table(p, m, v, &round);
  const int total = m * v;
  auto fwd = [&](int k) { return table[k]; };
  auto bwd = [&](int k) { return act(ActionKind::B, table[k].mb, v - 1 - table[k].chunk); };
  for_each_rank(p, 2 * static_cast<size_t>(total) * p, [&](int r) {
    auto& out = s.ranks[r];
    out.reserve(2 * static_cast<size_t>(total) + v);
    const int warmup = std::min((p - r - 1) * 2 + (v - 1) * round, total);
    for (int k = 0; k < warmup; ++k) out.push_back(fwd(k));  // warm-up
    for (int k = 0; k < total - warmup; ++k) {                // steady
      out.push_back(fwd(warmup + k));
      out.push_back(bwd(k));
    }
    for (int k = total - warmup; k < total; ++k) out.push_back(bwd(k));  // cool-down
    place_reduce_grad(out, v);  // each chunk's after its last B (chunks finish at different points)
  });
  return s;
}

Schedule zb_h1(int p, int m) {
  Schedule s = empty_schedule(p, m, 1);
  for (int r = 0; r < p; ++r) {
    auto& out = s.ranks[r];
    out.reserve(3 * static_cast<size_t>(m) + 1);
    // Same F/I order as 1F1B, so the activations alive (F until I) peak as in 1F1B.
    const int warmup = std::min(p - r - 1, m);
    // Rank r holds back r weight-gradient passes so its input gradients reach
    // rank r-1 sooner; the held-back W fill the cool-down gaps instead.
    const int deferred = r;
    int next_w = 0;
    for (int i = 0; i < warmup; ++i) out.push_back(act(ActionKind::F, i));  // warm-up
    for (int i = 0; i < m - warmup; ++i) {                                   // steady: F, I, maybe W
      out.push_back(act(ActionKind::F, warmup + i));
      out.push_back(act(ActionKind::I, i));
      if (i >= deferred) out.push_back(act(ActionKind::W, next_w++));
    }
    for (int i = m - warmup; i < m; ++i) {  // cool-down: I, then a held-back W
      out.push_back(act(ActionKind::I, i));
      out.push_back(act(ActionKind::W, next_w++));
    }
    while (next_w < m) out.push_back(act(ActionKind::W, next_w++));  // flush the rest
    out.push_back(reduce_grad(0));  // after the last W
  }
  return s;
}

// NOTE [zb-h2] ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024,
// section 3.1): ZB-H1 with a longer warm-up and more W held back. Rank r runs
// 2(p-r-1)+1 forwards before its first I: exactly as many as fit before the
// first input gradient can come back to it when F = I = W, so rank 0 holds
// 2p-1 micro-batches of activations (1F1B holds p) and never waits for it.
// Then I, F, W in turn; rank r holds back its first 2r W, which fill the
// cool-down: rank r starts one slot after rank r-1 and its I of the last
// micro-batch must end one slot before rank r-1's, so counted from its own
// end each rank runs that I two slots earlier than its upstream neighbour,
// with two more W after it. With F = I = W every rank is busy from its first
// action to its last (the paper's parallelogram; the step still spans (p-1)F
// more than one rank's work, because rank r starts r forwards late). The
// paper's Table 5 bubble rates for its 1.5B and 6.2B models come out of the
// simulator to four digits, counted as the paper counts them
// (TimelineStats::span_bubble_fraction; benchmarks/zero_bubble_paper.py, the `reference` test ZeroBubblePaper).
Schedule zb_h2(int p, int m) {
  Schedule s = empty_schedule(p, m, 1);
  for_each_rank(p, 3 * static_cast<size_t>(m) * p, [&](int r) {
    auto& out = s.ranks[r];
    out.reserve(3 * static_cast<size_t>(m) + 1);
    // With m < 2p-1 the warm-up is cut short and the held-back W would only
    // lengthen the tail: then hold back ZB-H1's r (never slower than ZB-H1,
    // tests/unit/test_schedule_memory.cpp).
    const int warmup = std::min(2 * (p - r - 1) + 1, m), deferred = m >= 2 * p - 1 ? 2 * r : r;
    int next_f = 0, next_i = 0, next_w = 0;
    while (next_f < warmup) out.push_back(act(ActionKind::F, next_f++));  // warm-up: up to 2p-1 in flight
    while (next_f < m) {  // steady: I, F, then a W unless it is one of the first 2r
      out.push_back(act(ActionKind::I, next_i++));
      out.push_back(act(ActionKind::F, next_f++));
      if (next_i > deferred) out.push_back(act(ActionKind::W, next_w++));
    }
    while (next_i < m) {  // cool-down: the remaining I, each with a W once past the held-back ones
      out.push_back(act(ActionKind::I, next_i++));
      if (next_i > deferred) out.push_back(act(ActionKind::W, next_w++));
    }
    while (next_w < m) out.push_back(act(ActionKind::W, next_w++));  // the held-back W fill the tail
    out.push_back(reduce_grad(0));  // after the last W
  });
  return s;
}

const std::vector<std::string>& schedule_kinds() {
  static const std::vector<std::string> kinds = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "dualpipev"};
  return kinds;
}

bool v_kind(const std::string& kind) {
  return kind == "zb-v" || kind == "v-half" || kind == "v-min" || kind == "dualpipev";
}

const std::vector<KindChunks>& kind_chunks() {
  static const std::vector<KindChunks> table = [] {
    std::vector<KindChunks> t;
    for (const std::string& k : schedule_kinds()) t.push_back({k, v_kind(k) ? 2 : k == "interleaved" ? 0 : 1});
    t.push_back({"zb-auto", 1});
    t.push_back({"file", 0});
    return t;
  }();
  return table;
}

int default_chunks(const std::string& kind) {
  for (const KindChunks& k : kind_chunks()) {
    if (k.kind == kind) return std::max(k.chunks, 1);
  }
  check_supported(kind, 1, 1, 1);  // throws, listing the kinds
  return 1;
}

void check_supported(const std::string& kind, int p, int m, int v) {
  if (p < 1 || m < 1 || v < 1)
    throw ScheduleError(describe(kind, p, m, v) + ": stages, microbatches and chunks must be >= 1");
  // NOTE [schedule size bound] p x m x v compute slots, each 2-3 actions plus
  // their sends and receives: 2^25 (1024 x 8192 x 4, benchmarks/results/
  // simulator_scale.txt) takes about 0.8 GB and a second; p = m = 100000 would
  // take hundreds of GB, so it is refused before anything is generated.
  constexpr int64_t kMaxSlots = int64_t{1} << 25;
  const int64_t slots = int64_t{p} * m * v;
  if (slots > kMaxSlots)
    throw ScheduleError(describe(kind, p, m, v) + ": stages x microbatches x chunks = " + std::to_string(slots) +
                        " compute slots, expected at most " + std::to_string(kMaxSlots) +
                        " (about 0.8 GB of actions at that bound)");
  if (kind == "gpipe" || kind == "1f1b" || kind == "zb-h1" || kind == "zb-h2") {
    if (v != 1) throw ScheduleError(describe(kind, p, m, v) + ": this kind has one chunk per rank, expected v=1");
    return;
  }
  if (kind == "interleaved") {
    if (v > 1 && m < p)
      throw ScheduleError(describe(kind, p, m, v) + ": interleaved with v>1 needs at least as many microbatches as stages (m >= p)");
    return;
  }
  if (v_kind(kind)) {
    if (v != 2)
      throw ScheduleError(describe(kind, p, m, v) + ": this kind runs two chunks per rank in a V, expected v=2 "
                          "(the default when no chunks are given)");
    if (kind == "dualpipev" && m < 2 * p)
      throw ScheduleError(describe(kind, p, m, v) + ": dualpipev needs m >= 2p microbatches");
    return;
  }
  std::string names;
  for (const std::string& k : schedule_kinds()) names += (names.empty() ? "" : ", ") + k;
  throw ScheduleError("unknown schedule kind '" + kind + "', expected one of " + names);
}

Schedule generate_compute(const std::string& kind, int p, int m, int v) {
  if (v == 0) v = default_chunks(kind);
  check_supported(kind, p, m, v);
  if (kind == "gpipe") return gpipe(p, m);
  if (kind == "1f1b") return one_f_one_b(p, m);
  if (kind == "zb-h1") return zb_h1(p, m);
  if (kind == "zb-h2") return zb_h2(p, m);
  if (kind == "zb-v") return zb_v(p, m);
  if (kind == "v-half") return v_half(p, m);
  if (kind == "v-min") return v_min(p, m);
  if (kind == "dualpipev") return dualpipe_v(p, m);
  return interleaved(p, m, v);
}

Schedule generate(const std::string& kind, int p, int m, int v) {
  return place_communication(generate_compute(kind, p, m, v));  // NOTE [group waits]
}

bool has_communication(const Schedule& s) {
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      if (is_communication(a.kind)) return true;
  return false;
}

bool has_reduce_grad(const Schedule& s) {
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      if (a.kind == ActionKind::REDUCE_GRAD) return true;
  return false;
}

// NOTE [files without REDUCE_GRAD] A schedule read from a file (Trident's
// text form, or PyTorch's CSV, whose multi-stage orders carry no
// REDUCE_GRAD) may leave the gradient-reduction points out. The loaders
// (`trident schedule --file/--from-csv`, `schedule.kind = "file"`) then
// insert them where every generator puts them, right after each chunk's last
// B or W on each rank: the only point at which they are known final. A file
// that writes any REDUCE_GRAD is taken as written and must write all of them
// (the validator checks it). The IR itself, and validate(), never imply one.
Schedule add_reduce_grad(Schedule s) {
  if (has_reduce_grad(s)) throw ScheduleError("add_reduce_grad: the schedule already has REDUCE_GRAD actions");
  for (auto& list : s.ranks) place_reduce_grad(list, s.chunks);
  return s;
}

Schedule with_reduce_grad(Schedule s) { return has_reduce_grad(s) ? s : add_reduce_grad(std::move(s)); }

ActionList forward_only_actions(const StageMap& map, int rank, int microbatches) {
  ActionList list;
  const int last = map.virtual_stages() - 1;
  // Chunks in virtual-stage order: a micro-batch visits this rank's stages low to high.
  std::vector<int> order(map.chunks);
  for (int c = 0; c < map.chunks; ++c) order[c] = c;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return map.stage_of(rank, a) < map.stage_of(rank, b); });
  for (int mb = 0; mb < microbatches; ++mb)
    for (int c : order) {
      const int stage = map.stage_of(rank, c);
      if (stage > 0) list.push_back(act(ActionKind::RECV_F, mb, c));
      list.push_back(act(ActionKind::F, mb, c));
      if (stage < last) list.push_back(act(ActionKind::SEND_F, mb, c));
    }
  return list;
}

Schedule add_communication(const Schedule& s) {
  if (has_communication(s)) throw ScheduleError("add_communication: the schedule already has send/recv actions");
  Schedule out = s;
  const int last = s.virtual_stages() - 1;
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const auto& in = s.ranks[r];
    auto& list = out.ranks[r];
    list.clear();
    list.reserve(in.size() * 3);
    for (size_t i = 0; i < in.size(); ++i) {
      const Action& a = in[i];
      const int stage = s.stage_of(static_cast<int>(r), a.chunk);
      // NOTE [overlapped pairs]: a pair's partner receives before the F, and only the F's
      // sends sit between the two.
      const bool pair = a.overlaps_next() && i + 1 < in.size() && is_backward(in[i + 1].kind);
      const int partner_stage = pair ? s.stage_of(static_cast<int>(r), in[i + 1].chunk) : -1;
      if (a.kind == ActionKind::F && stage > 0) list.push_back(act(ActionKind::RECV_F, a.mb, a.chunk));
      if (pair && partner_stage < last) list.push_back(act(ActionKind::RECV_B, in[i + 1].mb, in[i + 1].chunk));
      if (is_backward(a.kind) && stage < last && !(i > 0 && in[i - 1].overlaps_next()))
        list.push_back(act(ActionKind::RECV_B, a.mb, a.chunk));
      list.push_back(a);
      if (a.kind == ActionKind::F && stage < last) list.push_back(act(ActionKind::SEND_F, a.mb, a.chunk));
      if (is_backward(a.kind) && stage > 0) list.push_back(act(ActionKind::SEND_B, a.mb, a.chunk));
    }
  }
  order_receives(out);  // NOTE [pair order]: each receiver takes a pair's messages in the sender's order
  return out;
}

}  // namespace trident::sched
