// Validator. Executor semantics assumed (README.md, "Executor semantics"):
// each rank runs its list in order; a SEND never blocks; a RECV blocks until
// the peer has issued its matching SEND; between an ordered pair of ranks,
// messages are received in the order they were sent.
#include "schedules/validate.h"

#include <algorithm>
#include <deque>
#include <map>

#include "schedules/generators.h"

namespace trident::sched {

namespace {

struct Where {
  int rank;
  int pos;
};

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

// Positions of each action kind for one (mb, chunk) on one rank.
struct Slots {
  std::map<ActionKind, std::vector<int>> at;
  int first(ActionKind k) const { auto it = at.find(k); return it == at.end() || it->second.empty() ? -1 : it->second[0]; }
  int count(ActionKind k) const { auto it = at.find(k); return it == at.end() ? 0 : static_cast<int>(it->second.size()); }
};

void check_ranges(const Schedule& s) {
  if (s.stages < 1 || s.microbatches < 1 || s.chunks < 1 || static_cast<int>(s.ranks.size()) != s.stages)
    throw ScheduleError("invalid schedule: p=" + std::to_string(s.stages) + " m=" + std::to_string(s.microbatches) +
                        " v=" + std::to_string(s.chunks) + " with " + std::to_string(s.ranks.size()) +
                        " rank lists, expected p, m, v >= 1 and p lists");
  for (int r = 0; r < s.stages; ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.mb < 0 || a.mb >= s.microbatches || a.chunk < 0 || a.chunk >= s.chunks)
        violation(s, {{r, i}}, at_text(s, r, i) + " is outside m=" + std::to_string(s.microbatches) +
                                   " micro-batches or v=" + std::to_string(s.chunks) + " chunks");
    }
}

// One F and one B, or one I and a later W, per (mb, chunk) on each rank; and,
// when communication is explicit, each needed RECV before and SEND after.
void check_rank(const Schedule& s, int r, bool comm) {
  std::map<std::pair<int, int>, Slots> slots;
  const auto& list = s.ranks[r];
  for (int i = 0; i < static_cast<int>(list.size()); ++i) slots[{list[i].mb, list[i].chunk}].at[list[i].kind].push_back(i);
  const int last = s.virtual_stages() - 1;
  for (int c = 0; c < s.chunks; ++c)
    for (int mb = 0; mb < s.microbatches; ++mb) {
      const Slots& sl = slots[{mb, c}];
      const std::string who = "rank " + std::to_string(r) + ": micro-batch " + std::to_string(mb) + " chunk " +
                              std::to_string(c) + " (virtual stage " + std::to_string(s.stage_of(r, c)) + ")";
      auto fail = [&](int pos, const std::string& what) {
        violation(s, {{r, std::max(pos, 0)}}, who + " " + what);
      };
      const int f = sl.first(ActionKind::F), b = sl.first(ActionKind::B), in = sl.first(ActionKind::I),
                w = sl.first(ActionKind::W);
      if (sl.count(ActionKind::F) != 1)
        fail(f, "has " + std::to_string(sl.count(ActionKind::F)) + " forwards F, expected exactly 1");
      const bool full = sl.count(ActionKind::B) == 1 && sl.count(ActionKind::I) == 0 && sl.count(ActionKind::W) == 0;
      const bool split = sl.count(ActionKind::B) == 0 && sl.count(ActionKind::I) == 1 && sl.count(ActionKind::W) == 1;
      if (!full && !split)
        fail(std::max({b, in, w, f}), "has B x" + std::to_string(sl.count(ActionKind::B)) + ", I x" +
                                          std::to_string(sl.count(ActionKind::I)) + ", W x" +
                                          std::to_string(sl.count(ActionKind::W)) +
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
        const int want = n.needed ? 1 : 0, pos = sl.first(n.k);
        const std::string tok = to_token(Action{n.k, mb, c});
        if (sl.count(n.k) != want)
          fail(pos >= 0 ? pos : n.anchor, "has " + std::to_string(sl.count(n.k)) + " x " + tok + ", expected " +
                                              std::to_string(want) + (n.needed ? "" : " (no peer at the pipeline end)"));
        if (n.needed && n.before && pos > n.anchor)
          fail(pos, "receives " + tok + " after the compute that needs it (position " + std::to_string(n.anchor) + ")");
        if (n.needed && !n.before && pos < n.anchor)
          fail(pos, "sends " + tok + " before the compute that produces it (position " + std::to_string(n.anchor) + ")");
      }
    }
}

// Runs every list under the executor semantics; returns the number of messages.
int run_executor(const Schedule& s) {
  struct Msg { Action send; Where from; };
  std::map<std::pair<int, int>, std::deque<Msg>> pipes;  // (src, dst) -> FIFO
  std::vector<int> pc(s.stages, 0);
  int messages = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.stages; ++r) {
      const auto& list = s.ranks[r];
      while (pc[r] < static_cast<int>(list.size())) {
        const Action& a = list[pc[r]];
        if (a.kind == ActionKind::SEND_F || a.kind == ActionKind::SEND_B) {
          pipes[{r, peer_rank(s, r, a)}].push_back({a, {r, pc[r]}});
        } else if (a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B) {
          auto& q = pipes[{peer_rank(s, r, a), r}];
          if (q.empty()) break;  // blocked
          const Msg m = q.front();
          q.pop_front();
          if (m.send != counterpart(s, r, a))
            violation(s, {{r, pc[r]}, m.from},
                      at_text(s, r, pc[r]) + " gets, in send order, the message of " +
                          at_text(s, m.from.rank, m.from.pos) + ", expected " + to_token(counterpart(s, r, a)) +
                          ": sends and receives between two ranks must come in the same order");
          ++messages;
        }
        ++pc[r];
        progress = true;
      }
    }
  }
  std::vector<Where> blocked;
  std::string what;
  for (int r = 0; r < s.stages; ++r) {
    if (pc[r] == static_cast<int>(s.ranks[r].size())) continue;
    const Action& a = s.ranks[r][pc[r]];
    blocked.push_back({r, pc[r]});
    what += (what.empty() ? "" : "; ") + at_text(s, r, pc[r]) + " waits for " + to_token(counterpart(s, r, a)) +
            " from rank " + std::to_string(peer_rank(s, r, a));
  }
  if (!blocked.empty()) violation(s, blocked, "deadlock: " + what);
  return messages;
}

}  // namespace

