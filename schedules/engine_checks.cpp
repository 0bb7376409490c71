// The per-rank checks of a schedule (engine.h): ranges, one forward and one
// backward per (micro-batch, chunk), receives before and sends after their
// compute, one REDUCE_GRAD per chunk after its backward. A one-byte-per-slot pass first; on any anomaly the
// detailed pass that names positions.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedules/engine.h"
#include "schedules/generators.h"

namespace trident::sched::detail {

namespace {

}  // namespace

[[noreturn]] void violation(const Schedule& s, std::vector<Where> at, const std::string& what) {
  std::string msg = "invalid schedule: " + what + "\n";
  std::vector<std::pair<int, int>> marks;
  for (const Where& w : at) marks.push_back({w.rank, w.pos});
  msg += context_grid(s, at.front().pos, marks);
  throw ScheduleError(msg);
}

std::string at_text(const Schedule& s, int rank, int pos) {
  return "rank " + std::to_string(rank) + " position " + std::to_string(pos) + " (" +
         to_token(s.ranks[rank][pos]) + ")";
}

namespace {

void check_shape(const Schedule& s) {
  if (s.pipeline_ranks < 1 || s.microbatches < 1 || s.chunks < 1 || static_cast<int>(s.ranks.size()) != s.pipeline_ranks)
    throw ScheduleError("invalid schedule: p=" + std::to_string(s.pipeline_ranks) + " m=" + std::to_string(s.microbatches) +
                        " v=" + std::to_string(s.chunks) + " with " + std::to_string(s.ranks.size()) +
                        " rank lists, expected p, m, v >= 1 and p lists");
}

// Each action's micro-batch and chunk in range (a REDUCE_GRAD's micro-batch is 0).
void check_action(const Schedule& s, int r, int i) {
  const Action& a = s.ranks[r][i];
  if (a.mb < 0 || a.mb >= s.microbatches || a.chunk >= s.chunks)
    violation(s, {{r, i}}, at_text(s, r, i) + " is outside m=" + std::to_string(s.microbatches) +
                               " micro-batches or v=" + std::to_string(s.chunks) + " chunks");
  if (a.kind == ActionKind::REDUCE_GRAD && a.mb != 0)
    violation(s, {{r, i}}, at_text(s, r, i) + " is a REDUCE_GRAD with micro-batch " + std::to_string(a.mb) +
                               ", expected 0 (it has none)");
}

// NOTE [REDUCE_GRAD rule] Per rank and chunk: exactly one REDUCE_GRAD, after
// every B, I and W of that chunk on the rank (after the I too, though it adds
// nothing to the weight gradients: a chunk's reduction point ends its
// backward). The executor reduces the chunk's gradients there.
void check_reduce_grad(const Schedule& s, int r) {
  const auto& list = s.ranks[r];
  for (int c = 0; c < s.chunks; ++c) {
    int first = -1, second = -1, last_bwd = -1;
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      if (a.chunk != c) continue;
      if (a.kind == ActionKind::REDUCE_GRAD) {
        if (first < 0)
          first = i;
        else if (second < 0)
          second = i;
      }
      if (a.kind == ActionKind::B || a.kind == ActionKind::I || a.kind == ActionKind::W) last_bwd = i;
    }
    const std::string tok = to_token(reduce_grad(c));
    const std::string who = "rank " + std::to_string(r) + " chunk " + std::to_string(c) + " (virtual stage " +
                            std::to_string(s.stage_of(r, c)) + ")";
    if (first < 0)
      violation(s, {{r, std::max(last_bwd, 0)}}, who + " has no REDUCE_GRAD " + tok + ", expected one right after "
                    "its last B or W" + (last_bwd >= 0 ? " (" + at_text(s, r, last_bwd) + ")" : std::string()));
    if (second >= 0)
      violation(s, {{r, first}, {r, second}}, who + " has two REDUCE_GRAD " + tok + " (positions " +
                    std::to_string(first) + " and " + std::to_string(second) + "), expected exactly one per chunk");
    if (last_bwd > first)
      violation(s, {{r, first}, {r, last_bwd}}, who + ": " + at_text(s, r, first) + " comes before " +
                    at_text(s, r, last_bwd) + "; the chunk's REDUCE_GRAD must follow every B, I and W of the chunk");
  }
}

// First position and count of each action kind for one (mb, chunk) on one rank.
struct Slot {
  int32_t first[kActionKinds];
  uint8_t count[kActionKinds];
};

// One F and one B, or one I and a later W, per (mb, chunk) on rank r; and,
// when communication is explicit, each needed RECV before and SEND after.
void check_rank(const Schedule& s, int r, bool comm, std::vector<Slot>& slots) {
  const int m = s.microbatches, last = s.virtual_stages() - 1;
  Slot empty;
  std::fill(std::begin(empty.first), std::end(empty.first), -1);
  std::fill(std::begin(empty.count), std::end(empty.count), 0);
  slots.assign(static_cast<size_t>(m) * s.chunks, empty);
  const auto& list = s.ranks[r];
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    const Action& a = list[i];
    if (a.mb < 0 || a.mb >= m || a.chunk >= s.chunks || (a.kind == ActionKind::REDUCE_GRAD && a.mb != 0))
      check_action(s, r, i);  // rare: full check
    if (a.kind == ActionKind::REDUCE_GRAD) continue;  // check_reduce_grad()
    Slot& e = slots[static_cast<size_t>(a.chunk) * m + a.mb];
    const int k = static_cast<int>(list[i].kind);
    if (e.count[k] == 0) e.first[k] = i;
    if (e.count[k] < 255) ++e.count[k];
  }
  for (int c = 0; c < s.chunks; ++c)
    for (int mb = 0; mb < m; ++mb) {
      const Slot& sl = slots[static_cast<size_t>(c) * m + mb];
      auto first = [&](ActionKind k) { return sl.first[static_cast<int>(k)]; };
      auto count = [&](ActionKind k) { return static_cast<int>(sl.count[static_cast<int>(k)]); };
      auto fail = [&](int pos, const std::string& what) {
        const std::string who = "rank " + std::to_string(r) + ": micro-batch " + std::to_string(mb) + " chunk " +
                                std::to_string(c) + " (virtual stage " + std::to_string(s.stage_of(r, c)) + ")";
        violation(s, {{r, std::max(pos, 0)}}, who + " " + what);
      };
      const int f = first(ActionKind::F), b = first(ActionKind::B), in = first(ActionKind::I), w = first(ActionKind::W);
      if (count(ActionKind::F) != 1)
        fail(f, "has " + std::to_string(count(ActionKind::F)) + " forwards F, expected exactly 1");
      const bool full = count(ActionKind::B) == 1 && count(ActionKind::I) == 0 && count(ActionKind::W) == 0;
      const bool split = count(ActionKind::B) == 0 && count(ActionKind::I) == 1 && count(ActionKind::W) == 1;
      if (!full && !split)
        fail(std::max({b, in, w, f}), "has B x" + std::to_string(count(ActionKind::B)) + ", I x" +
                                          std::to_string(count(ActionKind::I)) + ", W x" +
                                          std::to_string(count(ActionKind::W)) +
                                          ": expected one backward, either one B or one I and one W");
      const int bwd = full ? b : in;
      if (bwd < f) fail(bwd, "runs its backward at position " + std::to_string(bwd) + " before its F at " + std::to_string(f));
      if (split && w < in) fail(w, "runs W before I (at " + std::to_string(in) + "); W must follow I");
      if (!comm) continue;
      const int stage = s.stage_of(r, c);
      struct Need { ActionKind k; bool needed; int anchor; bool before; };
      const Need needs[] = {{ActionKind::RECV_F, stage > 0, f, true}, {ActionKind::SEND_F, stage < last, f, false},
                            {ActionKind::RECV_B, stage < last, bwd, true}, {ActionKind::SEND_B, stage > 0, bwd, false}};
      for (const Need& n : needs) {
        const int want = n.needed ? 1 : 0, pos = first(n.k);
        const std::string tok = to_token(Action{n.k, mb, c});
        if (count(n.k) != want)
          fail(pos >= 0 ? pos : n.anchor, "has " + std::to_string(count(n.k)) + " x " + tok + ", expected " +
                                              std::to_string(want) + (n.needed ? "" : " (no peer at the pipeline end)"));
        if (n.needed && n.before && pos > n.anchor)
          fail(pos, "receives " + tok + " after the compute that needs it (position " + std::to_string(n.anchor) + ")");
        if (n.needed && !n.before && pos < n.anchor)
          fail(pos, "sends " + tok + " before the compute that produces it (position " + std::to_string(n.anchor) + ")");
      }
    }
}

