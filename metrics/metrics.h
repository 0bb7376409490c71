// What a training run leaves behind and shows: one JSON object per step in
// metrics.jsonl, the loss curve as loss.svg, the per-step line and progress
// bar. Pure C++ (no libtorch).
#pragma once

#include <cstdint>
#include <fstream>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "metrics/tensorboard.h"

namespace trident {

// One pipeline rank's idle time in one step and its parts, seconds
// (NOTE [idle attribution] in runtime/idle_attribution.h): total =
// inherent + imbalance + transfers + sync (+ experts under expert parallelism).
struct IdleParts {
  double total = 0, inherent = 0, imbalance = 0, transfers = 0, sync = 0;
  // Under expert parallelism, waiting on the experts' all-to-alls; -1 without (not written).
  double experts = -1;
};

// One MoE layer in one step (NOTE [MoE stats] in models/common/moe_layer.cpp): the
// most tokens an expert received over the mean per expert (1: balanced), the
// layer's balancing loss and router z-loss (without coefficients), each the
// mean over the step's micro-batches and data-parallel replicas.
struct MoeLayerStats {
  int64_t layer = 0;
  double load_max = 0, aux_loss = 0, z_loss = 0;
  // Under expert parallelism: the rows the busiest expert-parallel rank's experts
  // received over the mean per rank (1: balanced), summed over the EP groups;
  // -1 without (not written).
  double rank_load_max = -1;
  // The share of the assignments routed in the step that were dropped past
  // capacity (model.moe_capacity_factor > 0), and the correction bias's range,
  // max - min (model.moe_expert_bias); -1 without (not written).
  double dropped = -1, bias_range = -1;
};

// With documents in the samples (NOTE [document counts] in datasets/step_batches.h), over the
// global batch: the labels the loss counts (masked ones out), the share of its tokens that are
// padding, and documents per sample.
struct DocumentMetrics {
  double loss_tokens = 0, padding_share = 0, docs_per_sample = 0;
};

struct StepMetrics {
  int64_t step = 0;  // 1-based
  double loss = 0, lr = 0, grad_norm = 0;
  double step_time_s = 0, tokens_per_s = 0, tflops = 0, mfu = 0;
  double grad_sync_s = 0;             // exposed gradient-reduction time (not hidden by the backward)
  int64_t optimizer_state_bytes = 0;  // AdamW state held by this rank (falls to ~1/dp with ZeRO-1)
  int64_t peak_memory_bytes = 0;      // this rank's peak resident memory so far (getrusage ru_maxrss)
  double bubble = 0;                  // measured: idle / (p x pipeline time) over rank 0's pipeline
  std::vector<double> stage_busy_s;   // per pipeline stage: compute time in this step (busy_s_stageI)
  std::vector<IdleParts> stage_idle;  // per pipeline stage: idle_s_stageI, idle_inherent_s_stageI, ... (to_json)
  std::vector<MoeLayerStats> moe;     // per MoE layer: moe_load_lL, moe_aux_loss_lL, moe_z_loss_lL, ... (to_json)
  std::optional<DocumentMetrics> documents;
  std::optional<double> eval_loss;
};

std::string to_json(const StepMetrics& m);
// The row's numbers as TensorBoard scalars, tagged with metrics.jsonl's keys.
tensorboard::Scalars to_scalars(const StepMetrics& m);
// "step 12/30 | loss 4.1234 | lr 1.00e-03 | grad-norm 0.812 | 10.2k tok/s | 0.45 TFLOP/s | MFU 38.1%"
std::string format_step_line(const StepMetrics& m, int64_t total_steps);
// "[#######.......] 12/30  ETA 0:42"
std::string format_progress(int64_t done, int64_t total, double elapsed_s, int width = 30);
// Loss (and eval loss) against step; axes with ticks, readable in a browser.
std::string loss_svg(const std::vector<StepMetrics>& steps, const std::string& title);

// Makes the run directory (logging.dir) and its parents; throws ConfigError "cannot create
// logging.dir 'DIR': why" where it cannot (a file in the way, no permission): bad input.
void make_log_dir(const std::string& dir);

// The run directory: metrics.jsonl appended per step (flushed), loss.svg at close,
// and with tensorboard = true an event file of the same rows (tensorboard.h).
class RunLog {
 public:
  // Creates dir (throws if it cannot) and starts metrics.jsonl afresh, or, with
  // continue_after = k >= 0 (a run resumed from the checkpoint of step k), keeps
  // its rows of steps 1..k so the file goes on with k + 1 as one run's would.
  // A resumed run's event file is a new one holding steps k + 1 on (TensorBoard
  // reads every event file of the directory).
  RunLog(const std::string& dir, const std::string& title, int64_t continue_after = -1, bool tensorboard = false);
  void write_config(const std::string& toml_text);
  void append(const StepMetrics& m);
  void finish();  // writes loss.svg (append() also redraws it during the run: NOTE [loss.svg during the run])
  const std::vector<StepMetrics>& history() const { return history_; }
  const std::string& dir() const { return dir_; }
  std::string event_file() const { return events_ ? events_->path() : ""; }

 private:
  void write_plot();
  std::string dir_, title_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_drawn_;
  std::ofstream jsonl_;
  std::unique_ptr<tensorboard::EventWriter> events_;
  std::vector<StepMetrics> history_;
};

}  // namespace trident
