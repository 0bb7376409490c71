// Pipeline measurements: see pipeline_measure.h.
#include "runtime/pipeline_measure.h"

#include <algorithm>
#include <cstring>

#include "schedules/group_waits.h"
#include "schedules/simulate.h"

namespace trident {

PipelineStep measure_pipeline_step(const Group& pp, const Executor& exec, const sched::Schedule& schedule, double sync_s,
                                   double experts_s) {
  const int v = schedule.chunks;
  const auto [begin, end] = exec.run_span();
  // Each rank's own span (not a shared clock) so that ranks on different
  // hosts compare; the previous step's collectives line their starts up.
  const RankStep me = rank_step(exec.timeline(), begin, end, v, sync_s);
  at::Tensor mine = at::zeros({4 + v * 8}, at::kDouble);
  mine[0] = me.busy_us, mine[1] = me.span_us, mine[2] = me.sync_s, mine[3] = experts_s;
  for (int c = 0; c < v; ++c)
    for (int k = 0; k < 4; ++k) mine[4 + c * 8 + k] = me.chunks[c].sum[k], mine[4 + c * 8 + 4 + k] = me.chunks[c].count[k];
  std::vector<at::Tensor> all;
  all_gather(pp, mine, all);
  std::vector<RankStep> ranks(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    const at::Tensor t = all[r].contiguous();
    const double* x = t.data_ptr<double>();
    ranks[r].busy_us = x[0], ranks[r].span_us = x[1], ranks[r].sync_s = x[2], ranks[r].experts_s = x[3];
    ranks[r].chunks.resize(static_cast<size_t>(v));
    for (int c = 0; c < v; ++c)
      for (int k = 0; k < 4; ++k) ranks[r].chunks[c].sum[k] = x[4 + c * 8 + k], ranks[r].chunks[c].count[k] = x[4 + c * 8 + 4 + k];
  }
  return attribute_idle(schedule, ranks);
}

void CostAccumulator::add(const Executor& exec, int chunks) {
  chunk_.resize(static_cast<size_t>(chunks));
  for (const sched::TimedAction& a : exec.timeline())
    chunk_.at(a.action.chunk).add(a.action.kind, (a.end - a.start) / 1000.0);
}

void CostAccumulator::add_latency_sample(const Group& pp, const Executor& exec) {
  if (latency_calls_++ >= kLatencySteps || pp.size() < 2) return;
  // Origin 0: every rank's times stay in its own clock (the estimate needs no shared one).
  const std::vector<std::string> texts = gather_strings(pp, sched::to_text(sched::RankRecording{pp.rank, 0.0, exec.timeline(), {}}));
  if (pp.rank != 0) return;
  std::vector<sched::RankRecording> ranks;
  for (size_t i = 0; i < texts.size(); ++i) ranks.push_back(sched::recording_from_text(texts[i], static_cast<int>(i)));
  latency_steps_.push_back(sched::to_timeline(ranks, 1, 1));
}

sched::TimelineStats CostAccumulator::predict(const Group& pp, const sched::Schedule& schedule) {
  const int v = schedule.chunks;
  chunk_.resize(static_cast<size_t>(v));
  at::Tensor mine = at::zeros({v * 8}, at::kDouble);
  for (int c = 0; c < v; ++c)
    for (int k = 0; k < 4; ++k) mine[c * 8 + k] = chunk_[c].sum[k], mine[c * 8 + 4 + k] = chunk_[c].count[k];
  std::vector<at::Tensor> all;
  all_gather(pp, mine, all);
  if (pp.rank != 0) return {};
  std::vector<sched::KindSums> stages(static_cast<size_t>(schedule.virtual_stages()));
  double sum[4] = {0, 0, 0, 0}, n[4] = {0, 0, 0, 0};
  for (size_t r = 0; r < all.size(); ++r)
    for (int c = 0; c < v; ++c) {
      sched::KindSums& st = stages.at(static_cast<size_t>(schedule.stage_of(static_cast<int>(r), c)));
      for (int k = 0; k < 4; ++k) {
        st.sum[k] = all[r][c * 8 + k].item<double>(), st.count[k] = all[r][c * 8 + 4 + k].item<double>();
        sum[k] += st.sum[k], n[k] += st.count[k];
      }
    }
  for (int k = 0; k < 4; ++k) mean_ms[k] = n[k] > 0 ? sum[k] / n[k] : 0.0;
  // A receive counts as a wait (its end is the data's arrival) only when its
  // rank had been idle for more than 50 us: the executor's own work between
  // two actions (posting receives, the progress record) takes a few us.
  latency = sched::measured_link_latency(schedule, latency_steps_, 0.05);
  costs = sched::costs_from_stage_sums(stages, latency.per_boundary);
  return sched::grouped_stats(schedule, costs);  // the executor's grouped waits included (NOTE [group waits])
}

std::vector<std::string> gather_strings(const Group& g, const std::string& mine) {
  at::Tensor len = at::tensor({static_cast<int64_t>(mine.size())}, at::kLong);
  std::vector<at::Tensor> lens;
  all_gather(g, len, lens);
  int64_t longest = 0;
  for (const at::Tensor& t : lens) longest = std::max(longest, t.item<int64_t>());
  at::Tensor buf = at::zeros({std::max<int64_t>(1, longest)}, at::kByte);
  std::memcpy(buf.data_ptr<uint8_t>(), mine.data(), mine.size());
  std::vector<at::Tensor> bufs;
  all_gather(g, buf, bufs);
  std::vector<std::string> out;
  if (g.rank != 0) return out;
  for (size_t i = 0; i < bufs.size(); ++i)
    out.emplace_back(reinterpret_cast<const char*>(bufs[i].data_ptr<uint8_t>()),
                     static_cast<size_t>(lens[i].item<int64_t>()));
  return out;
}

}  // namespace trident