std::string context_grid(const Schedule& s, int pos, const std::vector<std::pair<int, int>>& marks) {
  const int lo = std::max(0, pos - 5), hi = pos + 6;  // window of list positions [lo, hi)
  size_t width = 4;
  for (const auto& list : s.ranks)
    for (int i = lo; i < hi && i < static_cast<int>(list.size()); ++i) width = std::max(width, to_token(list[i]).size() + 3);
  auto cell = [&](std::string t) { return t + std::string(width > t.size() ? width - t.size() : 1, ' '); };
  std::string out = "  position  ";
  for (int i = lo; i < hi; ++i) out += cell(std::to_string(i));
  while (out.back() == ' ') out.pop_back();
  out += "\n";
  for (int r = 0; r < s.stages; ++r) {
    std::string row = "  rank " + std::to_string(r);
    row += std::string(row.size() < 12 ? 12 - row.size() : 1, ' ');
    for (int i = lo; i < hi && i < static_cast<int>(s.ranks[r].size()); ++i) {
      const bool marked = std::find(marks.begin(), marks.end(), std::make_pair(r, i)) != marks.end();
      const std::string t = to_token(s.ranks[r][i]);
      row += cell(marked ? "[" + t + "]" : t);
    }
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  return out;
}

ValidationReport validate(const Schedule& input) {
  check_ranges(input);
  ValidationReport rep;
  rep.communication_added = !has_communication(input);
  for (int r = 0; r < input.stages; ++r) check_rank(input, r, !rep.communication_added);
  const Schedule s = rep.communication_added ? add_communication(input) : input;
  rep.messages = run_executor(s);
  for (const auto& list : s.ranks)
    for (const Action& a : list) {
      rep.compute_actions += is_compute(a.kind) ? 1 : 0;
      rep.split_backward = rep.split_backward || a.kind == ActionKind::I;
    }
  return rep;
}

}  // namespace trident::sched
