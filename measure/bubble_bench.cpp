// Bubble benchmark: see bubble_bench.h.
#include "measure/bubble_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "parallel/thread_group.h"
#include "runtime/executor.h"
#include "schedules/generators.h"
#include "schedules/group_waits.h"
#include "schedules/measure.h"

namespace trident::bench {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// NOTE [synthetic stage]
// Each F, I and W of the synthetic stage sleeps for its set time inside the
// autograd forward or backward (W inside the closure the executor defers, as
// linear() does for ZB-H1's split backward), around a one-element
// multiplication that keeps the autograd graph real. Sleeping is fair for
// a bubble measurement: the bubble is a property of the schedule's
// dependencies, which the real executor, its grouped transfers (NOTE [pair
// order] in schedules/pair_order.h) and Gloo all still impose; what sleeping removes is the CPU contention of
// 8 ranks computing on 2 cores, which would measure the machine instead of
// the schedule. A sleep overshoots by its wake-up latency (tens of µs, more on
// a loaded machine); the measured compute spans include it, so the busy time
// is measured, not assumed.
void sleep_ms(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

struct SleepFn : torch::autograd::Function<SleepFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, double f_ms, double i_ms,
                            double w_ms) {
    ctx->saved_data["i"] = i_ms;
    ctx->saved_data["w"] = w_ms;
    ctx->save_for_backward({x, w});
    keep_weight_grad_queue(ctx);
    sleep_ms(f_ms);
    return x * w;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor x = saved[0], w = saved[1], g = grads[0];
    const double i_ms = ctx->saved_data["i"].toDouble(), w_ms = ctx->saved_data["w"].toDouble();
    sleep_ms(i_ms);
    at::Tensor gx = g * w;
    auto weight_grad = [x, g, w_ms]() {
      sleep_ms(w_ms);
      return (g * x).sum().reshape({1});
    };
    if (WeightGradQueue* q = deferring_weight_grad_queue(ctx)) {
      q->push([weight_grad, w]() mutable {
        at::NoGradGuard no_grad;
        at::Tensor gw = weight_grad();
        if (w.grad().defined()) w.mutable_grad().add_(gw); else w.mutable_grad() = gw;
      });
      return {gx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    return {gx, weight_grad(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

constexpr int64_t kWidth = 4;

class SyntheticStage : public Stage {
 public:
  SyntheticStage(bool first, bool last, double f, double i, double w) : first_(first), last_(last), f_(f), i_(i), w_(w) {
    Param p;
    p.info.name = "w";
    p.info.full_shape = {1};
    p.tensor = at::ones({1}).requires_grad_(true);
    params_.push_back(p);
  }
  at::Tensor forward(const at::Tensor& input, const at::Tensor&) override {
    at::Tensor x = first_ ? input.to(at::kFloat) : input;  // (mbs, kWidth)
    at::Tensor y = SleepFn::apply(x, params_[0].tensor, f_, i_, w_);
    return last_ ? y.mean() : y;
  }
  std::vector<int64_t> input_shape(int64_t mbs) const override { return {mbs, kWidth}; }
  std::vector<int64_t> output_shape(int64_t mbs) const override { return {mbs, kWidth}; }
  std::vector<Param>& params() override { return params_; }

 private:
  bool first_, last_;
  double f_, i_, w_;
  std::vector<Param> params_;
};

std::string pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

}  // namespace

double closed_form_bubble(const BubbleCase& c, const StageMs& ms) {
  const double p = c.p, m = c.m, v = c.v;
  if (c.schedule == "gpipe" || c.schedule == "1f1b") return (p - 1) / (m + p - 1);
  if (c.schedule == "interleaved") return (p - 1) / (v * m + p - 1);
  const double i = ms.b - ms.w;
  if (c.schedule == "zb-h1" && c.m >= c.p && std::abs(ms.f - i) < 1e-9 && std::abs(ms.f - ms.w) < 1e-9)
    return (p - 1) / (3 * m + p - 1);
  return -1;
}

BubbleRow run_bubble_case(const BubbleCase& c, const StageMs& ms, int steps) {
  const sched::Schedule schedule = sched::generate(c.schedule, c.p, c.m, c.v);
  BubbleRow row;
  row.c = c;
  row.closed_form = closed_form_bubble(c, ms);
  const sched::TimelineStats sim = sched::stats(sched::simulate(schedule, {ms.f, ms.b, ms.w, {}, {}, {}}));
  row.simulated = sim.bubble_fraction;
  row.sim_step_ms = sim.step_time;

  const int p = c.p;
  // Per step and rank: busy ms and executor span ms; per rank its timelines.
  std::vector<std::vector<double>> busy(static_cast<size_t>(steps), std::vector<double>(p)), span = busy;
  std::vector<sched::Timeline> measured(static_cast<size_t>(steps));
  for (auto& t : measured) t.pipeline_ranks = p, t.microbatches = c.m, t.chunks = c.v, t.ranks.resize(static_cast<size_t>(p));
  const std::vector<std::string> errors = run_thread_group("pp", p, std::chrono::milliseconds(120000), [&](Group& pp) {
    const int rank = pp.rank;
    std::vector<std::unique_ptr<SyntheticStage>> mine;
    std::vector<Stage*> raw;
    const int vs = schedule.virtual_stages();
    for (int ch = 0; ch < c.v; ++ch) {
      const int s = schedule.stage_of(rank, ch);
      mine.push_back(std::make_unique<SyntheticStage>(s == 0, s == vs - 1, ms.f / c.v, (ms.b - ms.w) / c.v,
                                                      ms.w / c.v));
      raw.push_back(mine.back().get());
    }
    Executor exec(raw, pp, schedule.stage_map(), 1);
    auto batch = [](int) { return MicroBatch{at::ones({1, kWidth}, at::kLong), at::zeros({1, kWidth}, at::kLong)}; };
    for (int step = -1; step < steps; ++step) {
      at::Tensor sync = at::zeros({1});
      all_reduce(pp, sync);  // every rank starts the step together, as after the trainer's collectives
      exec.run(schedule.ranks[static_cast<size_t>(rank)], batch, 1.0);
      if (step < 0) continue;  // warm-up
      double b = 0;
      for (const auto& a : exec.timeline())
        if (sched::is_compute(a.action.kind)) b += a.end - a.start;
      const auto s = static_cast<size_t>(step), r = static_cast<size_t>(rank);
      busy[s][r] = b / 1000.0;
      span[s][r] = (exec.run_span().second - exec.run_span().first) / 1000.0;
      sched::RankRecording rec{rank, 0.0, exec.timeline(), {}};  // one clock for all threads: keep it
      measured[s].ranks[r] = sched::to_timeline({rec}, c.m, c.v).ranks[0];
    }
  });
  for (int r = 0; r < p; ++r)
    if (!errors[static_cast<size_t>(r)].empty())
      throw std::runtime_error("bench bubble " + c.schedule + " p=" + std::to_string(p) + " m=" + std::to_string(c.m) +
                               ": rank " + std::to_string(r) + ": " + errors[static_cast<size_t>(r)]);
  // Median over the steps: one step hit by a stall of the shared machine
  // (another user's burst) must not decide the figure.
  std::vector<double> bubbles, steps_ms;
  for (int s = 0; s < steps; ++s) {
    const auto& b = busy[static_cast<size_t>(s)];
    const double step = *std::max_element(span[static_cast<size_t>(s)].begin(), span[static_cast<size_t>(s)].end());
    double sum = 0;
    for (double x : b) sum += x;
    bubbles.push_back(1.0 - sum / (p * step));
    steps_ms.push_back(step);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  row.measured = median(bubbles);
  row.step_ms = median(steps_ms);
  sched::MeasuredCosts mc = sched::measured_costs(measured);
  double latency = 0;
  for (const auto& t : measured) latency += sched::measured_latency(schedule, t) / steps;
  row.latency_ms = latency;
  mc.costs.latency = {latency};
  // The executor waits for whole groups: the grouped run (NOTE [group waits]), as a training run predicts.
  row.predicted = sched::grouped_stats(schedule, mc.costs).bubble_fraction;
  return row;
}

std::string bubble_csv(const std::vector<BubbleRow>& rows) {
  std::ostringstream s;
  s << "schedule,p,m,v,closed_form,simulated,measured,step_ms,sim_step_ms,predicted_from_measured,latency_ms\n";
  for (const BubbleRow& r : rows)
    s << r.c.schedule << "," << r.c.p << "," << r.c.m << "," << r.c.v << ","
      << (r.closed_form < 0 ? "" : pct(r.closed_form)) << "," << pct(r.simulated) << "," << pct(r.measured) << ","
      << pct(r.step_ms) << "," << pct(r.sim_step_ms) << "," << pct(r.predicted) << "," << pct(r.latency_ms) << "\n";
  return s.str();
}

}  // namespace trident::bench
