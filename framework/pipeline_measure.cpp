// Pipeline measurements: see pipeline_measure.h.
#include "framework/pipeline_measure.h"

#include <algorithm>
#include <cstring>


namespace trident {

PipelineStep measure_pipeline_step(const Group& pp, const Executor& exec) {
  double busy_us = 0;
  for (const sched::TimedAction& a : exec.timeline())
    if (sched::is_compute(a.action.kind)) busy_us += a.end - a.start;
  const auto [begin, end] = exec.run_span();
  // Each rank's own span (not a shared clock) so that ranks on different
  // hosts compare; the previous step's collectives line their starts up.
  at::Tensor mine = at::tensor({busy_us, end - begin}, at::kDouble);
  std::vector<at::Tensor> all;
  all_gather(pp, mine, all);
  PipelineStep out;
  double busy_sum = 0, span = 0;
  for (const at::Tensor& t : all) {
    const double b = t[0].item<double>();
    out.stage_busy_s.push_back(b / 1e6);
    busy_sum += b;
    span = std::max(span, t[1].item<double>());
  }
  out.span_s = span / 1e6;
  out.bubble = span > 0 ? 1.0 - busy_sum / (static_cast<double>(all.size()) * span) : 0.0;
  return out;
}

void CostAccumulator::add(const Executor& exec) {
  for (const sched::TimedAction& a : exec.timeline()) {
    int k = -1;
    switch (a.action.kind) {
      case sched::ActionKind::F: k = 0; break;
      case sched::ActionKind::B: k = 1; break;
      case sched::ActionKind::I: k = 2; break;
      case sched::ActionKind::W: k = 3; break;
      default: break;
    }
    if (k < 0) continue;
    sum_[k] += (a.end - a.start) / 1000.0;
    n_[k] += 1;
  }
}

sched::TimelineStats CostAccumulator::predict(const Group& pp, const sched::Schedule& schedule) {
  at::Tensor mine = at::zeros({8}, at::kDouble);
  for (int k = 0; k < 4; ++k) mine[k] = sum_[k], mine[4 + k] = n_[k];
  all_reduce(pp, mine);
  double mean[4];
  for (int k = 0; k < 4; ++k) {
    const double n = mine[4 + k].item<double>();
    mean[k] = n > 0 ? mine[k].item<double>() / n : 0.0;
  }
  sched::MeasuredCosts& c = costs;
  c.f = mean[0], c.b = mean[1], c.i = mean[2], c.w = mean[3];
  const double v = schedule.chunks;
  c.costs.forward = std::max(1e-6, mean[0] * v);
  c.costs.weight = mean[3] * v;
  const double backward = mean[1] > 0 ? mean[1] : mean[2] + mean[3];
  c.costs.backward = std::max(backward * v, c.costs.weight + 1e-6);
  return sched::stats(sched::simulate(schedule, c.costs));
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
