// Simulator: the validator's executor run with clocks. A SEND stamps its message
// ready at (sender's clock + boundary latency); a RECV ends at max(own clock,
// ready); compute actions take their cost. Latency between chunks on the same
// rank (p == 1) is zero: the hand-over is local.
#include "schedules/simulate.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>

#include "schedules/generators.h"
#include "schedules/validate.h"

namespace trident::sched {

void check_costs(const Costs& c, int p, int v) {
  if (!(c.forward > 0) || !(c.backward > c.weight) || !(c.weight >= 0))
    throw ScheduleError("costs F=" + std::to_string(c.forward) + " B=" + std::to_string(c.backward) +
                        " W=" + std::to_string(c.weight) + ": expected F > 0 and B > W >= 0 (I = B - W)");
  const size_t boundaries = static_cast<size_t>(p * v - 1);
  if (c.latency.size() > 1 && c.latency.size() != boundaries)
    throw ScheduleError("latency has " + std::to_string(c.latency.size()) + " values, expected 0, 1 or p*v-1=" +
                        std::to_string(boundaries));
  for (double l : c.latency)
    if (!(l >= 0)) throw ScheduleError("latency " + std::to_string(l) + " is negative, expected >= 0");
}

double action_cost(const Costs& c, ActionKind k, int chunks) {
  switch (k) {
    case ActionKind::F: return c.forward / chunks;
    case ActionKind::B: return c.backward / chunks;
    case ActionKind::I: return (c.backward - c.weight) / chunks;
    case ActionKind::W: return c.weight / chunks;
    default: return 0.0;
  }
}

namespace {

double boundary_latency(const Costs& c, int boundary) {
  if (c.latency.empty()) return 0.0;
  return c.latency.size() == 1 ? c.latency[0] : c.latency[boundary];
}

}  // namespace

Timeline simulate(const Schedule& input, const Costs& costs) {
  validate(input);
  check_costs(costs, input.stages, input.chunks);
  const Schedule s = has_communication(input) ? input : add_communication(input);
  Timeline t;
  t.stages = s.stages;
  t.microbatches = s.microbatches;
  t.chunks = s.chunks;
  t.ranks.assign(s.stages, {});
  std::map<std::pair<int, int>, std::deque<double>> pipes;  // (src, dst) -> ready times, FIFO
  std::vector<size_t> pc(s.stages, 0);
  std::vector<double> clock(s.stages, 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.stages; ++r) {
      while (pc[r] < s.ranks[r].size()) {
        const Action& a = s.ranks[r][pc[r]];
        TimedAction ta{a, clock[r], clock[r]};
        if (a.kind == ActionKind::SEND_F || a.kind == ActionKind::SEND_B) {
          const int peer = peer_rank(s, r, a), stage = s.stage_of(r, a.chunk);
          const int boundary = a.kind == ActionKind::SEND_F ? stage : stage - 1;
          pipes[{r, peer}].push_back(clock[r] + (peer == r ? 0.0 : boundary_latency(costs, boundary)));
        } else if (a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B) {
          auto& q = pipes[{peer_rank(s, r, a), r}];
          if (q.empty()) break;  // validated: its SEND comes later in another rank's run
          ta.end = std::max(clock[r], q.front());
          q.pop_front();
        } else {
          ta.end = clock[r] + action_cost(costs, a.kind, s.chunks);
        }
        clock[r] = ta.end;
        t.ranks[r].push_back(ta);
        ++pc[r];
        progress = true;
      }
    }
  }
  return t;
}

TimelineStats stats(const Timeline& t) {
  TimelineStats st;
  st.busy.assign(t.ranks.size(), 0.0);
  st.peak_inflight.assign(t.ranks.size(), 0);
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    std::vector<TimedAction> list = t.ranks[r];
    std::stable_sort(list.begin(), list.end(), [](const TimedAction& a, const TimedAction& b) { return a.start < b.start; });
    int alive = 0;
    for (const TimedAction& ta : list) {
      st.step_time = std::max(st.step_time, ta.end);
      if (is_compute(ta.action.kind)) st.busy[r] += ta.end - ta.start;
      if (ta.action.kind == ActionKind::F) st.peak_inflight[r] = std::max(st.peak_inflight[r], ++alive);
      if (is_backward(ta.action.kind)) --alive;
    }
  }
  double idle = 0;
  for (double b : st.busy) idle += st.step_time - b;
  st.bubble_fraction = st.step_time > 0 ? idle / (t.ranks.size() * st.step_time) : 0.0;
  return st;
}

}  // namespace trident::sched
