// The trainer: builds this rank's part of the run, then steps
//   zero grads -> schedule -> grad sync -> clip -> AdamW -> log
// once per optimizer step (train_step below).
#include "framework/trainer.h"

#include <malloc.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <memory>
#include <thread>
#include <tuple>

#include <ATen/Parallel.h>

#include "core/atomic_file.h"
#include "core/cpu_memory.h"
#include "core/data/dataset.h"
#include "core/host_read.h"
#include "core/json.h"
#include "core/lr_schedule.h"
#include "core/op_count.h"
#include "core/optimizer.h"
#include "core/training_data.h"
#include "framework/auto_split.h"
#include "framework/checkpointing.h"
#include "models/registry.h"
#include "parallel/backend.h"
#include "parallel/data_parallel.h"
#include "parallel/device.h"
#include "parallel/layout.h"
#include "parallel/process_groups.h"
#include "runtime/executor.h"
#include "runtime/pipeline_measure.h"
#include "schedules/generators.h"
#include "schedules/render.h"
#include "schedules/simulate.h"
#include "schedules/validate.h"

namespace trident {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double micros(Clock::time_point t) { return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count(); }

// The schedule this run executes, checked before any process group exists.
sched::Schedule build_schedule(const Config& cfg, int64_t m) {
  const int p = static_cast<int>(cfg.parallel.pp), v = static_cast<int>(cfg.schedule.chunks);
  // zb-auto is searched for F, B, W = 1, 2, 1 (sched::Costs' defaults): the run's own
  // costs are not measured before the schedule is built (schedules/README.md).
  if (cfg.schedule.kind == "zb-auto")
    return sched::add_communication(
        sched::zb_auto(p, static_cast<int>(m), sched::Costs{}, static_cast<int>(cfg.schedule.memory_limit)));
  if (cfg.schedule.kind != "file") return sched::generate(cfg.schedule.kind, p, static_cast<int>(m), v);
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
  return sched::has_communication(s) ? s : sched::add_communication(s);
}

// The process's peak resident set so far (Linux reports ru_maxrss in KiB): the
// host memory a CPU run peaks at. A CUDA run's device memory is not in it.
int64_t peak_resident_bytes() {
  struct rusage u {};
  if (getrusage(RUSAGE_SELF, &u) != 0) return -1;
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

// The MFU denominator. CPU: one thread's fp32 1024^3 matmul rate, the best
// of 8 single timings (other load on the machine only ever slows a timing
// down, so the fastest is the estimate it cannot deflate: a single timing
// under load put MFU above 100 %). CUDA: the device's matmul rate in the
// compute dtype (bf16 or fp32) on 8192^3 operands of random data, 10 matmuls
// timed between device synchronizations.
double measure_matmul_peak(const c10::Device& device, at::ScalarType dtype) {
  const bool cuda = device.is_cuda();
  const int64_t n = cuda ? 8192 : 1024;
  const auto opts = at::TensorOptions().dtype(cuda ? dtype : at::kFloat).device(device);
  at::Tensor a = at::randn({n, n}, opts), b = at::randn({n, n}, opts);
  for (int i = 0; i < (cuda ? 3 : 1); ++i) at::mm(a, b);  // warm-up (cuBLAS handles and heuristics)
  synchronize(device);
  const int reps = cuda ? 10 : 1, timings = cuda ? 1 : 8;
  double best = 0;
  for (int k = 0; k < timings; ++k) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) at::mm(a, b);
    synchronize(device);
    best = std::max(best, 2.0 * n * n * n * reps / seconds_since(t0));
  }
  return best;
}

