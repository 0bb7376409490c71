// The trainer: builds this rank's part of the run, then steps
//   zero grads -> schedule -> grad sync -> clip -> AdamW -> log
// once per optimizer step (train_step below).
#include "framework/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <memory>
#include <tuple>

#include <ATen/Parallel.h>

#include "core/atomic_file.h"
#include "core/cpu_memory.h"
#include "datasets/dataset.h"
#include "core/host_read.h"
#include "core/lr_schedule.h"
#include "core/optimizer.h"
#include "core/pipeline_layout.h"
#include "datasets/step_batches.h"
#include "datasets/training_data.h"
#include "framework/auto_split.h"
#include "framework/checkpointing.h"
#include "framework/config_tables.h"
#include "framework/machine.h"
#include "framework/recorder.h"
#include "metrics/metrics.h"
#include "models/common/plan.h"
#include "models/registry.h"
#include "parallel/backend.h"
#include "parallel/data_parallel.h"
#include "parallel/device.h"
#include "parallel/layout.h"
#include "parallel/process_groups.h"
#include "runtime/executor.h"
#include "runtime/pipeline_measure.h"
#include "schedules/expert_order.h"
#include "schedules/generators.h"
#include "schedules/group_waits.h"
#include "schedules/overlap.h"
#include "schedules/simulate.h"
#include "schedules/validate.h"

namespace trident {
namespace {

sched::Schedule read_schedule_file(const Config& cfg, int64_t m);

// A generated kind's compute-only list as the run executes it: its
// communication placed as generate() places it (NOTE [group waits]), under
// schedule.overlap_moe after its overlapped pairs are made (NOTE [overlapped
// pairs] in schedules/overlap.h), the placed pairs validated.
sched::Schedule placed_for_run(const Config& cfg, sched::Schedule s) {
  if (!cfg.schedule.overlap_moe) return sched::place_communication(s);
  s = sched::overlap_pairs(s);
  if (sched::count_pairs(s) == 0)
    throw ConfigError("schedule.overlap_moe = true: schedule.kind = \"" + cfg.schedule.kind + "\" at pp = " +
                      std::to_string(s.pipeline_ranks) + " with " + std::to_string(s.microbatches) +
                      " micro-batches has no backward followed by a forward of another micro-batch to pair");
  s = sched::place_communication(s);
  sched::validate(s);
  return s;
}

// The schedule this run executes, checked before any process group exists.
// Under schedule.overlap_moe a generated kind's compute-only list is paired
// (NOTE [overlapped pairs] in schedules/overlap.h) before its communication
// is placed; a file writes its pairs itself (F3+B1 tokens).
sched::Schedule build_schedule(const Config& cfg, int64_t m) {
  const int p = static_cast<int>(cfg.parallel.pp), v = static_cast<int>(cfg.schedule.chunks);
  const bool overlap = cfg.schedule.overlap_moe;
  if (cfg.schedule.kind == "file") {
    sched::Schedule s = read_schedule_file(cfg, m);
    if (!overlap && sched::count_pairs(s) > 0)
      throw ConfigError("schedule.file = \"" + cfg.schedule.file + "\" has overlapped pairs (F+B tokens) but "
                        "schedule.overlap_moe = false: set it to run them overlapped");
    if (overlap && sched::count_pairs(s) == 0)
      throw ConfigError("schedule.overlap_moe = true with schedule.file = \"" + cfg.schedule.file +
                        "\": the file has no overlapped pairs (write them as F3+B1 tokens, schedules/README.md)");
    return s;
  }
  // zb-auto is searched for F, B, W = 1, 2, 1 (sched::Costs' defaults): the run's own
  // costs are not measured before the schedule is built; `trident schedule --profile` searches it
  // for measured ones, trained as schedule.kind = "file" (schedules/README.md). The step's bubble
  // is what it minimises: Trident runs no optimizer post-validation (NOTE [zb-auto]).
  return placed_for_run(cfg, cfg.schedule.kind == "zb-auto"
                                 ? sched::zb_auto(p, static_cast<int>(m), sched::Costs{},
                                                  static_cast<int>(cfg.schedule.memory_limit), sched::ZbObjective::kStep)
                                 : sched::generate_compute(cfg.schedule.kind, p, static_cast<int>(m), v));
}

sched::Schedule read_schedule_file(const Config& cfg, int64_t m) {
  const int p = static_cast<int>(cfg.parallel.pp), v = static_cast<int>(cfg.schedule.chunks);
  std::ifstream f(cfg.schedule.file);
  if (!f) throw ConfigError("schedule.file = \"" + cfg.schedule.file + "\": cannot open it");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  sched::Schedule s = sched::parse_text(text);
  if (s.pipeline_ranks != p || s.microbatches != m || s.chunks != v)
    throw ConfigError("schedule.file = \"" + cfg.schedule.file + "\" is for p=" + std::to_string(s.pipeline_ranks) +
                      " m=" + std::to_string(s.microbatches) + " v=" + std::to_string(s.chunks) +
                      " but this run has p=" + std::to_string(p) + " m=" + std::to_string(m) +
                      " v=" + std::to_string(v) + ": expected a schedule for this run's p, m and v");
  s = sched::with_reduce_grad(std::move(s));  // NOTE [files without REDUCE_GRAD] in schedules/generators.cpp
  sched::validate(s);
  // A file's own communication runs as written; a compute-only file's is placed as generate() places it.
  return sched::has_communication(s) ? s : sched::place_communication(s);
}

// NOTE [device guard]
// The gradient norm stays on the device: the clipping coefficient is
// computed there, and a non-finite norm sets `skip`, which makes every
// later AdamW update a no-op on the device (found_inf of the fused kernel,
// NOTE [fused AdamW]) and records the first such step and its norm. The
// host reads the norm only on logged steps (the last step is one), in the
// same read as the record, and stops there naming the step that went bad:
// no weight was written from a non-finite gradient, and a non-logged step
// makes no host read at all (NOTE [host reads]).
struct NonFiniteGuard {
  at::Tensor skip;   // float32 scalar: 1 from the first non-finite norm on
  at::Tensor first;  // float64 {step, norm} of the first non-finite norm; step 0: none yet

