// The run's measurements and reports: see recorder.h.
#include "framework/recorder.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/atomic_file.h"
#include "core/host_read.h"
#include "core/json.h"
#include "framework/machine.h"
#include "parallel/backend.h"
#include "schedules/render.h"
#include "schedules/simulate.h"

namespace trident {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
double micros(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

}  // namespace

void Recorder::start(int64_t first_step, double peak, int64_t model_params) {
  peak_ = peak;
  const Config& c = *r_.cfg;
  if (leader()) {
    std::cout << "trident train: " << r_.pgs->layout().describe() << ", schedule " << c.schedule.kind
              << " (m=" << r_.microbatches << ", v=" << c.schedule.chunks << "), " << model_params
              << " parameters, device " << r_.device.str() << " (" << describe_build() << "), backend "
              << r_.pgs->backend() << ", peak " << peak / 1e9
              << " GFLOP/s per rank\n--- effective config ---\n"
              << to_toml(c) << "------------------------" << std::endl;
    log_ = std::make_unique<RunLog>(c.logging.dir, "Trident " + c.model.arch + " loss (" + c.source + ")",
                                    first_step > 0 ? first_step : -1, c.logging.tensorboard);
    log_->write_config(to_toml(c));
  }
  bar_ = leader() && c.logging.progress && isatty(STDOUT_FILENO);
  run_start_ = Clock::now();
}

void Recorder::before_step(int64_t step, int64_t first_step) {
  reads_before_ = host_reads();
  // NOTE [operation counts]: the second step's (the first one's when there is one).
  if (step == std::min(first_step + 1, r_.cfg->training.steps - 1)) counter_.emplace(), ops_step_ = step + 1;
}

void Recorder::after_step(bool logged) {
  if (counter_) {
    step_ops_ = counter_->counts();
    counter_.reset();
  }
  for (const auto& [what, n] : host_reads()) {
    auto it = reads_before_.find(what);
    const int64_t in_step = n - (it == reads_before_.end() ? 0 : it->second);
    int64_t& most = (logged ? reads_logged_ : reads_other_)[what];
    most = std::max(most, in_step);
  }
}

void Recorder::begin_step(int64_t step, bool logged) {
  start_ = Clock::now();
  step_ = step;
  logged_ = logged;
  measured_ = step > 0 || r_.cfg->training.steps == 1;  // the first step warms caches up: keep it out of the means
  r_.exec->progress().set_step(step + 1);
  expert_comm_at_begin_ = expert_comm_s();
}

double Recorder::expert_comm_s() const { return r_.pgs->ep.comm_seconds + r_.pgs->ep_backward.comm_seconds; }

void Recorder::schedule_ran(const ExecutorStats& stats) {
  peak_stats_.peak_inflight = std::max(peak_stats_.peak_inflight, stats.peak_inflight);
  peak_stats_.peak_boundary_bytes = std::max(peak_stats_.peak_boundary_bytes, stats.peak_boundary_bytes);
  peak_stats_.peak_activation_bytes = std::max(peak_stats_.peak_activation_bytes, stats.peak_activation_bytes);
  peak_stats_.peak_step_bytes = std::max(peak_stats_.peak_step_bytes, stats.peak_step_bytes);
  deferred_weight_grads_ += stats.deferred_weight_grads;
  overlapped_pairs_ += stats.overlapped_pairs;
  // On CUDA reading the timeline waits for the step (NOTE [device time]): only logged steps do.
  if (measured_ && (logged_ || !r_.device.is_cuda())) costs_.add(*r_.exec, r_.schedule->chunks);
  r_.exec->progress().phase("grad-sync");
  set_op_phase(OpPhase::kGradSync);
  sync_start_ = Clock::now();
}

void Recorder::grads_synced() {
  sync_s_ = seconds_since(sync_start_);
  pipe_ = PipelineStep{};
  if (logged_) {
    // NOTE [idle attribution]: under ep > 1 this step's time in the experts' all-to-alls (both groups).
    const double experts_s = r_.pgs->layout().ep > 1 ? expert_comm_s() - expert_comm_at_begin_ : -1.0;
    pipe_ = measure_pipeline_step(r_.pgs->pp, *r_.exec, *r_.schedule, sync_s_, experts_s);  // a collective over the pipeline
    if (measured_) span_sum_s_ += pipe_.span_s, ++measured_steps_;
  }
  opt_start_ = Clock::now();
  r_.exec->progress().phase("optimizer");
  set_op_phase(OpPhase::kOptimizer);
}

void Recorder::optimizer_stepped() {
  const auto opt_end = Clock::now();
  set_op_phase(OpPhase::kOther);
  const Config& c = *r_.cfg;
  if (c.logging.trace && step_ + 1 == c.logging.trace_step)
    write_trace(step_ + 1, micros(start_),
                {{"grad-sync", micros(sync_start_), micros(opt_start_)}, {"optimizer", micros(opt_start_), micros(opt_end)}});
  if (logged_)
    r_.exec->progress().phase("loss-reduce");
  else
    r_.exec->progress().done();
}

StepMetrics Recorder::metrics(double loss, double lr, double grad_norm, int64_t optimizer_state_bytes) {
  const auto& t = r_.cfg->training;
  StepMetrics m;
  m.step = step_ + 1;
  m.loss = loss;
  m.lr = lr;
  m.grad_norm = grad_norm;
  m.step_time_s = seconds_since(start_);
  m.grad_sync_s = sync_s_;
  m.bubble = pipe_.bubble;
  m.stage_busy_s = pipe_.stage_busy_s;
  m.stage_idle = pipe_.idle;
  m.optimizer_state_bytes = optimizer_state_bytes;
  m.peak_memory_bytes = peak_resident_bytes();
  m.tokens_per_s = static_cast<double>(t.global_batch_size * r_.cfg->model.seq_len) / m.step_time_s;
  m.tflops = r_.flops_per_step / m.step_time_s / 1e12;
  if (measured_) costs_.add_latency_sample(r_.pgs->pp, *r_.exec);  // after the step's clock stopped
  return m;
}

void Recorder::log(StepMetrics m) {
  m.mfu = m.tflops * 1e12 / (peak_ * static_cast<double>(r_.pgs->world_size()));
  steps_.push_back(m);
  if (!leader()) return;
  const int64_t total = r_.cfg->training.steps;
  log_->append(m);
  if (bar_) std::cout << "\r\033[K";
  std::cout << format_step_line(m, total) << std::endl;  // flushed: ranks' output is piped
  if (bar_) std::cout << format_progress(m.step, total, seconds_since(run_start_)) << std::flush;
}

void Recorder::finish(int64_t steps_run, int64_t optimizer_state_bytes, TrainSummary& summary) {
  summary.steps = steps_;
  if (steps_run == 0) {  // resumed at training.steps (the same on every rank): no step, nothing to report
    if (leader()) {
      log_->finish();
      std::cout << "done: nothing to train, the checkpoint is already at training.steps = "
                << r_.cfg->training.steps << std::endl;
    }
  } else {
    const sched::TimelineStats predicted = costs_.predict(r_.pgs->pp, *r_.schedule);  // a collective over the pipeline
    if (leader()) {
      if (bar_) std::cout << "\r\033[K";
      log_->finish();
      print_report(summary, predicted, steps_run, seconds_since(run_start_));
    }
    std::cout << r_.pgs->layout().describe(r_.pgs->rank()) << ": peak " << peak_stats_.peak_inflight
              << " micro-batches in flight holding " << peak_stats_.peak_activation_bytes << " activation bytes ("
              << peak_stats_.peak_boundary_bytes << " in stage inputs/outputs); optimizer state "
              << optimizer_state_bytes << " bytes" << std::endl;
  }
  summary.optimizer_state_bytes = optimizer_state_bytes;
  summary.peak_inflight = peak_stats_.peak_inflight;
  for (const sched::StageCosts& sc : costs_.costs.stage_costs) {
    summary.stage_forward_ms.push_back(sc.forward);
    summary.stage_backward_ms.push_back(sc.backward);
    summary.stage_weight_ms.push_back(sc.weight);
  }
}

void Recorder::write_trace(int64_t step, double origin_us, const std::vector<sched::Phase>& phases) {
  const sched::RankRecording mine{r_.pgs->rank(), origin_us, r_.exec->timeline(), phases};
  const std::vector<std::string> texts = gather_strings(r_.pgs->world, sched::to_text(mine));
  if (r_.pgs->rank() != 0) return;
  std::vector<sched::RankRecording> all;
  for (size_t i = 0; i < texts.size(); ++i) all.push_back(sched::recording_from_text(texts[i], static_cast<int>(i)));
  const std::string title = "step " + std::to_string(step) + ", " + r_.pgs->layout().describe() + ", " +
                            r_.cfg->schedule.kind + " m=" + std::to_string(r_.microbatches) + " v=" +
                            std::to_string(r_.cfg->schedule.chunks);
  std::ofstream(r_.cfg->logging.dir + "/trace.json") << sched::render_chrome_ranks(all, title);
  std::vector<sched::RankRecording> pipeline;
  for (int g : r_.pgs->pp.members) pipeline.push_back(all.at(static_cast<size_t>(g)));
  std::ofstream(r_.cfg->logging.dir + "/timeline.svg")
      << sched::render_svg(sched::to_timeline(pipeline, static_cast<int>(r_.microbatches), r_.schedule->chunks),
                           "measured step " + std::to_string(step) + ", " + r_.cfg->schedule.kind + ", ms");
}

void Recorder::print_report(const TrainSummary& summary, const sched::TimelineStats& predicted, int64_t steps_run,
                            double seconds) const {
  const Config& c = *r_.cfg;
  double bubble = 0;
  for (const auto& m : summary.steps) bubble += m.bubble;
  const auto& mc = costs_;
  const double span_ms = 1000.0 * span_sum_s_ / static_cast<double>(std::max<int64_t>(1, measured_steps_));
  std::cout << "pipeline: bubble mean " << 100 * bubble / std::max<double>(1, static_cast<double>(summary.steps.size()))
            << "% measured, " << 100 * predicted.bubble_fraction << "% predicted | pipeline time " << span_ms
            << " ms measured, " << predicted.step_time << " ms predicted | from each stage's mean F B I W (overall "
            << mc.mean_ms[0] << " " << mc.mean_ms[1] << " " << mc.mean_ms[2] << " " << mc.mean_ms[3]
            << " ms per chunk) and link latency " << mc.latency.mean << " ms (" << mc.latency.links << " links, "
            << mc.latency.samples << " waits)" << std::endl;
  std::cout << "pipeline: predicted from ms per stage F/B/W:";
  for (const sched::StageCosts& st : mc.costs.stage_costs)
    std::cout << " " << st.forward << "/" << st.backward << "/" << st.weight;
  std::cout << std::endl;
  // Mean busy time per stage: an unbalanced split shows as one stage busier than the rest.
  std::vector<double> busy;
  for (const auto& m : summary.steps) {
    busy.resize(m.stage_busy_s.size());
    for (size_t i = 0; i < busy.size(); ++i)
      busy[i] += 1000.0 * m.stage_busy_s[i] / static_cast<double>(summary.steps.size());
  }
  std::cout << "pipeline: mean busy ms per stage:";
  for (double b : busy) std::cout << " " << b;
  std::cout << std::endl;
  // NOTE [idle attribution] in runtime/idle_attribution.h: each stage's idle and its parts, means over the logged steps.
  std::vector<IdleParts> idle;
  for (const auto& m : summary.steps) {
    idle.resize(m.stage_idle.size());
    for (size_t i = 0; i < idle.size(); ++i) {
      const double w = 1000.0 / static_cast<double>(summary.steps.size());
      const IdleParts& p = m.stage_idle[i];
      idle[i].total += w * p.total, idle[i].inherent += w * p.inherent, idle[i].imbalance += w * p.imbalance;
      idle[i].transfers += w * p.transfers, idle[i].sync += w * p.sync;
      if (p.experts >= 0) idle[i].experts = std::max(0.0, idle[i].experts) + w * p.experts;
    }
  }
  const bool experts = !idle.empty() && idle[0].experts >= 0;  // expert parallelism: its row (NOTE [idle attribution])
  std::cout << "pipeline: mean idle ms per stage = inherent to the schedule + stage imbalance + waiting on transfers + "
            << (experts ? "waiting on experts + " : "") << "DP sync:";
  for (const IdleParts& p : idle) {
    std::cout << " " << p.total << " = " << p.inherent << " + " << p.imbalance << " + " << p.transfers << " + ";
    if (experts) std::cout << p.experts << " + ";
    std::cout << p.sync << ";";
  }
  std::cout << std::endl;
  double tok = 0, mfu = 0;
  for (const auto& m : summary.steps) tok += m.tokens_per_s, mfu += m.mfu;
  const double n = std::max<double>(1, static_cast<double>(summary.steps.size()));
  // Means over the logged steps (logging.log_interval); the loss of the first and the last of them.
  std::cout << "done: " << steps_run << " steps in " << seconds << " s | loss "
            << (summary.steps.empty() ? 0.0 : summary.steps.front().loss) << " (step "
            << (summary.steps.empty() ? 0 : summary.steps.front().step) << ") -> "
            << (summary.steps.empty() ? 0.0 : summary.steps.back().loss) << " | mean " << tok / n
            << " tok/s | mean MFU " << 100 * mfu / n << "% over " << summary.steps.size() << " logged steps | wrote "
            << c.logging.dir
            << "/{config.toml,metrics.jsonl,loss.svg}" << std::endl;
}

// NOTE [rank summary]
// Every rank writes logging.dir/rank-R.json at the end of a run: what it
// held and did, for tests and tools to read instead of the printed lines.
// Numbers only; the printed lines say the same.
void Recorder::write_rank_summary(const TrainSummary& s, int64_t dp_reduced_elements,
                                  const std::optional<AutoSplit>& auto_split) const {
  const int rank = r_.pgs->rank();
  const auto coords = r_.pgs->layout().coords(rank);
  json::Value v = json::Value::object();
  v["rank"] = json::number(static_cast<int64_t>(rank));
  v["tp"] = json::number(static_cast<int64_t>(coords.tp));
  v["pp"] = json::number(static_cast<int64_t>(coords.pp));
  v["dp"] = json::number(static_cast<int64_t>(coords.dp));
  v["cp"] = json::number(static_cast<int64_t>(coords.cp));
  // The seconds this rank spent in its context-parallel group's communication
  // over the run (the ring's exposed waits, or the gathers and all-to-alls).
  v["cp_comm_s"] = json::number(r_.pgs->cp.comm_seconds);
  // ...and in its expert-parallel groups' (the dispatch and combine all-to-alls, their counts'
  // exchange included: NOTE [expert dispatch]; the backward's on its own group, NOTE [two expert
  // groups]), waits for the slowest rank included. Under overlapped pairs part of it ran while
  // the pair's other half computed: time in the all-to-alls, not all of it exposed.
  v["ep_comm_s"] = json::number(r_.pgs->ep.comm_seconds + r_.pgs->ep_backward.comm_seconds);
  // Overlapped pairs run with their halves on two threads over the run (NOTE [overlapped pairs]).
  v["overlapped_pairs"] = json::number(overlapped_pairs_);
  v["local_parameters"] = json::number(s.local_params);
  v["model_parameters"] = json::number(s.model_params);
  v["dp_reduced_elements"] = json::number(dp_reduced_elements);
  v["logged_steps"] = json::number(static_cast<int64_t>(s.steps.size()));
  v["peak_inflight"] = json::number(static_cast<int64_t>(peak_stats_.peak_inflight));
  v["peak_activation_bytes"] = json::number(peak_stats_.peak_activation_bytes);
  v["peak_boundary_bytes"] = json::number(peak_stats_.peak_boundary_bytes);
  v["peak_step_bytes"] = json::number(peak_stats_.peak_step_bytes);
  // Weight-gradient computations W actions ran over the run (zero-bubble
  // schedules: > 0 when the I deferred them, as it must on every device).
  v["deferred_weight_grads"] = json::number(deferred_weight_grads_);
  v["optimizer_state_bytes"] = json::number(s.optimizer_state_bytes);
  // NOTE [host reads]: the most reads of each kind one step made.
  json::Value reads = json::Value::object();
  for (const auto& [key, counts] : {std::make_pair("logged_step", &reads_logged_), std::make_pair("other_step", &reads_other_)}) {
    json::Value k = json::Value::object();
    for (const auto& [what, n] : *counts)
      if (n > 0) k[what] = json::number(n);
    reads[key] = k;
  }
  v["host_reads"] = reads;
  // NOTE [operation counts]: top-level ATen operations of one step, by phase.
  json::Value ops = json::Value::object();
  ops["step"] = json::number(ops_step_);
  int64_t total = 0;
  for (int i = 0; i < kOpPhases; ++i) {
    ops[op_phase_name(static_cast<OpPhase>(i))] = json::number(step_ops_[static_cast<size_t>(i)]);
    total += step_ops_[static_cast<size_t>(i)];
  }
  ops["total"] = json::number(total);
  v["aten_ops"] = ops;
  if (auto_split) {
    json::Value a = json::Value::object();
    json::Value layers = json::Value::array();
    for (int64_t n : auto_split->layers) layers.push_back(json::number(n));
    a["layers"] = layers;
    a["simulated_bubble"] = json::number(auto_split->bubble);
    a["even_split_simulated_bubble"] = json::number(auto_split->uniform_bubble);
    v["auto_split"] = a;
  }
  std::filesystem::create_directories(r_.cfg->logging.dir);
  write_file_atomic(r_.cfg->logging.dir + "/rank-" + std::to_string(rank) + ".json", json::dump(v, 2) + "\n");
}

}  // namespace trident