// NOTE [malloc and large tensors]: glibc serves every block above its mmap
// threshold (at most 32 MB) with a fresh mmap and unmaps it on free, so a
// logits-sized tensor (micro-batch x seq x vocab, ~100 MB for GPT-2's vocab) is
// page-faulted and zeroed by the kernel on every micro-batch: measured here,
// the LM head's matmul ran at 26 GFLOP/s instead of 48. Keeping freed memory
// in the process (as PyTorch's caching allocators do on GPUs) removes that.
// It changes no arithmetic.
void keep_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
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
  int64_t m = 1;  // micro-batches per step per DP rank
  std::unique_ptr<ProcessGroups> pgs;
  TpContext tp;
  std::unique_ptr<Model> model;
  std::vector<std::unique_ptr<Stage>> stages;  // this rank's chunks, in chunk order
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<Executor> exec;
  sched::Schedule schedule;
  std::unique_ptr<TrainingData> train_data, val_data;  // core/training_data.h: data.order's samples
  double flops_per_step = 0;
  int64_t model_params = 0;
  int64_t local_params = 0;  // parameters this rank steps (a local tied copy counts once)
  ExecutorStats peak;  // the largest in-flight count and boundary bytes of any step
  int64_t deferred_weight_grads = 0;  // what W actions computed, over the run
  CostAccumulator costs;  // measured F/B/I/W, for the simulator's prediction of this run
  double span_sum_s = 0;  // pipeline time (slowest rank's executor run) summed over measured steps
  int64_t measured_steps = 0;
  std::optional<AutoSplit> auto_split;  // parallel.pipeline_layers = "auto": the split chosen
  // NOTE [host reads]: the most of each kind one step made, for logged and other steps.
  std::map<std::string, int64_t> reads_logged, reads_other;
  NonFiniteGuard guard;
  // NOTE [operation counts]: the operations of one step by phase, and which step (0: none counted).
  std::array<int64_t, kOpPhases> step_ops{};
  int64_t ops_step = 0;
};

// logging.trace: every rank's recording of this step goes to rank 0, which
// writes trace.json (all ranks, with grad-sync and optimizer phases) and
// timeline.svg (rank 0's pipeline, drawn like `trident schedule --format svg`).
void write_trace(Run& r, int64_t step, double origin_us, const std::vector<sched::Phase>& phases) {
  const sched::RankRecording mine{r.pgs->rank(), origin_us, r.exec->timeline(), phases};
  const std::vector<std::string> texts = gather_strings(r.pgs->world, sched::to_text(mine));
  if (r.pgs->rank() != 0) return;
  std::vector<sched::RankRecording> all;
  for (size_t i = 0; i < texts.size(); ++i) all.push_back(sched::recording_from_text(texts[i], static_cast<int>(i)));
  const std::string title = "step " + std::to_string(step) + ", " + r.pgs->layout().describe() + ", " +
                            r.cfg.schedule.kind + " m=" + std::to_string(r.m) + " v=" +
                            std::to_string(r.cfg.schedule.chunks);
  std::ofstream(r.cfg.logging.dir + "/trace.json") << sched::render_chrome_ranks(all, title);
  std::vector<sched::RankRecording> pipeline;
  for (int g : r.pgs->pp.members) pipeline.push_back(all.at(static_cast<size_t>(g)));
  std::ofstream(r.cfg.logging.dir + "/timeline.svg")
      << sched::render_svg(sched::to_timeline(pipeline, static_cast<int>(r.m), r.schedule.chunks),
                           "measured step " + std::to_string(step) + ", " + r.cfg.schedule.kind + ", ms");
}

// NOTE [step batches]
// A step's inputs and targets, (m x mbs, seq) int64 each, are read when its
// first micro-batch is asked for (only the first and last pipeline stages
// ask) and go to the device in one copy: on CUDA from pinned host memory
// with non_blocking, so the host queues it and goes on, and the kernels that
// read it run after it on the same stream. Micro-batch k is rows
// [k x mbs, (k+1) x mbs) of them, a view. On the CPU there is no copy and the
// rows hold what a per-micro-batch load held (same samples, same order).
class StepBatches {
 public:
  StepBatches(const Run& r, const data::SampleSource& ds, int64_t step) : r_(r), ds_(ds), step_(step) {}
  MicroBatch operator()(int mb) {
    if (!inputs_.defined()) load();
    const int64_t mbs = r_.cfg.training.micro_batch_size;
    return {inputs_.narrow(0, mb * mbs, mbs), targets_.narrow(0, mb * mbs, mbs)};
  }

