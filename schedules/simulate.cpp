// Simulator: the validator's run with clocks (engine.cpp). A SEND stamps its
// message ready at (sender's clock + boundary latency); the compute that needs
// a message starts at max(own clock, ready); compute actions take their cost.
// A hand-over between two stages on the same rank has no latency.
#include "schedules/simulate.h"

#include <algorithm>

#include "schedules/engine.h"
#include "schedules/generators.h"

namespace trident::sched {

void check_costs(const Costs& c, int p, int v) {
  if (!(c.forward > 0) || !(c.backward > c.weight) || !(c.weight >= 0))
    throw ScheduleError("costs F=" + std::to_string(c.forward) + " B=" + std::to_string(c.backward) +
                        " W=" + std::to_string(c.weight) + ": expected F > 0 and B > W >= 0 (I = B - W)");
  const size_t stages = static_cast<size_t>(p) * v;
  if (c.latency.size() > 1 && c.latency.size() != stages - 1)
    throw ScheduleError("latency has " + std::to_string(c.latency.size()) + " values, expected 0, 1 or p*v-1=" +
                        std::to_string(stages - 1));
  for (double l : c.latency)
    if (!(l >= 0)) throw ScheduleError("latency " + std::to_string(l) + " is negative, expected >= 0");
  if (!c.stage_scale.empty() && c.stage_scale.size() != stages)
    throw ScheduleError("stage costs have " + std::to_string(c.stage_scale.size()) +
                        " values, expected one per virtual stage, p*v=" + std::to_string(stages));
  for (double x : c.stage_scale)
    if (!(x > 0)) throw ScheduleError("stage cost " + std::to_string(x) + " is not positive, expected > 0");
  if (!c.stage_costs.empty() && c.stage_costs.size() != stages)
    throw ScheduleError("per-stage costs have " + std::to_string(c.stage_costs.size()) +
                        " entries, expected one per virtual stage, p*v=" + std::to_string(stages));
  if (!c.stage_costs.empty() && !c.stage_scale.empty())
    throw ScheduleError("costs give both per-stage costs and stage multipliers, expected one of them");
  auto check_comm = [](double a, double f, double b, double w, const std::string& who) {
    if (!(a >= 0) || a > f || a > b - w)
      throw ScheduleError(who + "expert_comm " + std::to_string(a) + " with F=" + std::to_string(f) + " I=" +
                          std::to_string(b - w) + ": expected 0 <= expert_comm <= F and <= I (it is part of each)");
  };
  check_comm(c.expert_comm, c.forward, c.backward, c.weight, "costs ");
  for (size_t st = 0; st < c.stage_costs.size(); ++st) {
    const StageCosts& x = c.stage_costs[st];
    if (!(x.forward > 0) || !(x.backward > x.weight) || !(x.weight >= 0))
      throw ScheduleError("virtual stage " + std::to_string(st) + " costs F=" + std::to_string(x.forward) +
                          " B=" + std::to_string(x.backward) + " W=" + std::to_string(x.weight) +
                          ": expected F > 0 and B > W >= 0");
    check_comm(x.expert_comm, x.forward, x.backward, x.weight, "virtual stage " + std::to_string(st) + " ");
  }
}

double stage_expert_comm(const Costs& c, int chunks, int stage) {
  if (!c.stage_costs.empty()) return c.stage_costs[static_cast<size_t>(stage)].expert_comm;
  return c.expert_comm / chunks * (c.stage_scale.empty() ? 1.0 : c.stage_scale[static_cast<size_t>(stage)]);
}

// NOTE [overlapped pairs] (pricing): the two run as two chains, each its
// compute and its all-to-alls one after the other, sharing one compute unit
// and one network. So the pair takes at least each chain's own length (f, b),
// the compute of both (f - af + b - ab) and the all-to-alls of both (af + ab),
// and the ideal interleaving (each one's all-to-all under the other's
// compute) reaches the largest of these. Without all-to-alls it is f + b:
// the two one after the other.
double overlapped_pair_cost(double f, double af, double b, double ab) {
  return std::max({f + b - af - ab, f, b, af + ab});
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

double stage_action_cost(const Costs& c, ActionKind k, int chunks, int stage) {
  if (c.stage_costs.empty())
    return action_cost(c, k, chunks) * (c.stage_scale.empty() ? 1.0 : c.stage_scale[static_cast<size_t>(stage)]);
  const StageCosts& x = c.stage_costs[static_cast<size_t>(stage)];
  switch (k) {
    case ActionKind::F: return x.forward;
    case ActionKind::B: return x.backward;
    case ActionKind::I: return x.backward - x.weight;
    case ActionKind::W: return x.weight;
    default: return 0.0;
  }
}

Timeline simulate(const Schedule& s, const Costs& costs) {
  check_costs(costs, s.pipeline_ranks, s.chunks);
  if (has_communication(s)) return detail::run(s, &costs, true).timeline;
  detail::run(s, nullptr, false);  // errors name positions in the lists as given
  return detail::run(add_communication(s), &costs, true).timeline;  // the timeline shows the receives
}

TimelineStats simulate_stats(const Schedule& s, const Costs& costs) { return detail::run(s, &costs, false).stats; }

double span_bubble(const std::vector<double>& busy, const std::vector<double>& first, const std::vector<double>& last) {
  double span = 0, total = 0;
  for (size_t r = 0; r < busy.size(); ++r) {
    total += busy[r];
    if (first[r] >= 0) span = std::max(span, last[r] - first[r]);
  }
  return span > 0 ? 1.0 - total / (static_cast<double>(busy.size()) * span) : 0.0;
}

TimelineStats stats(const Timeline& t) {
  TimelineStats st;
  std::vector<double> last(t.ranks.size(), 0.0);  // end of each rank's last compute
  st.busy.assign(t.ranks.size(), 0.0);
  st.peak_inflight.assign(t.ranks.size(), 0);
  st.first_start.assign(t.ranks.size(), -1.0);
  st.end.assign(t.ranks.size(), 0.0);
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    std::vector<TimedAction> list = t.ranks[r];
    std::stable_sort(list.begin(), list.end(), [](const TimedAction& a, const TimedAction& b) { return a.start < b.start; });
    int alive = 0;
    double covered = 0;  // compute time up to here: overlapping boxes (a measured overlap) count once
    for (const TimedAction& ta : list) {
      st.step_time = std::max(st.step_time, ta.end);
      st.end[r] = std::max(st.end[r], ta.end);
      if (is_compute(ta.action.kind)) {
        if (st.first_start[r] < 0) st.first_start[r] = ta.start;
        last[r] = std::max(last[r], ta.end);
        st.busy[r] += std::max(0.0, ta.end - std::max(ta.start, covered));
        covered = std::max(covered, ta.end);
      }
      if (ta.action.kind == ActionKind::F) st.peak_inflight[r] = std::max(st.peak_inflight[r], ++alive);
      if (is_backward(ta.action.kind)) --alive;
    }
  }
  double idle = 0;
  for (double b : st.busy) idle += st.step_time - b;
  st.bubble_fraction = st.step_time > 0 ? idle / (t.ranks.size() * st.step_time) : 0.0;
  st.span_bubble_fraction = span_bubble(st.busy, st.first_start, last);
  return st;
}

}  // namespace trident::sched