// An action with flags (rare): only an F may open an overlapped pair, and
// its partner is the next action of the list that is not communication, a B
// or I of another micro-batch or chunk, whose input is not received between
// the two (the pair starts once both inputs are in; NOTE [overlapped pairs]
// in schedules/overlap.h).
void check_pair(const Schedule& s, int r, size_t i) {
  const auto& list = s.ranks[r];
  const Action& a = list[i];
  const int pos = static_cast<int>(i);
  if ((a.flags & ~Action::kOverlapNext) != 0)
    violation(s, {{r, pos}}, at_text(s, r, pos) + " has flags " + std::to_string(a.flags) +
                                 ": the only flag is the overlapped pair's (1)");
  if (a.kind != ActionKind::F)
    violation(s, {{r, pos}}, at_text(s, r, pos) + " opens an overlapped pair, which only an F may do");
  const size_t j = pair_partner(list, i);
  const bool partner = j < list.size() && (list[j].kind == ActionKind::B || list[j].kind == ActionKind::I);
  if (!partner)
    violation(s, {{r, pos}}, at_text(s, r, pos) + " opens an overlapped pair, expected its partner, a B or I, "
                             "next in the list (nothing but communication between them)");
  if (list[j].mb == a.mb && list[j].chunk == a.chunk)
    violation(s, {{r, pos}, {r, static_cast<int>(j)}}, at_text(s, r, pos) + " is paired with its own backward");
  for (size_t k = i + 1; k < j; ++k)
    if (list[k] == Action(ActionKind::RECV_B, list[j].mb, list[j].chunk))
      violation(s, {{r, static_cast<int>(k)}}, at_text(s, r, static_cast<int>(k)) + " receives the input of " +
                                                   at_text(s, r, static_cast<int>(j)) + " inside its overlapped pair: "
                                                   "a pair starts once both inputs are in, so it comes before the F");
}

