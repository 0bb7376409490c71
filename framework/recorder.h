// What the trainer measures and reports of a run beside the step itself:
// each step's clock and phases (the executor's progress, NOTE [operation
// counts]), its host reads (NOTE [host reads]), the pipeline's measurements,
// a logged step's metrics and their log (metrics.jsonl, the printed lines),
// one step's trace (logging.trace), rank 0's start and end report, and every
// rank's summary file (NOTE [rank summary]).
#pragma once

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/config.h"
#include "metrics/metrics.h"
#include "core/op_count.h"
#include "framework/auto_split.h"
#include "framework/trainer.h"
#include "parallel/process_groups.h"
#include "runtime/executor.h"
#include "runtime/pipeline_measure.h"
#include "schedules/action.h"

namespace trident {

// What the recorder reads of the run it records (all outlive it).
struct RecordedRun {
  const Config* cfg = nullptr;  // the effective config
  const ProcessGroups* pgs = nullptr;
  Executor* exec = nullptr;
  const sched::Schedule* schedule = nullptr;
  int64_t microbatches = 1;  // per step per DP rank
  c10::Device device{c10::kCPU};
  double flops_per_step = 0;
};

class Recorder {
 public:
  explicit Recorder(RecordedRun run) : r_(run) {}

  // Rank 0: the run's description and effective config, and its log
  // (continuing metrics.jsonl after `first_step` when resumed). peak: the
  // MFU's FLOP/s per rank.
  void start(int64_t first_step, double peak, int64_t model_params);

  // Around each step (the loop in train()): the host reads it makes and, for
  // one step, its operations.
  void before_step(int64_t step, int64_t first_step);
  void after_step(bool logged);

  // Inside a step, in its order (train_step in framework/trainer.cpp).
  void begin_step(int64_t step, bool logged);  // the step's clock starts
  void schedule_ran(const ExecutorStats& stats);  // peaks, compute times; the grad-sync phase begins
  void grads_synced();  // the pipeline's measurements (logged steps: a collective); the optimizer phase begins
  // The optimizer phase ends; logging.trace_step's trace; a step that does
  // not log is done, a logged one goes on to read its loss.
  void optimizer_stepped();
  // A logged step, its loss and norm read: its metrics (the step's clock
  // stops here) and its link latencies (a collective); no eval loss yet.
  StepMetrics metrics(double loss, double lr, double grad_norm, int64_t optimizer_state_bytes);
  void end_logged_step() { r_.exec->progress().done(); }
  // A logged step's metrics (with their MFU) into the summary, rank 0's log and line.
  void log(StepMetrics m);

  // After the last step: rank 0's report (the prediction is a collective
  // over the pipeline), each rank's line, and `summary`'s measured fields.
  // steps_run 0 (resumed at training.steps): only the log is closed.
  void finish(int64_t steps_run, int64_t optimizer_state_bytes, TrainSummary& summary);
  // NOTE [rank summary]: logging.dir/rank-R.json.
  void write_rank_summary(const TrainSummary& s, int64_t dp_reduced_elements,
                          const std::optional<AutoSplit>& auto_split) const;

 private:
  void write_trace(int64_t step, double origin_us, const std::vector<sched::Phase>& phases);
  void print_report(const TrainSummary& summary, const sched::TimelineStats& predicted, int64_t steps_run,
                    double seconds) const;
  bool leader() const { return r_.pgs->rank() == 0; }

  using Clock = std::chrono::steady_clock;
  RecordedRun r_;
  std::unique_ptr<RunLog> log_;  // rank 0
  bool bar_ = false;             // rank 0 on a terminal: the progress bar
  double peak_ = 0;
  Clock::time_point run_start_;
  // The step under way.
  int64_t step_ = 0;
  bool logged_ = false, measured_ = false;
  double sync_s_ = 0;
  Clock::time_point start_, sync_start_, opt_start_;
  PipelineStep pipe_;
  // Over the run.
  std::vector<StepMetrics> steps_;  // the logged steps'
  ExecutorStats peak_stats_;        // the largest in-flight count and boundary bytes of any step
  int64_t deferred_weight_grads_ = 0;  // what W actions computed
  int64_t overlapped_pairs_ = 0;       // pairs run on two threads (NOTE [overlapped pairs])
  double expert_comm_at_begin_ = 0;    // expert_comm_s() when the step began
  double expert_comm_s() const;        // the experts' all-to-alls so far, both groups (NOTE [idle attribution])
  CostAccumulator costs_;  // measured F/B/I/W, for the simulator's prediction of this run
  double span_sum_s_ = 0;  // pipeline time (slowest rank's executor run) summed over measured steps
  int64_t measured_steps_ = 0;
  // NOTE [host reads]: the most of each kind one step made, for logged and other steps.
  std::map<std::string, int64_t> reads_before_, reads_logged_, reads_other_;
  // NOTE [operation counts]: the operations of one step by phase, and which step (0: none counted).
  std::optional<OpCounter> counter_;
  std::array<int64_t, kOpPhases> step_ops_{};
  int64_t ops_step_ = 0;
};

}  // namespace trident
