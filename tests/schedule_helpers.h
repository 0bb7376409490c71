// Action lists as the executor ran them before NOTE [pair order]
// (schedules/pair_order.h), for the tests that show the validator and the
// nccl-rules backend refuse them.
#pragma once

#include <string>
#include <vector>

#include "schedules/action.h"
#include "schedules/generators.h"
#include "schedules/validate.h"

namespace trident::testing {

// What validate() says of s ("" when it passes).
inline std::string validation_error(const sched::Schedule& s) {
  try {
    sched::validate(s);
  } catch (const sched::ScheduleError& e) {
    return e.what();
  }
  return "";
}

// A generator's list with each send right after the compute that made it
// (add_communication): the schedule as the simulator models it, before
// generate() moves the sends a compute would wait on (NOTE [group waits]).
inline sched::Schedule placed(const std::string& kind, int p, int m, int v = 0) {
  return sched::add_communication(sched::generate_compute(kind, p, m, v));
}

// Communication as add_communication() placed it before order_receives():
// each receive right before its compute, each send right after.
inline sched::Schedule unordered_communication(const sched::Schedule& compute_only) {
  using sched::Action;
  using sched::ActionKind;
  sched::Schedule out = compute_only;
  const int last = compute_only.virtual_stages() - 1;
  for (size_t r = 0; r < out.ranks.size(); ++r) {
    sched::ActionList& list = out.ranks[r];
    list.clear();
    for (const Action& a : compute_only.ranks[r]) {
      const int stage = compute_only.stage_of(static_cast<int>(r), a.chunk);
      if (a.kind == ActionKind::F && stage > 0) list.push_back(Action(ActionKind::RECV_F, a.mb, a.chunk));
      if (sched::is_backward(a.kind) && stage < last) list.push_back(Action(ActionKind::RECV_B, a.mb, a.chunk));
      list.push_back(a);
      if (a.kind == ActionKind::F && stage < last) list.push_back(Action(ActionKind::SEND_F, a.mb, a.chunk));
      if (sched::is_backward(a.kind) && stage > 0) list.push_back(Action(ActionKind::SEND_B, a.mb, a.chunk));
    }
  }
  return out;
}

// A receive prefetch, which the executor does not do: each receive posted
// ahead of the compute before the one that needs it (to overlap the transfer
// with it).
inline sched::Schedule with_prefetched_receives(sched::Schedule s) {
  for (sched::ActionList& list : s.ranks) {
    sched::ActionList out;
    std::vector<char> taken(list.size(), 0);
    for (size_t i = 0; i < list.size(); ++i) {
      if (taken[i]) continue;
      if (sched::is_compute(list[i].kind))
        for (size_t j = i + 1; j < list.size() && !sched::is_compute(list[j].kind); ++j)
          if (list[j].kind == sched::ActionKind::RECV_F || list[j].kind == sched::ActionKind::RECV_B)
            out.push_back(list[j]), taken[j] = 1;
      out.push_back(list[i]);
    }
    list = out;
  }
  return s;
}

}  // namespace trident::testing
