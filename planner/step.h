// The model of one training step (pure): a layout's per-stage costs from the
// closed forms of model_cost.h and the cluster description (or from a
// measured profile of the model, planner/profile.h), the schedule simulated
// on its real action lists, the DP reduce, the optimizer and the step's
// small collectives after it, and the peak memory of every pipeline rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "planner/cluster.h"
#include "planner/profile.h"

namespace trident::plan {

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  bool sequence_parallel = false;
  std::string schedule = "1f1b";  // a kind of sched::schedule_kinds()
  int chunks = 0;                 // 0 = the kind's default (sched::default_chunks)
  int micro_batch = 1;
  std::string recompute = "none";  // none | selective | full
  int zero = 0;                    // 0 or 1
  std::vector<int> layers;         // layers per virtual stage (pp * chunks), empty = uniform
};

// "tp=8,pp=4,dp=32,schedule=interleaved,chunks=2,mbs=1,recompute=full,zero=1,sp=1,layers=3+5"
// (keys in any order, each at most once, all optional; dp = -1 or absent means
// what the GPU count leaves). Throws PlanError naming the item.
Layout parse_layout(const std::string& text, int gpus);
std::string layout_text(const Layout& l);  // the same form, every key

// What one step costs, in seconds on the slowest path: the terms add up to step_s.
struct Breakdown {
  double compute = 0;    // GEMM time (and per-action and per-layer host overhead) of the busiest pipeline rank
  double recompute = 0;  // its extra forward of recomputed layers
  double tp_comm = 0;    // its tensor-parallel collectives
  double bubble = 0;     // pipeline idle beyond the busiest rank's work, with free transfers
  double pp_comm = 0;    // what the point-to-point transfers add to the pipeline's step
  double dp_exposed = 0; // the part of the gradient reduce (and ZeRO's parameter gather) not hidden by the backward
  double optimizer = 0;  // clip norm and AdamW step (memory-bound; with a profile: its measured step overhead)
  double step_sync = 0;  // the step's small collectives: the gradient norm over the model-parallel ranks (and
                         // dp with ZeRO-1), the tied embedding's gradient, the logged loss and pipeline figures
};

struct RankMemory {  // bytes on one device of pipeline rank r
  double params = 0, grads = 0, optimizer = 0, activations = 0, boundary = 0;
  int peak_inflight = 0;  // (micro-batch, chunk) pairs alive at once, from the simulator
  double total() const { return params + grads + optimizer + activations + boundary; }
};

struct Estimate {
  Layout layout;
  int microbatches = 0;         // per DP rank per step
  double step_s = 0;
  double tokens_per_s = 0;
  double tflops_per_device = 0;  // step FLOPs with recomputation counted, as Narayanan et al. 2021 report
  double mfu = 0;                // model FLOPs (no recomputation) / (devices * peak)
  Breakdown breakdown;
  std::vector<RankMemory> memory;  // per pipeline rank
  double peak_memory = 0;          // max over ranks, bytes
  bool fits = false;               // peak_memory <= device memory
};

// The run being planned: a model, its precision, the cluster, the global batch.
struct Problem {
  ModelConfig model;
  std::string precision = "bf16";  // fp32 | bf16
  Cluster cluster;
  int64_t global_batch = 1;
  bool overlap_grad_reduce = true;
  double dp_bucket_mb = 25.0;
  int64_t log_interval = 1;  // logging.log_interval: a logged step also reduces the loss and gathers the
                             // pipeline's busy times
  // Measured per-piece compute of this model (NOTE [measured profile]); without it compute is FLOPs at
  // the cluster's GEMM rate plus its per-layer and per-action host time.
  std::optional<Profile> profile;
};

// Throws PlanError when the layout does not fit the model, the batch or the
// cluster (naming the factor), or the schedule does not support (p, m, v).
void check_layout(const Problem& pr, const Layout& l);
Estimate evaluate(const Problem& pr, const Layout& l);

}  // namespace trident::plan
