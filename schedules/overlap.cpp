// Overlapped forward-backward pairs (NOTE [overlapped pairs] in overlap.h).
#include "schedules/overlap.h"

#include "schedules/generators.h"
#include "schedules/group_waits.h"
#include "schedules/validate.h"

namespace trident::sched {

namespace {

// A candidate on one rank: the backward (B or I) at list position b and the
// first F after it, at f, with only W and communication between them.
struct Candidate {
  int rank;
  size_t b, f;
};

// True when the action at list[i] is already the partner of a pair: the
// first action before it that is not communication is a flagged F.
bool paired_already(const ActionList& list, size_t i) {
  while (i > 0 && is_communication(list[i - 1].kind)) --i;
  return i > 0 && list[i - 1].overlaps_next();
}

std::vector<Candidate> candidates(const Schedule& s) {
  std::vector<Candidate> out;
  for (int r = 0; r < s.pipeline_ranks; ++r) {
    const ActionList& list = s.ranks[r];
    for (size_t i = 0; i < list.size(); ++i) {
      if (!is_backward(list[i].kind) || paired_already(list, i)) continue;
      size_t j = i + 1;
      while (j < list.size() && (is_communication(list[j].kind) || list[j].kind == ActionKind::W)) ++j;
      if (j == list.size() || list[j].kind != ActionKind::F) continue;
      if (list[j].mb == list[i].mb && list[j].chunk == list[i].chunk) continue;
      out.push_back({r, i, j});
      i = j;
    }
  }
  return out;
}

// Pairs the candidate in place: the F moves up to the backward and runs with
// it, its own sends (after it, up to the next compute) right behind it; the
// receives between the two move before the pair (each keeping its order),
// everything else between them (W, sends) after it.
void apply(Schedule& s, const Candidate& c) {
  ActionList& list = s.ranks[c.rank];
  const Action f = list[c.f];
  auto own_send = [&](const Action& a) { return a.kind == ActionKind::SEND_F && a.mb == f.mb && a.chunk == f.chunk; };
  auto is_recv = [](const Action& a) { return a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B; };
  size_t after = c.f + 1;  // the F's own block of communication: [c.f + 1, after)
  while (after < list.size() && !is_compute(list[after].kind) && list[after].kind != ActionKind::REDUCE_GRAD) ++after;
  ActionList out;
  out.reserve(list.size());
  out.insert(out.end(), list.begin(), list.begin() + static_cast<std::ptrdiff_t>(c.b));
  for (size_t k = c.b + 1; k < c.f; ++k)
    if (is_recv(list[k])) out.push_back(list[k]);
  Action paired = f;
  paired.flags = Action::kOverlapNext;
  out.push_back(paired);
  for (size_t k = c.f + 1; k < after; ++k)
    if (own_send(list[k])) out.push_back(list[k]);
  out.push_back(list[c.b]);
  for (size_t k = c.b + 1; k < c.f; ++k)
    if (!is_recv(list[k])) out.push_back(list[k]);
  for (size_t k = c.f + 1; k < list.size(); ++k)
    if (k >= after || !own_send(list[k])) out.push_back(list[k]);
  list = std::move(out);
}

bool valid(const Schedule& s) {
  try {
    validate(s);
    return true;
  } catch (const ScheduleError&) {
    return false;
  }
}

}  // namespace

Schedule overlap_pairs(const Schedule& s, bool one_by_one) {
  validate(s);  // throws naming what is wrong with the input itself
  const std::vector<Candidate> all = candidates(s);
  if (all.empty()) return s;
  // Every candidate at once (applied from the back of each list, so the
  // positions of the earlier ones hold); the usual case.
  Schedule every = s;
  for (size_t k = all.size(); k-- > 0;) apply(every, all[k]);
  if (valid(every)) return every;
  // Else one at a time, in list order, keeping each that leaves the schedule
  // valid (each pair applied shifts later positions of its rank: recompute).
  // Each try validates the whole list: quadratic, so bounded.
  if (!one_by_one || action_count(s) > kMaxDeferActions)
    throw ScheduleError("overlap_pairs: pairing every candidate of this list deadlocks, and " +
                        (one_by_one ? "with " + std::to_string(action_count(s)) + " actions (more than " +
                                          std::to_string(kMaxDeferActions) + ") the pairs are"
                                    : std::string("this caller's pairs are")) +
                        " not searched one at a time");
  Schedule out = s;
  for (size_t k = 0; k < all.size(); ++k) {
    const std::vector<Candidate> now = candidates(out);
    for (const Candidate& c : now) {
      if (c.rank != all[k].rank || out.ranks[c.rank][c.b] != s.ranks[c.rank][all[k].b]) continue;
      Schedule trial = out;
      apply(trial, c);
      if (valid(trial)) out = std::move(trial);
      break;
    }
  }
  return out;
}

int count_pairs(const Schedule& s) {
  int n = 0;
  for (const ActionList& list : s.ranks)
    for (const Action& a : list) n += a.overlaps_next() ? 1 : 0;
  return n;
}

}  // namespace trident::sched