// The per-rank checks in one pass with one flag byte per (chunk, mb): each
// action checks what must (not) have come before it. Positions are not kept;
// on the first anomaly check_rank() reruns on that rank to name them. Returns
// false when the rank needs that detailed check. Counts compute actions and I.
bool quick_check_rank(const Schedule& s, int r, bool comm, std::vector<uint8_t>& seen, ValidationReport* rep) {
  enum : uint8_t { kF = 1, kB = 2, kI = 4, kW = 8, kRF = 16, kSF = 32, kRB = 64, kSB = 128 };
  std::vector<uint8_t> reduced(static_cast<size_t>(s.chunks), 0);  // per chunk: its REDUCE_GRAD was seen
  const int m = s.microbatches, v = s.chunks, last = s.virtual_stages() - 1;
  seen.assign(static_cast<size_t>(m) * v, 0);
  std::vector<int> stage(v);
  for (int c = 0; c < v; ++c) stage[c] = s.stage_of(r, c);
  const auto& list = s.ranks[r];
  const size_t n = list.size();
  int compute = 0;
  bool split = false;
  for (size_t i = 0; i < n; ++i) {
    const Action a = list[i];
    if (a.mb < 0 || a.mb >= m || a.chunk >= v) return false;
    if (a.flags != 0) check_pair(s, r, i);  // throws on a misuse
    if (a.kind == ActionKind::REDUCE_GRAD) {  // NOTE [REDUCE_GRAD rule]
      if (a.mb != 0 || reduced[a.chunk]) return false;
      reduced[a.chunk] = 1;
      continue;
    }
    if ((a.kind == ActionKind::B || a.kind == ActionKind::I || a.kind == ActionKind::W) && reduced[a.chunk]) return false;
    uint8_t& f = seen[static_cast<size_t>(a.chunk) * m + a.mb];
    const int st = stage[a.chunk];
    bool ok = true;
    switch (a.kind) {
      case ActionKind::F: ok = !(f & kF) && (!comm || st == 0 || (f & kRF)); f |= kF; break;
      case ActionKind::B:
      case ActionKind::I:
        ok = (f & kF) && !(f & (kB | kI)) && (!comm || st == last || (f & kRB));
        f |= a.kind == ActionKind::B ? kB : kI;
        split = split || a.kind == ActionKind::I;
        break;
      case ActionKind::W: ok = (f & kI) && !(f & kW); f |= kW; break;
      case ActionKind::RECV_F: ok = st > 0 && !(f & (kRF | kF)); f |= kRF; break;
      case ActionKind::SEND_F: ok = st < last && (f & kF) && !(f & kSF); f |= kSF; break;
      case ActionKind::RECV_B: ok = st < last && !(f & (kRB | kB | kI)); f |= kRB; break;
      case ActionKind::SEND_B: ok = st > 0 && (f & (kB | kI)) && !(f & kSB); f |= kSB; break;
      case ActionKind::REDUCE_GRAD: break;  // handled above
    }
    if (!ok) return false;
    compute += is_compute(a.kind) ? 1 : 0;
  }
  for (int c = 0; c < v; ++c) {
    if (!reduced[c]) return false;
    uint8_t want_comm = 0;
    if (comm) want_comm = (stage[c] > 0 ? kRF | kSB : 0) | (stage[c] < last ? kSF | kRB : 0);
    for (int mb = 0; mb < m; ++mb) {
      const uint8_t f = seen[static_cast<size_t>(c) * m + mb];
      const uint8_t work = f & (kF | kB | kI | kW);
      if ((work != (kF | kB) && work != (kF | kI | kW)) || (f & (kRF | kSF | kRB | kSB)) != want_comm) return false;
    }
  }
  rep->compute_actions += compute;
  rep->split_backward = rep->split_backward || split;
  return true;
}

}  // namespace

bool check_ranks(const Schedule& s, ValidationReport* rep) {
  check_shape(s);
  // Explicit communication is all or nothing, and with p*v > 1 every rank
  // sends something, so rank 0's list decides (a full scan of a big
  // compute-only schedule would cost as much as checking it).
  const bool comm = std::any_of(s.ranks[0].begin(), s.ranks[0].end(), [](const Action& a) { return is_communication(a.kind); });
  std::vector<uint8_t> seen;
  for (int r = 0; r < s.pipeline_ranks; ++r) {
    if (quick_check_rank(s, r, comm, seen, rep)) continue;
    std::vector<Slot> slots;
    check_rank(s, r, comm, slots);  // throws, naming positions
    check_reduce_grad(s, r);
    if (!comm && has_communication(s))
      throw ScheduleError("invalid schedule: rank " + std::to_string(r) +
                          " has send/recv actions but rank 0 has none: write them for every rank or for none");
    throw std::logic_error("schedule check: rank " + std::to_string(r) +
                           " failed the quick check but passed the detailed one (a bug in engine_checks.cpp)");
  }
  return comm;
}

}  // namespace trident::sched::detail