 private:
  void load() {
    const auto& c = r_.cfg;
    const auto coords = r_.pgs->layout().coords(r_.pgs->rank());
    const int64_t mbs = c.training.micro_batch_size, s = c.model.seq_len;
    // Pinned memory needs a CUDA device; the CPU's tensor is the one it computes on.
    at::Tensor tok = at::empty({r_.m * mbs, s + 1}, at::TensorOptions(at::kLong).pinned_memory(r_.device.is_cuda()));
    int64_t row = 0;
    for (int64_t mb = 0; mb < r_.m; ++mb)
      for (int64_t sample : ds_.micro_batch(step_, c.training.global_batch_size, coords.dp, c.parallel.dp, mb, mbs))
        ds_.copy_sample(sample, tok[row++].data_ptr<int64_t>());
    TORCH_INTERNAL_ASSERT(row == tok.size(0));
    tok = tok.to(r_.device, /*non_blocking=*/true);  // the step's one host-to-device copy (none on the CPU)
    inputs_ = tok.narrow(1, 0, s).contiguous();
    targets_ = tok.narrow(1, 1, s).contiguous();
  }

  const Run& r_;
  const data::SampleSource& ds_;
  int64_t step_;
  at::Tensor inputs_, targets_;  // (m x mbs, seq) on r_.device
};

