// NOTE [group waits]: the grouped run and the pass that moves sends.
#include "schedules/group_waits.h"

#include <algorithm>
#include <optional>

#include "schedules/generators.h"
#include "schedules/pair_order.h"
#include "schedules/stream_run.h"

namespace trident::sched {

double grouped_step_time(const Schedule& s) { return detail::timed_stream_run(s).step; }

double grouped_step_time(const Schedule& s, const Costs& costs) {
  check_costs(costs, s.pipeline_ranks, s.chunks);
  return detail::timed_stream_run(s, &costs).step;
}

TimelineStats grouped_stats(const Schedule& s, const Costs& costs) {
  TimelineStats st = simulate_stats(s, costs);
  if (!has_communication(s) || action_count(s) > kMaxDeferActions) return st;
  const double step = grouped_step_time(s, costs);
  if (!(step > 0)) return st;
  // The grouped run only adds waits: never shorter than the plain one (a
  // rounding difference aside).
  st.step_time = std::max(step, st.step_time);
  double idle = 0;
  for (double b : st.busy) idle += st.step_time - b;
  st.bubble_fraction = idle / (static_cast<double>(st.busy.size()) * st.step_time);
  return st;
}

namespace {

// Rank r's list with the sends to other ranks among [first, end) moved right after the compute at
// `end`, ahead of what follows it; `sends` gets them (none: nothing to move).
ActionList sends_after_compute(const Schedule& best, size_t r, size_t first, size_t end, ActionList& sends) {
  const ActionList& list = best.ranks[r];
  ActionList moved_list(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(first));
  for (size_t i = first; i < end; ++i) {
    const bool send = list[i].kind == ActionKind::SEND_F || list[i].kind == ActionKind::SEND_B;
    (send && peer_rank(best.stage_map(), static_cast<int>(r), list[i]) != static_cast<int>(r) ? sends : moved_list)
        .push_back(list[i]);
  }
  if (sends.empty()) return moved_list;
  moved_list.push_back(list[end]);
  moved_list.insert(moved_list.end(), sends.begin(), sends.end());
  moved_list.insert(moved_list.end(), list.begin() + static_cast<std::ptrdiff_t>(end) + 1, list.end());
  return moved_list;
}

// The schedule with the receive that rank r's `send` waits for posted one compute earlier by its
// rank; none when there is no compute before it, or when it would pass another receive from the same
// sender (NCCL matches a pair's messages in order).
std::optional<Schedule> receive_earlier(const Schedule& best, int r, const Action& send) {
  const int q = peer_rank(best.stage_map(), r, send);
  const Action recv = counterpart(best.stage_map(), r, send);
  const ActionList& theirs = best.ranks[static_cast<size_t>(q)];
  const auto at = std::find(theirs.begin(), theirs.end(), recv);
  if (at == theirs.end()) return std::nullopt;
  auto compute = at;
  while (compute != theirs.begin() && !is_compute((compute - 1)->kind)) --compute;
  if (compute == theirs.begin()) return std::nullopt;
  --compute;  // the compute before the receive's group
  const bool passes = std::any_of(compute, at, [&](const Action& a) {
    return (a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B) && peer_rank(best.stage_map(), q, a) == r;
  });
  if (passes) return std::nullopt;
  Schedule earlier = best;
  ActionList& list2 = earlier.ranks[static_cast<size_t>(q)];
  const auto from = at - theirs.begin(), to = compute - theirs.begin();
  list2.erase(list2.begin() + from);
  list2.insert(list2.begin() + to, recv);
  return earlier;
}

}  // namespace

Schedule defer_coupled_sends(const Schedule& s) {
  if (!has_communication(s) || action_count(s) > kMaxDeferActions) return s;
  Schedule best = s;
  detail::TimedRun run = detail::timed_stream_run(best);
  if (run.step < 0) return s;
  // Scan the groups in order; after a move the ids from that group on may
  // shift, so the scan goes on from the same id. A scan without a move ends it.
  size_t tries = 0;
  // At most four tries per group, and kMaxDeferWork actions run over all tries.
  const size_t max_tries = std::min<size_t>(4 * run.groups.size() + 16, kMaxDeferWork / action_count(s));
  // Keeps a candidate that shortens the grouped step.
  const auto accept = [&](Schedule candidate) {
    if (++tries > max_tries) return false;
    const detail::TimedRun tried = detail::timed_stream_run(candidate);
    if (tried.step < 0 || tried.step >= run.step) return false;
    best = std::move(candidate);
    run = tried;
    return true;
  };
  for (bool moved = true; moved && tries < max_tries;) {
    moved = false;
    for (size_t g = 0; g < run.groups.size() && tries < max_tries; ++g) {  // no candidate once the tries are spent
      if (run.groups[g].wait <= 0) continue;  // no send held this group past its receives
      const auto r = static_cast<size_t>(run.groups[g].rank);
      const ActionList& list = best.ranks[r];
      const auto first = static_cast<size_t>(run.groups[g].first), end = static_cast<size_t>(run.groups[g].end);
      if (end >= list.size() || !is_compute(list[end].kind)) continue;  // no compute after it to move past
      ActionList sends;
      ActionList moved_list = sends_after_compute(best, r, first, end, sends);
      if (sends.empty()) continue;
      Schedule candidate = best;
      candidate.ranks[r] = std::move(moved_list);
      if (accept(std::move(candidate))) {
        moved = true;
        --g;  // this id again: it may name the next group now
        continue;
      }
      // Else the receive that a send waits for, posted one compute earlier by its rank.
      for (const Action& send : sends) {
        std::optional<Schedule> earlier = receive_earlier(best, static_cast<int>(r), send);
        if (!earlier) continue;
        if (accept(std::move(*earlier))) {
          moved = true;
          --g;
          break;
        }
      }
    }
  }
  try {
    check_pair_order(best);
  } catch (const ScheduleError&) {
    return s;  // never run a list the validator refuses
  }
  return best;
}

Schedule place_communication(const Schedule& compute_only) {
  return defer_coupled_sends(add_communication(compute_only));
}

}  // namespace trident::sched
