// Schedule generators. Each writes compute actions only, with its warm-up,
// steady state and cool-down visible; add_communication() makes them runnable.
#include "schedules/generators.h"

#include <algorithm>

namespace trident::sched {

namespace {

Action act(ActionKind k, int mb, int chunk = 0) { return Action{k, mb, chunk}; }

std::string describe(const std::string& kind, int p, int m, int v) {
  return "kind '" + kind + "' with p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v);
}

// NOTE [interleaved order] Megatron's interleaved schedule walks the rank's
// m*v forward slots in groups of p micro-batches per chunk: slot k runs chunk
// (k mod p*v) / p of micro-batch (k / (p*v)) * p + k mod p. Backward slots use
// the same mapping with chunks reversed. This is why m % p == 0 is required.
Action interleaved_slot(ActionKind kind, int k, int p, int v) {
  const int group = k / (p * v), in_group = k % (p * v);
  int chunk = in_group / p;
  if (kind != ActionKind::F) chunk = v - 1 - chunk;
  return act(kind, group * p + in_group % p, chunk);
}

}  // namespace

Schedule gpipe(int p, int m) {
  Schedule s = empty_schedule(p, m, 1);
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < m; ++i) s.ranks[r].push_back(act(ActionKind::F, i));      // all forwards
    // Then all backwards, in ascending micro-batch order (as PyTorch's GPipe
    // schedule does) so each gradient sums its micro-batches in the same
    // order as every other schedule: bit-identical to the pp = 1 reference.
    for (int i = 0; i < m; ++i) s.ranks[r].push_back(act(ActionKind::B, i));
  }
  return s;
}

Schedule one_f_one_b(int p, int m) {
  Schedule s = empty_schedule(p, m, 1);
  for (int r = 0; r < p; ++r) {
    auto& out = s.ranks[r];
    const int warmup = std::min(p - r - 1, m);
    for (int i = 0; i < warmup; ++i) out.push_back(act(ActionKind::F, i));  // warm-up
    for (int i = 0; i < m - warmup; ++i) {                                   // steady: one F, one B
      out.push_back(act(ActionKind::F, warmup + i));
      out.push_back(act(ActionKind::B, i));
    }
    for (int i = m - warmup; i < m; ++i) out.push_back(act(ActionKind::B, i));  // cool-down
  }
  return s;
}

Schedule interleaved(int p, int m, int v) {
  check_supported("interleaved", p, m, v);
  if (v == 1) return one_f_one_b(p, m);
  Schedule s = empty_schedule(p, m, v);
  const int total = m * v;
  for (int r = 0; r < p; ++r) {
    auto& out = s.ranks[r];
    const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
    for (int k = 0; k < warmup; ++k) out.push_back(interleaved_slot(ActionKind::F, k, p, v));  // warm-up
    for (int k = 0; k < total - warmup; ++k) {                                                   // steady
      out.push_back(interleaved_slot(ActionKind::F, warmup + k, p, v));
      out.push_back(interleaved_slot(ActionKind::B, k, p, v));
    }
    for (int k = total - warmup; k < total; ++k) out.push_back(interleaved_slot(ActionKind::B, k, p, v));  // cool-down
  }
  return s;
}

Schedule zb_h1(int p, int m) {
  Schedule s = empty_schedule(p, m, 1);
  for (int r = 0; r < p; ++r) {
    auto& out = s.ranks[r];
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
  }
  return s;
}

void check_supported(const std::string& kind, int p, int m, int v) {
  if (p < 1 || m < 1 || v < 1)
    throw ScheduleError(describe(kind, p, m, v) + ": stages, microbatches and chunks must be >= 1");
  if (kind == "gpipe" || kind == "1f1b" || kind == "zb-h1") {
    if (v != 1) throw ScheduleError(describe(kind, p, m, v) + ": this kind has one chunk per rank, expected v=1");
    return;
  }
  if (kind == "interleaved") {
    if (v > 1 && m % p != 0)
      throw ScheduleError(describe(kind, p, m, v) + ": interleaved with v>1 needs microbatches divisible by stages (m % p == 0)");
    return;
  }
  throw ScheduleError("unknown schedule kind '" + kind + "', expected gpipe, 1f1b, interleaved or zb-h1");
}

Schedule generate(const std::string& kind, int p, int m, int v) {
  check_supported(kind, p, m, v);
  if (kind == "gpipe") return add_communication(gpipe(p, m));
  if (kind == "1f1b") return add_communication(one_f_one_b(p, m));
  if (kind == "zb-h1") return add_communication(zb_h1(p, m));
  return add_communication(interleaved(p, m, v));
}

bool has_communication(const Schedule& s) {
  for (const auto& list : s.ranks)
    for (const Action& a : list)
      if (is_communication(a.kind)) return true;
  return false;
}

Schedule add_communication(const Schedule& s) {
  if (has_communication(s)) throw ScheduleError("add_communication: the schedule already has send/recv actions");
  Schedule out = s;
  const int last = s.virtual_stages() - 1;
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    auto& list = out.ranks[r];
    list.clear();
    for (const Action& a : s.ranks[r]) {
      const int stage = s.stage_of(static_cast<int>(r), a.chunk);
      const bool fwd = a.kind == ActionKind::F, bwd = is_backward(a.kind);
      if (fwd && stage > 0) list.push_back(act(ActionKind::RECV_F, a.mb, a.chunk));
      if (bwd && stage < last) list.push_back(act(ActionKind::RECV_B, a.mb, a.chunk));
      list.push_back(a);
      if (fwd && stage < last) list.push_back(act(ActionKind::SEND_F, a.mb, a.chunk));
      if (bwd && stage > 0) list.push_back(act(ActionKind::SEND_B, a.mb, a.chunk));
    }
  }
  return out;
}

}  // namespace trident::sched