// Sum over the pipeline (only last stages hold losses), mean over micro-batches
// and DP, on the device; the result is the step's one read of the loss.
double reduce_loss(Run& r, const at::Tensor& local_sum) {
  at::Tensor t = local_sum.reshape({1}).to(at::kDouble).clone();
  all_reduce(r.pgs->pp, t);
  t.div_(static_cast<double>(r.m));
  all_reduce(r.pgs->dp, t);
  return read_scalar(t, "loss") / static_cast<double>(r.pgs->dp.size());
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
    StepBatches batches(r, *r.val_data->samples, eval_batch_index(r.cfg, evaluation, e));
    sum += reduce_loss(r, r.exec->forward_only(static_cast<int>(r.m), [&](int mb) { return batches(mb); }));
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
  const auto start = Clock::now();
  const bool eval = t.eval_interval > 0 && (step + 1) % t.eval_interval == 0;
  const bool logged = (step + 1) % r.cfg.logging.log_interval == 0 || step + 1 == t.steps || eval;
  const bool measured = step > 0 || t.steps == 1;  // the first step warms caches up: keep it out of the means
  r.exec->progress().set_step(step + 1);
  r.dp->zero_grads();

  const auto& actions = r.schedule.ranks.at(r.pgs->layout().coords(r.pgs->rank()).pp);
  StepBatches batches(r, *r.train_data->samples, data_step);  // NOTE [consumed samples]
  ExecutorStats stats = r.exec->run(
      actions, [&](int mb) { return batches(mb); }, 1.0 / static_cast<double>(r.m), r.dp.get());
  r.peak.peak_inflight = std::max(r.peak.peak_inflight, stats.peak_inflight);
  r.peak.peak_boundary_bytes = std::max(r.peak.peak_boundary_bytes, stats.peak_boundary_bytes);
  r.peak.peak_activation_bytes = std::max(r.peak.peak_activation_bytes, stats.peak_activation_bytes);
  r.deferred_weight_grads += stats.deferred_weight_grads;
  // On CUDA reading the timeline waits for the step (NOTE [device time]): only logged steps do.
  if (measured && (logged || !r.device.is_cuda())) r.costs.add(*r.exec, r.schedule.chunks);
  r.exec->progress().phase("grad-sync");
  set_op_phase(OpPhase::kGradSync);
  const auto sync_start = Clock::now();
  r.dp->finish_grad_sync();  // what of the gradient reduction the backward did not hide
  const double sync_s = seconds_since(sync_start);
  PipelineStep pipe;
  if (logged) {
    pipe = measure_pipeline_step(r.pgs->pp, *r.exec, r.schedule, sync_s);  // a collective over the pipeline
    if (measured) r.span_sum_s += pipe.span_s, ++r.measured_steps;
  }
  const auto opt_start = Clock::now();
  r.exec->progress().phase("optimizer");
  set_op_phase(OpPhase::kOptimizer);
  // Clipping and the non-finite guard run on the device (NOTE [device guard]).
  const at::Tensor norm = r.dp->grad_norm();
  r.guard.observe(norm, step + 1);
  if (t.grad_clip > 0) r.dp->scale_grads(at::where(norm > t.grad_clip, at::full_like(norm, t.grad_clip).div_(norm + 1e-6), 1.0));
  const double lr = lr_at(step, t.steps, t.warmup_steps, t.lr, t.min_lr);
  r.dp->step(lr, r.guard.skip);
  const auto opt_end = Clock::now();
  set_op_phase(OpPhase::kOther);
  if (r.cfg.logging.trace && step + 1 == r.cfg.logging.trace_step)
    write_trace(r, step + 1, micros(start),
                {{"grad-sync", micros(sync_start), micros(opt_start)}, {"optimizer", micros(opt_start), micros(opt_end)}});
  if (!logged) {
    r.exec->progress().done();
    return std::nullopt;
  }
  r.exec->progress().phase("loss-reduce");
  StepMetrics m;
  m.step = step + 1;
  m.loss = reduce_loss(r, stats.loss);
  m.lr = lr;
  m.grad_norm = r.guard.read(norm);
  m.step_time_s = seconds_since(start);
  m.grad_sync_s = sync_s;
  m.bubble = pipe.bubble;
  m.stage_busy_s = pipe.stage_busy_s;
  m.stage_idle = pipe.idle;
  m.optimizer_state_bytes = r.dp->optimizer_state_bytes();
  m.peak_memory_bytes = peak_resident_bytes();
  m.tokens_per_s = static_cast<double>(t.global_batch_size * r.cfg.model.seq_len) / m.step_time_s;
  m.tflops = r.flops_per_step / m.step_time_s / 1e12;
  if (measured) r.costs.add_latency_sample(r.pgs->pp, *r.exec);  // after the step's clock stopped
  if (eval) m.eval_loss = evaluate(r, (step + 1) / t.eval_interval - 1);
  r.exec->progress().done();
  return m;
}

// How each tied parameter's copies on this rank get their summed gradient:
// true when every copy is here (added locally), false when they are split
// over pipeline ranks (all-reduced over the embedding group, which joins the
// first and the last pipeline rank: the only cross-rank tie supported).
std::map<std::string, bool> tied_placement(const Run& r, int pp_rank) {
  std::map<std::string, bool> out;
  const int p = r.schedule.pipeline_ranks;
  for (const TiedGroup& g : r.model->tied_groups(r.schedule.virtual_stages())) {
    std::set<int> ranks;
    for (int s : g.stages) ranks.insert(r.schedule.rank_of(s));
    if (!ranks.count(pp_rank)) continue;
    if (ranks.size() == 1) {
      out[g.name] = true;
    } else if (ranks == std::set<int>{0, p - 1}) {
      out[g.name] = false;
    } else {
      throw std::runtime_error("tied parameter " + g.name +
                               " has copies on pipeline ranks other than the first and the last; "
                               "this placement is not supported");
    }
  }
  return out;
}

std::vector<std::vector<Param>*> chunk_params_of(Run& r) {
  std::vector<std::vector<Param>*> out;
  for (auto& s : r.stages) out.push_back(&s->params());
  return out;
}

