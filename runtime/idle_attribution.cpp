// Idle attribution of one pipeline step: see idle_attribution.h.
#include "runtime/idle_attribution.h"

#include <algorithm>

namespace trident {

namespace {

// Idle of each rank in a simulated run, ms.
std::vector<double> simulated_idle(const sched::Schedule& schedule, const std::vector<sched::KindSums>& stages) {
  const sched::Costs costs = sched::costs_from_stage_sums(stages, {});
  const sched::TimelineStats st = sched::simulate_stats(schedule, costs);
  std::vector<double> idle;
  for (double b : st.busy) idle.push_back(std::max(0.0, st.step_time - b));
  return idle;
}

}  // namespace

RankStep rank_step(const std::vector<sched::TimedAction>& timeline, double begin_us, double end_us, int chunks,
                   double sync_s) {
  RankStep r;
  r.chunks.resize(static_cast<size_t>(chunks));
  // Compute time as the union of the actions' spans: an overlapped pair's F and B overlap.
  std::vector<std::pair<double, double>> spans;
  for (const sched::TimedAction& a : timeline) {
    if (sched::is_compute(a.action.kind)) spans.emplace_back(a.start, a.end);
    r.chunks.at(static_cast<size_t>(a.action.chunk)).add(a.action.kind, (a.end - a.start) / 1000.0);
  }
  std::sort(spans.begin(), spans.end());
  double covered = -1e300;
  for (const auto& [start, end] : spans) {
    r.busy_us += std::max(0.0, end - std::max(start, covered));
    covered = std::max(covered, end);
  }
  r.span_us = end_us - begin_us;
  r.sync_s = sync_s;
  return r;
}

PipelineStep attribute_idle(const sched::Schedule& schedule, const std::vector<RankStep>& ranks) {
  PipelineStep out;
  double busy_sum = 0, span = 0;
  std::vector<sched::KindSums> stages(static_cast<size_t>(schedule.virtual_stages()));
  sched::KindSums total;
  for (size_t r = 0; r < ranks.size(); ++r) {
    out.stage_busy_s.push_back(ranks[r].busy_us / 1e6);
    busy_sum += ranks[r].busy_us;
    span = std::max(span, ranks[r].span_us);
    for (int c = 0; c < schedule.chunks; ++c) {
      sched::KindSums& st = stages.at(static_cast<size_t>(schedule.stage_of(static_cast<int>(r), c)));
      st = ranks[r].chunks.at(static_cast<size_t>(c));
      for (int k = 0; k < 4; ++k) total.sum[k] += st.sum[k], total.count[k] += st.count[k];
    }
  }
  out.span_s = span / 1e6;
  out.bubble = span > 0 ? 1.0 - busy_sum / (static_cast<double>(ranks.size()) * span) : 0.0;
  // Balanced: every stage the pipeline's mean of each kind.
  std::vector<sched::KindSums> balanced(stages.size());
  for (sched::KindSums& st : balanced)
    for (int k = 0; k < 4; ++k)
      st.sum[k] = total.sum[k] / static_cast<double>(stages.size()), st.count[k] = total.count[k] / static_cast<double>(stages.size());
  const bool pipelined = ranks.size() > 1;
  const std::vector<double> inherent = pipelined ? simulated_idle(schedule, balanced) : std::vector<double>(1, 0.0);
  const std::vector<double> uneven = pipelined ? simulated_idle(schedule, stages) : std::vector<double>(1, 0.0);
  for (size_t r = 0; r < ranks.size(); ++r) {
    IdleParts p;
    const double pipe_idle = std::max(0.0, span - ranks[r].busy_us) / 1e6;
    p.sync = ranks[r].sync_s;
    // What the stage would idle with free transfers; the slowest stage of an uneven split idles less
    // than the balanced schedule, and its inherent part is that less (not its transfer waits).
    const double free_idle = uneven[r] / 1e3;
    p.inherent = std::min({pipe_idle, inherent[r] / 1e3, free_idle});
    p.imbalance = std::min(pipe_idle - p.inherent, std::max(0.0, free_idle - p.inherent));
    p.transfers = pipe_idle - p.inherent - p.imbalance;
    p.total = pipe_idle + p.sync;
    if (ranks[r].experts_s >= 0) {
      p.experts = std::min(ranks[r].experts_s, ranks[r].busy_us / 1e6);
      p.total += p.experts;
    }
    out.idle.push_back(p);
  }
  return out;
}

}  // namespace trident