  void observe(const at::Tensor& norm, int64_t step) {
    if (!skip.defined()) {
      skip = at::zeros({}, norm.options().dtype(at::kFloat));
      first = at::zeros({2}, norm.options());
    }
    const at::Tensor fresh = norm.isfinite().logical_not_().logical_and_(skip == 0);
    first.copy_(at::where(fresh, at::stack({at::full({}, static_cast<double>(step), norm.options()), norm}), first));
    skip.copy_(at::maximum(skip, fresh.to(at::kFloat)));
  }
  // The norm on the host (one read); throws if any step so far had a non-finite one.
  double read(const at::Tensor& norm) const {
    const at::Tensor host = read_to_host(at::cat({norm.reshape({1}), first}), "gradient norm");
    const double* v = host.data_ptr<double>();
    if (v[1] != 0)  // every rank sees the same norms, so all stop together
      throw std::runtime_error("step " + std::to_string(static_cast<int64_t>(v[1])) + ": the gradient norm is " +
                               std::to_string(v[2]) +
                               "; stopped before the optimizer wrote it into the weights (lower training.lr?)");
    return v[0];
  }
};

struct Run {
  Config cfg;
  c10::Device device{c10::kCPU};  // where this rank computes (training.device, LOCAL_RANK)
  int64_t microbatches = 1;  // per step per DP rank
  std::unique_ptr<ProcessGroups> pgs;
  TpContext tp;
  std::unique_ptr<Model> model;
  std::vector<std::unique_ptr<Stage>> stages;  // this rank's stages, in chunk order
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<Executor> exec;
  sched::Schedule schedule;
  std::unique_ptr<TrainingData> train_data, val_data;  // datasets/training_data.h: data.order's samples
  double flops_per_step = 0;
  int64_t model_params = 0;
  std::optional<AutoSplit> auto_split;  // parallel.pipeline_layers = "auto": the split chosen
  NonFiniteGuard guard;
  std::unique_ptr<Recorder> rec;  // the measurements and reports
};

// The samples micro-batch `mb` of global batch `step` gives this rank (NOTE [step batches]).
StepBatches step_batches(const Run& r, const data::SampleSource& ds, int64_t step) {
  const auto& t = r.cfg.training;
  const Coords me = r.pgs->layout().coords(r.pgs->rank());
  const BatchShape shape{t.global_batch_size, t.micro_batch_size, r.cfg.model.seq_len, r.microbatches,
                         me.dp, r.cfg.parallel.dp, me.cp, r.cfg.parallel.cp, r.train_data->documents};
  return StepBatches(ds, step, shape, r.device);
}

bool loss_masked(const Config& c) { return c.data.eod_mask_loss || c.data.completion_only_loss; }

// A step's (or an evaluation batch's) samples and, when they hold documents, their counts
// over the global batch (NOTE [document counts]: [loss tokens, documents, padding], double,
// summed over dp x cp on the device) and under loss masks the loss's scale dp·cp / N (NOTE
// [token-weighted loss] in models/common/loss_mask.h). The counts are reduced only where they
// are read: under loss masks, or for a logged step's metrics (`logged`); both are alike on every
// rank of a dp x cp group, so the count's all-reduce is issued alike.
struct StepData {
  StepBatches batches;
  at::Tensor counts, scale;
};

StepData step_data(Run& r, const data::SampleSource& ds, int64_t step, bool logged = false) {
  StepData d{step_batches(r, ds, step), at::Tensor(), at::Tensor()};
  if (!r.train_data->documents.any() || !(logged || loss_masked(r.cfg))) return d;
  const DocumentCounts n = d.batches.counts();
  d.counts = at::tensor({n.loss_tokens, n.documents, n.padding}, at::kDouble).to(r.device);
  all_reduce(r.pgs->dp_cp, d.counts);
  if (loss_masked(r.cfg))
    d.scale = (static_cast<double>(r.pgs->dp_cp.size()) / d.counts[0].clamp_min(1.0)).to(at::kFloat);
  return d;
}

// With documents in the samples, each stage is handed the micro-batch's (NOTE [packed
// documents] in models/common/document_attention.h): their lengths for attention, their
// positions where any restarts (else the stages' own 0, 1, ..., bit for bit a run without), the
// padding the MoE layers leave out of their balancing losses; under loss masks the last stage its
// mask and the step's scale.
MicroBatch micro_batch(StepData& step, int mb) {
  auto [inputs, targets] = step.batches(mb);
  MicroBatch b{inputs, targets, nullptr, nullptr};
  if (DocumentBatch d = step.batches.documents(mb); d.cu_seqlens.defined()) {
    if (step.scale.defined()) b.loss_mask = std::make_shared<const LossMask>(LossMask{d.loss_mask, step.scale});
    b.documents = std::make_shared<const Documents>(
        Documents{std::move(d.lengths), d.restarts ? d.position_ids : at::Tensor(), d.real, d.real_tokens});
  }
  return b;
}

// What each micro-batch's loss is scaled by in the backward: 1 / micro-batches for their
// mean, 1 under loss masks (the stages' outputs already are shares of one mean).
double backward_scale(const Run& r) { return loss_masked(r.cfg) ? 1.0 : 1.0 / static_cast<double>(r.microbatches); }

// Sum over the pipeline (only last stages hold losses), mean over micro-batches
// and DP (x CP: each rank's loss is the mean over its seq / cp tokens, the
// same count on every rank, so their mean is the whole sequences' mean), on
// the device; the result is the step's one read of the loss. Under loss masks
// the micro-batches' outputs are shares of the step's mean times dp·cp (NOTE
// [token-weighted loss]): summed, not averaged.
double reduce_loss(Run& r, const at::Tensor& local_sum) {
  at::Tensor t = local_sum.reshape({1}).to(at::kDouble).clone();
  all_reduce(r.pgs->pp, t);
  if (!loss_masked(r.cfg)) t.div_(static_cast<double>(r.microbatches));
  all_reduce(r.pgs->dp_cp, t);
  return read_scalar(t, "loss") / static_cast<double>(r.pgs->dp_cp.size());
}

// The step line's document figures from a step's counts (NOTE [document counts]): documents
// and padding were counted by every cp rank alike.
DocumentMetrics document_metrics(const Run& r, const at::Tensor& counts) {
  const at::Tensor host = read_to_host(counts, "document counts");
  const double* n = host.data_ptr<double>();
  const double samples = static_cast<double>(r.cfg.training.global_batch_size), cp = static_cast<double>(r.cfg.parallel.cp);
  return {n[0], n[2] / cp / (samples * static_cast<double>(r.cfg.model.seq_len)), n[1] / cp / samples};
}

// NOTE [MoE stats]: every stage's statistics of the step, summed over the world (pipeline stages
// hold different layers, data-parallel replicas the same), read once on a logged step. Every rank
// takes part whether or not its stages hold an MoE layer.
at::Tensor world_moe_stats(Run& r, const std::vector<at::Tensor>& taken) {
  const ModelConfig& mc = r.cfg.model;
  at::Tensor t =
      at::zeros({mc.layers, mc.experts + kMoeStatExtra}, at::TensorOptions().dtype(at::kDouble).device(r.device));
  for (const at::Tensor& s : taken)
    if (s.defined()) t.add_(s);
  all_reduce(r.pgs->world, t);
  return t;
}

std::vector<MoeLayerStats> summarize_moe_stats(Run& r, const at::Tensor& t) {
  const ModelConfig& mc = r.cfg.model;
  if (mc.experts == 0) return {};
  const at::Tensor host = read_to_host(t, "moe stats");
  const auto a = host.accessor<double, 2>();
  std::vector<MoeLayerStats> out;
  for (int64_t l = 0; l < mc.layers; ++l) {
    if (!mc.moe_layer(l)) continue;
    const auto col = [&](MoeStatColumn c) { return a[l][mc.experts + c]; };
    const double n = col(kMoeMicroBatches);
    double most = 0, sum = 0;
    for (int64_t e = 0; e < mc.experts; ++e) most = std::max(most, a[l][e]), sum += a[l][e];
    out.push_back({l, sum > 0 ? most / (sum / static_cast<double>(mc.experts)) : 0.0,
                   n > 0 ? col(kMoeAux) / n : 0.0, n > 0 ? col(kMoeZ) / n : 0.0});
    // The share of the routed assignments dropped past capacity (written only with a capacity), and
    // the correction bias's range during the step (only with one).
    const double routed = col(kMoeAssignments);
    if (mc.moe_capacity_factor > 0) out.back().dropped = routed > 0 ? 1.0 - sum / routed : 0.0;
    if (mc.moe_expert_bias) out.back().bias_range = n > 0 ? col(kMoeBiasRange) / n : 0.0;
    // Under ep > 1 each EP rank holds experts [j·E/ep, (j+1)·E/ep) (NOTE [expert dispatch]): its load.
    const int64_t ep = r.pgs->layout().ep;
    if (ep > 1) {
      double busiest = 0;
      for (int64_t j = 0; j < ep; ++j) {
        double rows = 0;
        for (int64_t e = j * mc.experts / ep; e < (j + 1) * mc.experts / ep; ++e) rows += a[l][e];
        busiest = std::max(busiest, rows);
      }
      out.back().rank_load_max = sum > 0 ? busiest / (sum / static_cast<double>(ep)) : 0.0;
    }
  }
  return out;
}

// Evaluation number `evaluation` (0 at the first): which validation batches it
// reads follows data.order (eval_batch_index).
double evaluate(Run& r, int64_t evaluation) {
  // Evaluation applies no dropout; the stages go back to training on the way out.
  struct Evaluating {
    std::vector<std::unique_ptr<Stage>>& stages;
    explicit Evaluating(std::vector<std::unique_ptr<Stage>>& s) : stages(s) {
      for (auto& st : stages) st->set_training(false);
    }
    ~Evaluating() {
      for (auto& st : stages) st->set_training(true);
    }
  } evaluating(r.stages);
  double sum = 0;
  for (int64_t e = 0; e < r.cfg.training.eval_batches; ++e) {
    StepData data = step_data(r, *r.val_data->samples, eval_batch_index(r.cfg, evaluation, e));
    sum += reduce_loss(
        r, r.exec->forward_only(static_cast<int>(r.microbatches), [&](int mb) { return micro_batch(data, mb); }));
  }
  return sum / static_cast<double>(r.cfg.training.eval_batches);
}

// One optimizer step. Only a logged step (every logging.log_interval steps,
// the last step, and evaluation steps) reads its loss back from the device
// and runs the collectives that only logging needs (the loss reduction, the
// pipeline's busy times and link latencies); it returns the step's metrics,
// the others nothing. The gradient norm is computed on every step: it is
// the clipping's input and the guard against a non-finite update.
std::optional<StepMetrics> train_step(Run& r, int64_t step, int64_t data_step) {
  const auto& t = r.cfg.training;
  const bool eval = t.eval_interval > 0 && (step + 1) % t.eval_interval == 0;
  const bool logged = (step + 1) % r.cfg.logging.log_interval == 0 || step + 1 == t.steps || eval;
  r.rec->begin_step(step, logged);
  r.dp->zero_grads();
  const auto& actions = r.schedule.ranks.at(r.pgs->layout().coords(r.pgs->rank()).pp);
  StepData data = step_data(r, *r.train_data->samples, data_step, logged);  // NOTE [consumed samples]
  const ExecutorStats stats =
      r.exec->run(actions, [&](int mb) { return micro_batch(data, mb); }, backward_scale(r), r.dp.get());
  std::vector<at::Tensor> moe_stats;  // this step's only (NOTE [MoE stats])
  for (auto& st : r.stages) moe_stats.push_back(st->take_moe_stats());
  r.rec->schedule_ran(stats);
  r.dp->finish_grad_sync();  // what of the gradient reduction the backward did not hide
  r.rec->grads_synced();
  // NOTE [expert bias]: the world's loads on every step, before the optimizer; a logged
  // step reuses them.
  at::Tensor world_stats;
  const double bias_rate = r.cfg.model.moe_bias_update_rate;
  if (bias_rate > 0) {
    world_stats = world_moe_stats(r, moe_stats);
    const at::Tensor loads = world_stats.narrow(1, 0, r.cfg.model.experts);
    for (auto& st : r.stages) st->update_expert_bias(loads, bias_rate);
  }
  // Clipping and the non-finite guard run on the device (NOTE [device guard]).
  const at::Tensor norm = r.dp->clip_grads(t.grad_clip);
  r.guard.observe(norm, step + 1);
  const double lr = lr_at(step, t.steps, t.warmup_steps, t.lr, t.min_lr);
  r.dp->step(lr, r.guard.skip);
  r.rec->optimizer_stepped();
  if (!logged) return std::nullopt;
  const double loss = reduce_loss(r, stats.loss);
  StepMetrics m = r.rec->metrics(loss, lr, r.guard.read(norm), r.dp->optimizer_state_bytes());
  if (data.counts.defined()) m.documents = document_metrics(r, data.counts);
  if (r.cfg.model.experts > 0) m.moe = summarize_moe_stats(r, world_stats.defined() ? world_stats : world_moe_stats(r, moe_stats));
  if (eval) {
    r.dp->wait_params();  // evaluation reads every parameter (NOTE [overlapped parameter gather])
    m.eval_loss = evaluate(r, (step + 1) / t.eval_interval - 1);
  }
  r.rec->end_logged_step();
  return m;
}

// NOTE [measured zb-auto]
// schedule.zb_auto_costs = "measured": before the first step every rank runs
// ZB-H1 (the family zb-auto searches, its backward split into I and W) twice
// on the first global batch, with no optimizer step (the gradients are zeroed
// after, the data position and the optimizer are untouched; with dropout the
// passes draw from the generator), and the second pass's times give each
// virtual stage's F, I, W and each link's latency, as the run's report
// measures them (CostAccumulator). Global rank 0's figures, sent to every rank
// over the world, are the costs zb-auto is searched for, so all ranks, of
// every data-parallel replica, build the same list.
void measure_zb_auto(Run& r) {
  const Config& c = r.cfg;
  const int p = static_cast<int>(c.parallel.pp), m = static_cast<int>(r.microbatches);
  const int pp_rank = r.pgs->layout().coords(r.pgs->rank()).pp;
  const sched::Schedule probe = sched::generate("zb-h1", p, m, 1);
  CostAccumulator acc;
  for (int pass = 0; pass < 2; ++pass) {  // the first pass warms the allocator and the kernels up
    r.dp->zero_grads();
    StepData data = step_data(r, *r.train_data->samples, 0);
    r.exec->run(probe.ranks.at(pp_rank), [&](int mb) { return micro_batch(data, mb); }, backward_scale(r), r.dp.get());
    r.dp->finish_grad_sync();
    if (pass == 1) {
      acc.add(*r.exec, 1);
      acc.add_latency_sample(r.pgs->pp, *r.exec);
    }
  }
  r.dp->zero_grads();
  for (auto& st : r.stages) st->take_moe_stats();  // the probe's routing is no step's (NOTE [MoE stats])
  acc.predict(r.pgs->pp, probe);  // the costs, on each pipeline's first rank
  at::Tensor t = at::zeros({4 * p - 1}, at::kDouble);
  if (r.pgs->rank() == 0) {
    for (int s = 0; s < p; ++s) {
      const sched::StageCosts& sc = acc.costs.stage_costs.at(static_cast<size_t>(s));
      t[3 * s] = sc.forward, t[3 * s + 1] = sc.backward, t[3 * s + 2] = sc.weight;
    }
    for (int b = 0; b + 1 < p; ++b)
      t[3 * p + b] = acc.costs.latency.empty() ? 0.0 : acc.costs.latency.at(static_cast<size_t>(b));
  }
  all_reduce(r.pgs->world, t);  // rank 0's figures everywhere
  sched::Costs costs;
  std::string text;
  for (int s = 0; s < p; ++s) {
    costs.stage_costs.push_back({t[3 * s].item<double>(), t[3 * s + 1].item<double>(), t[3 * s + 2].item<double>()});
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%.3g/%.3g/%.3g", s ? ", " : "", costs.stage_costs.back().forward,
                  costs.stage_costs.back().backward, costs.stage_costs.back().weight);
    text += buf;
  }
  for (int b = 0; b + 1 < p; ++b) costs.latency.push_back(t[3 * p + b].item<double>());
  r.schedule = placed_for_run(
      c, sched::zb_auto(p, m, costs, static_cast<int>(c.schedule.memory_limit), sched::ZbObjective::kStep));
  if (r.pgs->rank() == 0) {
    const sched::TimelineStats st = sched::simulate_stats(r.schedule, costs);
    int peak = 0;
    for (int n : st.peak_inflight) peak = std::max(peak, n);
    std::cout << "schedule: zb-auto searched for the measured costs (ms per stage F/B/W: " << text
              << "): predicted bubble " << 100 * st.bubble_fraction << "%, at most " << peak
              << " micro-batches in flight (schedule.memory_limit = " << c.schedule.memory_limit << ")" << std::endl;
  }
}

std::vector<std::vector<Param>*> stage_params_of(Run& r) {
  std::vector<std::vector<Param>*> out;
  for (auto& s : r.stages) out.push_back(&s->params());
  return out;
}

// NOTE [all-to-all order] in schedules/expert_order.h: every member of this
// rank's expert-parallel group issues the same all-to-alls in the same order
// on each of its two groups, checked on the action lists before the first
// step. The members are data-parallel replicas of one pipeline rank and run
// that rank's list of the one schedule, so today the lists are equal by
// construction; the check keeps it a property, whatever builds the lists.
void check_expert_order(const Config& c, const Run& r, int pp_rank) {
  const std::vector<ChunkSpec> specs = split_layers(c.model.layers, r.schedule.virtual_stages(), chunk_layers(c));
  std::vector<std::vector<int>> moe(static_cast<size_t>(r.schedule.chunks));
  for (int chunk = 0; chunk < r.schedule.chunks; ++chunk) {
    const ChunkSpec& spec = specs.at(static_cast<size_t>(r.schedule.stage_of(pp_rank, chunk)));
    for (int64_t l = spec.first_layer; l < spec.first_layer + spec.num_layers; ++l)
      if (c.model.moe_layer(l)) moe[static_cast<size_t>(chunk)].push_back(static_cast<int>(l));
  }
  const std::vector<const sched::ActionList*> lists(r.pgs->ep.members.size(), &r.schedule.ranks.at(pp_rank));
  sched::check_expert_order(lists, r.pgs->ep.members, moe);
}

// The ranks sharing this host's memory and cores (from LOCAL_WORLD_SIZE) fit their parameters and
// activations in it, and this rank's in its GPU; errors before any rendezvous.
void check_memory_fits(const Config& c, const sched::Schedule& schedule, const WorldEnv& env,
                       const DeviceChoice& device) {
  const HostResources host = read_host_resources();
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int64_t on_host = local && std::atoll(local) > 0 ? std::atoll(local) : env.world_size;
  // The schedule's in-flight micro-batches per pipeline rank, for their activations: the
  // simulator's count (any costs: a rank runs its list in order whatever they are).
  const std::vector<int> inflight = sched::simulate_stats(schedule, sched::Costs{}).peak_inflight;
  const ModelFeatures shape = model_family(c, model_families()).features;
  check_host_resources(c, shape, on_host, host.mem_bytes, host.cores, inflight);
  if (device.cuda) check_device_memory(c, shape, device.index, cuda_device_total_bytes(device.index), inflight);
}

// The groups of this rank's MoE layers. NOTE [expert grid] in parallel/layout.h: the tp group itself
// splits each expert at etp = tp, and slices the tokens at etp = 1 (whole experts).
EpContext expert_context(const Config& c, const Layout& layout, const ProcessGroups& pgs) {
  EpContext ep;
  if (layout.ep > 1) ep.group = &pgs.ep, ep.backward_group = &pgs.ep_backward;
  ep.allgather = c.parallel.moe_dispatcher == "allgather";
  if (layout.tp > 1) ep.tp = &pgs.tp;
  if (layout.etp == 1) {
    if (layout.tp != 1) ep.token_slices = &pgs.tp;
  } else if (layout.etp == layout.tp) {
    ep.expert_tp = &pgs.tp;
  } else {
    ep.expert_tp = &pgs.expert_tp, ep.token_slices = &pgs.token_slices;
  }
  return ep;
}

// This pipeline rank's stages, one per chunk, set for the run's recomputation, precisions and
// micro-batches, their buffers on the device (the parameters move with the DataParallel).
void make_stages(Run& r, const Layout& layout, int pp_rank) {
  const Config& c = r.cfg;
  const int stages = r.schedule.virtual_stages();
  for (int chunk = 0; chunk < r.schedule.chunks; ++chunk) {
    r.stages.push_back(r.model->make_stage(r.schedule.stage_of(pp_rank, chunk), stages, r.tp, c.training.seed,
                                           expert_context(c, layout, *r.pgs),
                                           CpContext{layout.cp > 1 ? &r.pgs->cp : nullptr, parse_cp_comm(c.parallel.cp_comm)}));
    r.stages.back()->set_recompute(parse_recompute(c.training.recompute));
    r.stages.back()->set_compute_dtype(c.training.precision == "bf16" ? at::kBFloat16 : at::kFloat);
    r.stages.back()->set_loss_scale(1.0 / static_cast<double>(r.microbatches));
    r.stages.back()->set_boundary_dtype(pipeline_dtype(c) == "bf16" ? at::kBFloat16 : at::kFloat);
    r.stages.back()->move_buffers(r.device);  // once
  }
}

// The gradients' reduction and the optimizer over this rank's stages' parameters.
void make_data_parallel(Run& r, const std::vector<std::vector<Param*>>& stage_params, int pp_rank) {
  const Config& c = r.cfg;
  const int stages = r.schedule.virtual_stages();
  DataParallelOptions dpo;
  dpo.bucket_mb = c.parallel.dp_bucket_mb;
  dpo.overlap = c.parallel.overlap_grad_reduce;
  dpo.zero1 = c.parallel.zero == 1;
  dpo.overlap_param_gather = c.parallel.overlap_param_gather;
  dpo.sequence_parallel = c.parallel.sequence_parallel;
  dpo.device = r.device;  // the parameters move into the device's buckets here
  r.dp = std::make_unique<DataParallel>(
      stage_params,
      // The dense gradients over dp x cp (NOTE [context grid]).
      DataParallelGroups{&r.pgs->dp_cp, &r.pgs->tp, &r.pgs->model_parallel, &r.pgs->embedding, &r.pgs->expert_dp}, dpo,
      AdamWOptions{c.training.beta1, c.training.beta2, c.training.eps, c.training.weight_decay},
      tied_placement(r.model->tied_groups(stages), [&](int s) { return r.schedule.rank_of(s); }, pp_rank,
                     r.schedule.pipeline_ranks),
      norm_slots(r.model->unique_params(stages)));
}

void build(Run& r) {
  Config& c = r.cfg;
  check_config_tables(c, config_tables());  // the rest of check_config ran when c was parsed
  check_checkpoint_dir(c);
  const WorldEnv env = read_world_env();
  if (env.rank == 0) make_log_dir(c.logging.dir);  // rank 0's log: a bad logging.dir errs before the build
  // One device per rank, from LOCAL_RANK; errors before any rendezvous.
  const DeviceChoice device =
      choose_device(c.training.device, c.training.device == "cuda" ? cuda_device_count() : 0, env.local_rank);
  const std::string backend = resolve_backend(c.parallel.backend, c.training.device);
  if (device.cuda) {
    set_cuda_device(device.index);
    r.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device.index));
  } else {
    install_cpu_memory_meter();  // activation bytes are measured on the host's allocator
  }
  resolve_world(c, env.world_size);
  r.microbatches = num_microbatches(c);
  r.schedule = build_schedule(c, r.microbatches);  // schedule errors before any rendezvous
  check_memory_fits(c, r.schedule, env, device);
  // Every rank builds the same indices; rank 0 alone writes data.cache_dir's caches.
  r.train_data = open_training_data(c, "train", env.rank == 0);
  if (c.training.eval_interval > 0) r.val_data = open_training_data(c, "val", env.rank == 0);
  const Layout layout = Layout::make(env.world_size, static_cast<int>(c.parallel.tp), static_cast<int>(c.parallel.pp),
                                     static_cast<int>(c.parallel.dp), static_cast<int>(c.parallel.ep),
                                     static_cast<int>(c.parallel.cp), static_cast<int>(c.parallel.etp));
  r.pgs = std::make_unique<ProcessGroups>(env, layout, backend,
                                          std::chrono::milliseconds(static_cast<int64_t>(c.parallel.timeout_s * 1000)),
                                          r.device);
  r.tp = TpContext{&r.pgs->tp, c.parallel.sequence_parallel};
  if (c.parallel.auto_split()) {
    const AutoSplit split = choose_auto_split(*make_model(c), r.schedule, c.training.micro_batch_size, r.pgs->world);
    c.parallel.pipeline_layers = split.layers;  // the effective config records the choice
    if (r.pgs->rank() == 0) std::cout << split.describe() << std::endl;
    r.auto_split = split;
  }
  r.model = make_model(c);
  const int stages = r.schedule.virtual_stages(), pp_rank = layout.coords(env.rank).pp;
  make_stages(r, layout, pp_rank);
  std::vector<Stage*> raw;
  std::vector<std::vector<Param*>> stage_params;
  for (const auto& stage : r.stages) {
    raw.push_back(stage.get());
    stage_params.emplace_back();
    for (Param& prm : stage->params()) stage_params.back().push_back(&prm);
  }
  if (layout.ep > 1) check_expert_order(c, r, pp_rank);
  for (const ParamInfo& info : r.model->unique_params(stages)) {
    int64_t n = 1;
    for (int64_t d : info.full_shape) n *= d;
    r.model_params += n;
  }
  make_data_parallel(r, stage_params, pp_rank);
  if (r.dp->overlaps_param_gather())  // each stage reports its reads (NOTE [overlapped parameter gather])
    for (size_t chunk = 0; chunk < r.stages.size(); ++chunk)
      r.stages[chunk]->set_read_gate(
          [dp = r.dp.get(), chunk](size_t index) { dp->param_read(static_cast<int>(chunk), index); });
  // A checkpoint resumed later overwrites these (checkpoint.resume wins over init_from).
  if (!c.model.init_from.empty()) init_from_pretrained(c, stage_params_of(r));
  r.exec = std::make_unique<Executor>(raw, r.pgs->pp, r.schedule.stage_map(), c.training.micro_batch_size, r.device);
  r.exec->set_overlap(c.schedule.overlap_moe);  // NOTE [overlapped pairs]
  r.exec->set_packed_documents(r.train_data->documents.any());  // boundaries, positions, padding
  r.flops_per_step = r.model->flops_per_token() * static_cast<double>(c.training.global_batch_size * c.model.seq_len);
  if (c.schedule.kind == "zb-auto" && c.schedule.zb_auto_costs == "measured" && c.parallel.pp > 1) measure_zb_auto(r);
  r.rec = std::make_unique<Recorder>(
      RecordedRun{&r.cfg, r.pgs.get(), r.exec.get(), &r.schedule, r.microbatches, r.device, r.flops_per_step});
}

