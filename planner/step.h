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
#include "planner/compute_cost.h"
#include "planner/profile.h"

namespace trident::plan {

// One candidate the planner prices: the parallel factors with the schedule, micro-batch, recomputation,
// ZeRO and layer split a run would use (the world's rank layout is trident::Layout, parallel/layout.h).
struct PlanLayout {
  int tp = 1, pp = 1, dp = 1;
  int cp = 1;                     // context-parallel size (NOTE [context grid] in parallel/layout.h)
  int ep = 1;                     // expert-parallel size, dividing (tp / etp) x cp x dp (NOTE [planned expert parallelism])
  int etp = 0;                    // expert tensor-parallel size: tp (0, the default) or 1 (NOTE [expert grid])
  int expert_tp() const { return etp == 0 ? tp : etp; }
  // The routed experts' gradients' group: the ranks of a stage holding the same experts.
  int edp() const { return tp / expert_tp() * cp * dp / ep; }
  bool overlap_moe = false;       // schedule.overlap_moe: backwards paired with forwards (NOTE [planned overlap])
  std::string cp_comm = "p2p";    // parallel.cp_comm: p2p | all_gather | a2a (NOTE [planned context parallelism])
  bool sequence_parallel = false;
  std::string schedule = "1f1b";  // a kind of sched::schedule_kinds()
  int chunks = 0;                 // 0 = the kind's default (sched::default_chunks)
  int micro_batch = 1;
  std::string recompute = "none";  // none | selective | full
  int zero = 0;                    // 0 or 1
  std::vector<int> layers;         // layers per virtual stage (pp * chunks), empty = uniform
  // Megatron's uneven rule (decoder_first/last_pipeline_num_layers): the first and last virtual stage
  // hold these many layers (0: not given), the others split the rest evenly. Resolved into `layers`
  // by check_layout's caller (resolve_layers); a split the planner picks is printed the same way.
  int first_layers = 0, last_layers = 0;
  // schedule = zb-auto: micro-batches of activations in flight per rank at most (mem=N; pp gives the
  // paper's ZB-1p, 2 x pp its ZB-2p); 0 with every other kind.
  int memory_limit = 0;
};

// "tp=8,pp=4,dp=32,schedule=interleaved,chunks=2,mbs=1,recompute=full,zero=1,sp=1,layers=3+5"
// (cp=N and cp_comm=KIND for context parallelism; the text names them when cp > 1; ep=N likewise,
// etp=1 when the experts stay whole under tp > 1, and overlap_moe=1 when set)
// (schedule=zb-auto takes mem=N, its memory limit: the list is searched for the layout's own stage costs)
// (or first=N,last=M in place of layers; sp=1 at tp=1 is sequence parallelism off, as Megatron
// treats it)
// (keys in any order, each at most once, all optional; dp = -1 or absent means
// what the GPU count leaves). Throws PlanError naming the item.
PlanLayout parse_layout(const std::string& text, int gpus);
std::string layout_text(const PlanLayout& l);  // the same form, every key

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
  double cp_comm = 0;    // its context-parallel exchanges not hidden by attention (NOTE [planned context parallelism])
  double ep_comm = 0;    // the experts' dispatch and combine all-to-alls not hidden by overlapped pairs
                         // (NOTE [planned expert parallelism], NOTE [planned overlap])
};

struct RankMemory {  // bytes on one device of pipeline rank r
  double params = 0, grads = 0, optimizer = 0, activations = 0, boundary = 0;
  int peak_inflight = 0;  // (micro-batch, chunk) pairs alive at once, from the simulator
  double total() const { return params + grads + optimizer + activations + boundary; }
};

struct Estimate {
  PlanLayout layout;
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

// NOTE [runtimes] Which implementation the step model predicts. The same closed forms, with what each
// runtime overlaps and which kernels it runs:
//   trident        Trident today (framework/, parallel/): gradients reduced bucket by bucket during
//                  the last backward (parallel.overlap_grad_reduce); ZeRO-1's fp32 parameter all-gather
//                  bucket by bucket in the next forward, each bucket waited for at its first read
//                  (parallel.overlap_param_gather; NOTE [overlapped parameter gather]); TP collectives
//                  exposed; the attention core at the GEMM rate, element-wise work in the cluster's per-layer host time.
//   megatron       Megatron-LM as its 2024 H100 table ran (README: --overlap-grad-reduce --overlap-param-gather
//                  --tp-comm-overlap, distributed optimizer): fp32 gradients reduce-scattered bucket by bucket
//                  during the last backward, bf16 parameters all-gathered bucket by bucket during the next
//                  forward, buckets of max(4e7, 1e6 x dp) parameters; with SP each TP all-gather/reduce-scatter
//                  split into tp chunks behind its GEMM; a fused causal attention kernel; fused element-wise kernels.
//   megatron-2021  Megatron-LM as Narayanan et al. 2021 ran it: one gradient all-reduce after the pipeline flush
//                  (its local DDP), no ZeRO, collectives exposed, attention as two bmm's around a fused
//                  scale-mask-softmax, dropout.
struct Runtime {
  std::string name;
  AttentionKernel attention = AttentionKernel::Gemm;
  bool grads_during_backward = true;  // false: after the backward, exposed
  bool gather_during_forward = false; // ZeRO-1's all-gather hidden by the next forward
  bool tp_comm_overlap = false;       // SP collectives chunked behind their GEMMs
  bool megatron_buckets = false;      // max(4e7, 1e6 x dp) parameters per bucket, bf16 gather
  std::string description;            // one line for the printed plan
};
Runtime runtime_named(const std::string& name);  // throws PlanError listing the names

// The run being planned: a model, its precision, the cluster, the global batch.
struct Problem {
  ModelConfig model;
  ModelFeatures features;  // its family's (NOTE [model features] in core/config.h), handed in with it
  std::string precision = "bf16";  // fp32 | bf16
  Cluster cluster;
  int64_t global_batch = 1;
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = true;  // parallel.overlap_param_gather (runtime trident)
  double dp_bucket_mb = 25.0;
  std::string runtime = "trident";  // NOTE [runtimes]
  int64_t log_interval = 1;  // logging.log_interval: a logged step also reduces the loss and gathers the
                             // pipeline's busy times
  // Measured per-piece compute of this model (NOTE [measured profile]); without it compute is FLOPs at
  // the cluster's GEMM rate plus its per-layer and per-action host time.
  std::optional<Profile> profile;
};

// Throws PlanError when the layout does not fit the model, the batch or the
// cluster (naming the factor), or the schedule does not support (p, m, v).
void check_layout(const Problem& pr, const PlanLayout& l);
// `l` with first=/last= (or, when the layers do not divide pp x chunks, a split the planner picks:
// the remainder spread one layer each over the middle stages first, as evenly as it goes) written out
// into `layers`; unchanged when the layers divide or are given.
PlanLayout resolve_layers(const ModelConfig& m, PlanLayout l);
Estimate evaluate(const Problem& pr, const PlanLayout& l);

}  // namespace trident::plan