void build(Run& r) {
  Config& c = r.cfg;
  check_schedule_kind(c, sched::schedule_kinds());  // the rest of check_config ran when c was parsed
  check_checkpoint_dir(c);
  const WorldEnv env = read_world_env();
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
  // schedule.chunks absent (0): what the kind needs; everything after (the schedule, checkpoints' layout) sees it.
  if (c.schedule.chunks == 0) c.schedule.chunks = sched::default_chunks(c.schedule.kind);
  r.m = num_microbatches(c);
  r.schedule = build_schedule(c, r.m);  // schedule errors before any rendezvous
  {
    // What this host holds, before anything is allocated (the schedule is a few lists) or any rank is met
    // (NOTE [size checks] in core/config.cpp): MemTotal and the cores this
    // process may run on; the ranks sharing them from LOCAL_WORLD_SIZE.
    int64_t mem_bytes = 0, cores = 0;
    std::ifstream meminfo("/proc/meminfo");
    for (std::string key; meminfo >> key;) {
      int64_t kib = 0;
      if (key == "MemTotal:" && meminfo >> kib) mem_bytes = kib * 1024;
      if (mem_bytes) break;
      meminfo.ignore(1 << 10, '\n');
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : std::thread::hardware_concurrency();
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const int64_t on_host = local && std::atoll(local) > 0 ? std::atoll(local) : env.world_size;
    // The schedule's in-flight micro-batches per pipeline rank, for their activations: the
    // simulator's count (any costs: a rank runs its list in order whatever they are).
    check_host_resources(c, on_host, mem_bytes, cores, sched::simulate_stats(r.schedule, sched::Costs{}).peak_inflight);
  }
  r.train_data = open_training_data(c, "train");
  if (c.training.eval_interval > 0) r.val_data = open_training_data(c, "val");
  const Layout layout = Layout::make(env.world_size, static_cast<int>(c.parallel.tp), static_cast<int>(c.parallel.pp),
                                     static_cast<int>(c.parallel.dp));
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
  std::vector<Stage*> raw;
  std::vector<std::vector<Param*>> chunk_params;
  for (int chunk = 0; chunk < r.schedule.chunks; ++chunk) {
    r.stages.push_back(r.model->make_stage(r.schedule.stage_of(pp_rank, chunk), stages, r.tp, c.training.seed));
    r.stages.back()->set_recompute(parse_recompute(c.training.recompute));
    r.stages.back()->set_compute_dtype(c.training.precision == "bf16" ? at::kBFloat16 : at::kFloat);
    r.stages.back()->set_boundary_dtype(pipeline_dtype(c) == "bf16" ? at::kBFloat16 : at::kFloat);
    r.stages.back()->move_buffers(r.device);  // once; the parameters move with the DataParallel below
    raw.push_back(r.stages.back().get());
    chunk_params.emplace_back();
    for (Param& prm : r.stages.back()->params()) chunk_params.back().push_back(&prm);
  }
  std::map<std::string, size_t> norm_slots;
  for (const ParamInfo& info : r.model->unique_params(stages)) {
    norm_slots.emplace(info.name, norm_slots.size());
    int64_t n = 1;
    for (int64_t d : info.full_shape) n *= d;
    r.model_params += n;
  }
  const std::map<std::string, bool> tied_local = tied_placement(r, pp_rank);
  const DataParallelGroups groups{&r.pgs->dp, &r.pgs->tp, &r.pgs->model_parallel, &r.pgs->embedding};
  DataParallelOptions dpo;
  dpo.bucket_mb = c.parallel.dp_bucket_mb;
  dpo.overlap = c.parallel.overlap_grad_reduce;
  dpo.zero1 = c.parallel.zero == 1;
  dpo.sequence_parallel = c.parallel.sequence_parallel;
  dpo.device = r.device;  // the parameters move into the device's buckets here
  r.dp = std::make_unique<DataParallel>(chunk_params, groups, dpo,
                                        AdamWOptions{c.training.beta1, c.training.beta2, c.training.eps,
                                                     c.training.weight_decay},
                                        tied_local, norm_slots);
  for (auto& params : chunk_params)
    for (Param* p : params)
      if (!(p->info.tied_copy && tied_local.count(p->info.name) && tied_local.at(p->info.name)))
        r.local_params += p->tensor.numel();
  // A checkpoint resumed later overwrites these (checkpoint.resume wins over init_from).
  if (!c.model.init_from.empty()) init_from_pretrained(c, chunk_params_of(r));
  r.exec = std::make_unique<Executor>(raw, r.pgs->pp, r.schedule.stage_map(), c.training.micro_batch_size, r.device);
  r.flops_per_step = r.model->flops_per_token() * static_cast<double>(c.training.global_batch_size * c.model.seq_len);
}

// Peak for MFU: given, or measured by rank 0 alone while the others wait.
// CPU: one thread's matmul rate times the devices (cores) the ranks share.
// CUDA: one device's matmul rate in the compute dtype (every rank has one).
double peak_flops_per_rank(Run& r) {
  const Config& c = r.cfg;
  if (c.training.peak_tflops > 0) return c.training.peak_tflops * 1e12;
  at::Tensor t = at::zeros({1}, at::kDouble);
  if (r.pgs->rank() == 0) t.fill_(measure_matmul_peak(r.device, c.training.precision == "bf16" ? at::kBFloat16 : at::kFloat));
  broadcast(r.pgs->world, t, 0);
  if (r.device.is_cuda()) return t.item<double>();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return t.item<double>() * static_cast<double>(std::min<int64_t>(r.pgs->world_size(), cores)) /
         static_cast<double>(r.pgs->world_size());
}

// Rank 0's start: the run's one-line description and its effective config.
void print_start(const Run& r, double peak) {
  const Config& c = r.cfg;
  std::cout << "trident train: " << r.pgs->layout().describe() << ", schedule " << c.schedule.kind << " (m=" << r.m
            << ", v=" << c.schedule.chunks << "), " << r.model_params << " parameters, device " << r.device.str()
            << " (" << describe_build() << "), backend " << r.pgs->backend() << ", peak " << peak / 1e9
            << " GFLOP/s per rank\n--- effective config ---\n"
            << to_toml(c) << "------------------------" << std::endl;
}

// Rank 0's end: measured against predicted (the simulator on this run's
// action lists with each stage's measured mean F/B/I/W and each link's
// measured latency), busy time per stage, and the run's means.
void print_report(const Run& r, const TrainSummary& summary, const sched::TimelineStats& predicted, int64_t steps_run,
                  double seconds) {
  const Config& c = r.cfg;
  double bubble = 0;
  for (const auto& m : summary.steps) bubble += m.bubble;
  const auto& mc = r.costs;
  const double span_ms = 1000.0 * r.span_sum_s / static_cast<double>(std::max<int64_t>(1, r.measured_steps));
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
  // NOTE [idle attribution] in runtime/pipeline_measure.h: each stage's idle and its parts, means over the logged steps.
  std::vector<IdleParts> idle;
  for (const auto& m : summary.steps) {
    idle.resize(m.stage_idle.size());
    for (size_t i = 0; i < idle.size(); ++i) {
      const double w = 1000.0 / static_cast<double>(summary.steps.size());
      const IdleParts& p = m.stage_idle[i];
      idle[i].total += w * p.total, idle[i].inherent += w * p.inherent, idle[i].imbalance += w * p.imbalance;
      idle[i].transfers += w * p.transfers, idle[i].sync += w * p.sync;
    }
  }
  std::cout << "pipeline: mean idle ms per stage = inherent to the schedule + stage imbalance + waiting on transfers + "
               "DP sync:";
  for (const IdleParts& p : idle)
    std::cout << " " << p.total << " = " << p.inherent << " + " << p.imbalance << " + " << p.transfers << " + " << p.sync
              << ";";
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
// held and did, for tests and tools to read instead of the printed lines
// (DESIGN.md principle 17). Numbers only; the printed lines say the same.
void write_rank_summary(const Run& r, const TrainSummary& s) {
  const int rank = r.pgs->rank();
  const auto coords = r.pgs->layout().coords(rank);
  json::Value v = json::Value::object();
  v["rank"] = json::number(static_cast<int64_t>(rank));
  v["tp"] = json::number(static_cast<int64_t>(coords.tp));
  v["pp"] = json::number(static_cast<int64_t>(coords.pp));
  v["dp"] = json::number(static_cast<int64_t>(coords.dp));
  v["local_parameters"] = json::number(s.local_params);
  v["model_parameters"] = json::number(s.model_params);
  v["dp_reduced_elements"] = json::number(r.dp->dp_reduced_elements());
  v["logged_steps"] = json::number(static_cast<int64_t>(s.steps.size()));
  v["peak_inflight"] = json::number(static_cast<int64_t>(r.peak.peak_inflight));
  v["peak_activation_bytes"] = json::number(r.peak.peak_activation_bytes);
  v["peak_boundary_bytes"] = json::number(r.peak.peak_boundary_bytes);
  // Weight-gradient computations W actions ran over the run (zero-bubble
  // schedules: > 0 when the I deferred them, as it must on every device).
  v["deferred_weight_grads"] = json::number(r.deferred_weight_grads);
  v["optimizer_state_bytes"] = json::number(s.optimizer_state_bytes);
  // NOTE [host reads]: the most reads of each kind one step made.
  json::Value reads = json::Value::object();
  for (const auto& [key, counts] : {std::make_pair("logged_step", &r.reads_logged), std::make_pair("other_step", &r.reads_other)}) {
    json::Value k = json::Value::object();
    for (const auto& [what, n] : *counts)
      if (n > 0) k[what] = json::number(n);
    reads[key] = k;
  }
  v["host_reads"] = reads;
  // NOTE [operation counts]: top-level ATen operations of one step, by phase.
  json::Value ops = json::Value::object();
  ops["step"] = json::number(r.ops_step);
  int64_t total = 0;
  for (int i = 0; i < kOpPhases; ++i) {
    ops[op_phase_name(static_cast<OpPhase>(i))] = json::number(r.step_ops[static_cast<size_t>(i)]);
    total += r.step_ops[static_cast<size_t>(i)];
  }
  ops["total"] = json::number(total);
  v["aten_ops"] = ops;
  if (r.auto_split) {
    json::Value a = json::Value::object();
    json::Value layers = json::Value::array();
    for (int64_t n : r.auto_split->layers) layers.push_back(json::number(n));
    a["layers"] = layers;
    a["simulated_bubble"] = json::number(r.auto_split->bubble);
    a["even_split_simulated_bubble"] = json::number(r.auto_split->uniform_bubble);
    v["auto_split"] = a;
  }
  std::filesystem::create_directories(r.cfg.logging.dir);
  write_file_atomic(r.cfg.logging.dir + "/rank-" + std::to_string(rank) + ".json", json::dump(v, 2) + "\n");
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
  summary.local_params = r.local_params;
  summary.model_params = r.model_params;
  const double peak = summary.peak_flops = peak_flops_per_rank(r);

  // Every rank says what it holds (tests add these up across pipeline stages).
  std::cout << r.pgs->layout().describe(r.pgs->rank()) << ": "
            << summary.local_params << " local parameters of " << r.model_params << ", "
            << r.dp->dp_reduced_elements() << " gradient elements all-reduced over dp per step" << std::endl;
  Checkpointer checkpointer(c, *r.pgs, chunk_params_of(r), *r.dp);
  const int64_t first_step = checkpointer.restore();  // 0, or the step of the checkpoint resumed
  if (leader) tell_launcher_resumed(first_step);
  std::unique_ptr<RunLog> log;
  if (leader) {
    print_start(r, peak);
    log = std::make_unique<RunLog>(c.logging.dir, "Trident " + c.model.arch + " loss (" + c.source + ")",
                                   first_step > 0 ? first_step : -1, c.logging.tensorboard);
    log->write_config(to_toml(c));
  }
  const bool bar = leader && c.logging.progress && isatty(STDOUT_FILENO);
  const auto start = Clock::now();
  int64_t steps_run = 0;
  for (int64_t step = first_step; step < c.training.steps; ++step, ++steps_run) {
    // Only logged steps read the loss back and run the logging collectives (train_step).
    const std::map<std::string, int64_t> reads_before = host_reads();
    // NOTE [operation counts]: the second step's (the first one's when there is one).
    std::optional<OpCounter> counter;
    if (step == std::min(first_step + 1, c.training.steps - 1)) counter.emplace();
    const std::optional<StepMetrics> logged = train_step(r, step, checkpointer.data_step(step));
    if (counter) {
      r.step_ops = counter->counts();
      r.ops_step = step + 1;
      counter.reset();
    }
    for (const auto& [what, n] : host_reads()) {
      auto it = reads_before.find(what);
      const int64_t in_step = n - (it == reads_before.end() ? 0 : it->second);
      int64_t& most = (logged ? r.reads_logged : r.reads_other)[what];
      most = std::max(most, in_step);
    }
    if (logged) {
      StepMetrics m = *logged;
      m.mfu = m.tflops * 1e12 / (peak * static_cast<double>(r.pgs->world_size()));
      summary.steps.push_back(m);
      if (leader) {
        log->append(m);
        if (bar) std::cout << "\r\033[K";
        std::cout << format_step_line(m, c.training.steps) << std::endl;  // flushed: ranks' output is piped
        if (bar) std::cout << format_progress(m.step, c.training.steps, seconds_since(start)) << std::flush;
      }
    }
    if (checkpointer.after_step(step + 1)) {  // saves when due; true at training.exit_after_steps
      ++steps_run;
      break;
    }
  }
  std::tie(summary.preempted_signal, summary.preempted_step) = checkpointer.preempted();
  if (steps_run == 0) {  // resumed at training.steps (the same on every rank): no step, nothing to report
    if (leader) {
      log->finish();
      std::cout << "done: nothing to train, the checkpoint is already at training.steps = " << c.training.steps
                << std::endl;
    }
  } else {
    const sched::TimelineStats predicted = r.costs.predict(r.pgs->pp, r.schedule);  // a collective over the pipeline
    if (leader) {
      if (bar) std::cout << "\r\033[K";
      log->finish();
      print_report(r, summary, predicted, steps_run, seconds_since(start));
    }
    std::cout << r.pgs->layout().describe(r.pgs->rank()) << ": peak " << r.peak.peak_inflight
              << " micro-batches in flight holding " << r.peak.peak_activation_bytes << " activation bytes ("
              << r.peak.peak_boundary_bytes << " in stage inputs/outputs); optimizer state "
              << r.dp->optimizer_state_bytes() << " bytes" << std::endl;
  }
  summary.optimizer_state_bytes = r.dp->optimizer_state_bytes();
  summary.peak_inflight = r.peak.peak_inflight;
  for (const sched::StageCosts& sc : r.costs.costs.stage_costs) {
    summary.stage_forward_ms.push_back(sc.forward);
    summary.stage_backward_ms.push_back(sc.backward);
    summary.stage_weight_ms.push_back(sc.weight);
  }
  write_rank_summary(r, summary);
  barrier(r.pgs->world);
  return summary;
}

}  // namespace trident