// NOTE [resumed step for the launcher]
// `trident launch --max-restarts` counts the steps a restart recomputed: the
// steps the failed attempt had completed minus the step its successor resumed
// from. Rank 0 tells it the latter through the progress directory the launcher
// gives every rank (TRIDENT_PROGRESS_DIR), as "resumed-step"; without a
// launcher that asks, nothing is written.
void tell_launcher_resumed(int64_t first_step) {
  const char* dir = std::getenv("TRIDENT_PROGRESS_DIR");
  if (!dir || !*dir) return;
  write_file_atomic(std::string(dir) + "/resumed-step", std::to_string(first_step) + "\n");
}

}  // namespace

TrainSummary train(Config cfg) {
  Run r;
  r.cfg = std::move(cfg);
  at::set_num_threads(static_cast<int>(r.cfg.training.threads));
  keep_freed_memory();
  build(r);
  const Config& c = r.cfg;
  const bool leader = r.pgs->rank() == 0;
  if (leader && c.training.warmup_steps > c.training.steps)
    std::cout << "warning: training.warmup_steps (" << c.training.warmup_steps << ") > training.steps ("
              << c.training.steps << "): the learning rate never reaches its peak" << std::endl;
  TrainSummary summary;
  summary.local_params = r.dp->local_params();
  summary.model_params = r.model_params;
  summary.peak_flops = peak_flops_per_rank(c, *r.pgs, r.device);

  // Every rank says what it holds (tests add these up across pipeline stages).
  std::cout << r.pgs->layout().describe(r.pgs->rank()) << ": "
            << summary.local_params << " local parameters of " << r.model_params << ", "
            << r.dp->dp_reduced_elements() << " gradient elements all-reduced over dp per step" << std::endl;
  Checkpointer checkpointer(c, *r.pgs, stage_params_of(r), *r.dp);
  const int64_t first_step = checkpointer.restore();  // 0, or the step of the checkpoint resumed
  if (leader) tell_launcher_resumed(first_step);
  r.rec->start(first_step, summary.peak_flops, r.model_params);
  int64_t steps_run = 0;
  for (int64_t step = first_step; step < c.training.steps; ++step, ++steps_run) {
    // Only logged steps read the loss back and run the logging collectives (train_step).
    r.rec->before_step(step, first_step);
    const std::optional<StepMetrics> logged = train_step(r, step, checkpointer.data_step(step));
    r.rec->after_step(logged.has_value());
    if (logged) r.rec->log(*logged);
    if (checkpointer.after_step(step + 1)) {  // saves when due; true at training.exit_after_steps
      ++steps_run;
      break;
    }
  }
  r.dp->wait_params();  // no gather outlives the training
  std::tie(summary.preempted_signal, summary.preempted_step) = checkpointer.preempted();
  r.rec->finish(steps_run, r.dp->optimizer_state_bytes(), summary);
  r.rec->write_rank_summary(summary, r.dp->dp_reduced_elements(), r.auto_split);
  barrier(r.pgs->world);
  return summary;
}

}  // namespace trident
