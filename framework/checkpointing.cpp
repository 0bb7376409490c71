// Training checkpoints: see checkpointing.h, NOTE [training checkpoint
// contents] and NOTE [checkpoint commit].
#include "framework/checkpointing.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>

#include "core/atomic_file.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/checkpoint_tensors.h"
#include "core/pipeline_layout.h"
#include "parallel/backend.h"

namespace trident {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The moments of AdamW as stored: (name prefix, the optimizer's per-segment tensors).
std::vector<std::pair<std::string, std::vector<at::Tensor>*>> moments(AdamW& opt) {
  return {{"optim.exp_avg.", &opt.exp_avg()}, {"optim.exp_avg_sq.", &opt.exp_avg_sq()}};
}

// Every rank says whether its part succeeded; all throw together when any
// failed, so no rank is left waiting in a later collective for one that gave up.
void agree(const Group& world, const std::string& error, const std::string& what) {
  at::Tensor failed = at::zeros({world.size()}, at::kDouble);
  if (!error.empty()) failed[world.rank].fill_(1.0);
  all_reduce(world, failed);
  if (!error.empty()) throw std::runtime_error(what + ": " + error);
  std::string who;
  for (int r = 0; r < world.size(); ++r)
    if (failed[r].item<double>() > 0) who += (who.empty() ? "" : ", ") + std::to_string(world.global(r));
  if (!who.empty()) throw std::runtime_error(what + ": failed on rank " + who + " (see its message)");
}

// The generator of `device`: the CPU's, or a CUDA device's own (its dropout draws from it).
at::Generator generator_of(const c10::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device) : at::detail::getDefaultCPUGenerator();
}

std::string rng_state(const c10::Device& device = c10::Device(c10::kCPU)) {
  at::Generator gen = generator_of(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  const at::Tensor s = gen.get_state().contiguous();
  return std::string(static_cast<const char*>(s.data_ptr()), static_cast<size_t>(s.numel()));
}

void set_rng_state(const std::string& bytes, const c10::Device& device = c10::Device(c10::kCPU)) {
  at::Generator gen = generator_of(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  at::Tensor s = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::copy(bytes.begin(), bytes.end(), static_cast<char*>(s.data_ptr()));
  gen.set_state(s);
}

// A checkpoint of another model would load silently where shapes happen to
// agree (heads), or load a prefix of it (fewer layers, a smaller padded
// vocabulary), so the shape-defining keys must match; the error also names
// the first tensor whose shape differs, with both shapes.
void check_same_model(const ckpt::Reader& r, const ModelConfig& mine,
                      const std::vector<std::vector<Param>*>& stage_params) {
  const ModelConfig theirs = parse_config(r.meta().config_toml, r.step_dir() + "/manifest.json (config)").model;
  std::string diff;
  auto cmp = [&](const std::string& key, const std::string& a, const std::string& b) {
    if (a != b) diff += (diff.empty() ? "" : "; ") + key + ": " + a + " in the checkpoint, " + b + " in the config";
  };
  auto s = [](int64_t v) { return std::to_string(v); };
  cmp("model.arch", theirs.arch, mine.arch);
  cmp("model.layers", s(theirs.layers), s(mine.layers));
  cmp("model.hidden", s(theirs.hidden), s(mine.hidden));
  cmp("model.heads", s(theirs.heads), s(mine.heads));
  cmp("MLP width (model.ffn_hidden)", s(theirs.ffn()), s(mine.ffn()));
  cmp("model.seq_len", s(theirs.seq_len), s(mine.seq_len));
  cmp("model.vocab_size", s(theirs.vocab_size), s(mine.vocab_size));
  if (diff.empty()) return;
  std::string tensor;
  for (const auto* params : stage_params)
    for (const Param& p : *params) {
      if (!tensor.empty()) break;
      if (!r.has(p.info.name))
        tensor = "tensor " + p.info.name + " " + shape_text(p.info.full_shape) + " is not in the checkpoint";
      else if (r.full_shape(p.info.name) != p.info.full_shape)
        tensor = "tensor " + p.info.name + " is " + shape_text(r.full_shape(p.info.name)) +
                 " in the checkpoint but " + shape_text(p.info.full_shape) + " in this model";
    }
  throw ckpt::CheckpointError("checkpoint " + r.step_dir() + " holds another model: " + diff +
                              (tensor.empty() ? "" : " (" + tensor + ")"));
}

}  // namespace

std::string latest_checkpoint(const std::string& dir) { return ckpt::newest_step(dir); }

// One entry of a rank's shard: a box (or a flat range of it) of a global tensor.
struct Checkpointer::Shard {
  struct Entry {
    std::string name;
    std::vector<int64_t> full_shape, offset, extent;
    int64_t flat_begin = -1;  // >= 0: elements [flat_begin, + t.numel()) of the box
    at::Tensor t;
  };
  std::vector<Entry> entries;
  std::vector<std::pair<std::string, std::string>> blobs;
  ckpt::Meta meta;
};

struct Checkpointer::PendingSave {
  int64_t step = 0;
  Shard shard;
  std::chrono::steady_clock::time_point copied;  // when training went on
  double copy_s = 0;                             // the copy to host memory (the step's cost)
  std::atomic<bool> done{false};
  std::string error;  // set by the writer before done
  double written_s = 0;
  std::thread writer;
};

void check_checkpoint_dir(const Config& cfg) {
  const auto& k = cfg.checkpoint;
  if (k.dir.empty()) return;
  const std::string latest = latest_checkpoint(k.dir);
  if (latest.empty()) return;
  if (!k.resume)
    throw ConfigError("checkpoint.dir = \"" + k.dir + "\" already holds a checkpoint (" + latest +
                      ") with checkpoint.resume = false: expected checkpoint.resume = true (--set checkpoint.resume=true) "
                      "to continue from it, or another directory");
  // Past the end: the config asks for fewer steps than were already trained
  // (resuming would train nothing and report a run that never happened).
  const int64_t step = std::stoll(latest.substr(latest.find('-') + 1));  // newest_step() checked the name
  if (step > cfg.training.steps)
    throw ConfigError("checkpoint.dir = \"" + k.dir + "\" holds " + latest + ", past training.steps = " +
                      std::to_string(cfg.training.steps) + ": expected training.steps >= " + std::to_string(step) +
                      " to continue from it, or another directory");
}

Checkpointer::Checkpointer(const Config& cfg, ProcessGroups& pgs, std::vector<std::vector<Param>*> stage_params,
                           DataParallel& dp)
    : cfg_(cfg), pgs_(pgs), stage_params_(std::move(stage_params)), dp_(dp) {
  if (!cfg_.checkpoint.dir.empty()) signals_ = std::make_unique<PreemptionSignals>();
  if (const char* delay = std::getenv("TRIDENT_ASYNC_SAVE_DELAY_MS"); delay && *delay) {
    char tail = 0;
    if (std::sscanf(delay, "%d%c", &async_delay_ms_, &tail) != 1 || async_delay_ms_ < 0 || !cfg_.checkpoint.async)
      throw std::runtime_error(std::string("TRIDENT_ASYNC_SAVE_DELAY_MS='") + delay +
                               "': expected milliseconds >= 0, with checkpoint.async = true");
  }
  const char* fault = std::getenv("TRIDENT_SAVE_FAULT");
  if (!fault || !*fault) return;
  long long step = -1;
  char tail = 0;
  if (std::sscanf(fault, "rank=%d,step=%lld%c", &fault_rank_, &step, &tail) != 2 || fault_rank_ < 0 || step < 1)
    throw std::runtime_error(std::string("TRIDENT_SAVE_FAULT='") + fault +
                             "': expected \"rank=R,step=S\" (R >= 0, S >= 1)");
  fault_step_ = step;
  const auto& k = cfg_.checkpoint;
  const bool saves = !k.dir.empty() && ((k.interval > 0 && step % k.interval == 0) || step == cfg_.training.steps ||
                                        step == cfg_.training.exit_after_steps);
  if (!saves || fault_rank_ >= pgs_.world_size())  // a fault that can never fire would pass a test silently
    throw std::runtime_error(std::string("TRIDENT_SAVE_FAULT='") + fault + "': this run saves no checkpoint at step " +
                             std::to_string(step) + " on rank " + std::to_string(fault_rank_));
}

std::string Checkpointer::layout_text() const {
  const auto& p = cfg_.parallel;
  std::string layers;
  for (int64_t n : chunk_layers(cfg_)) layers += (layers.empty() ? "" : ",") + std::to_string(n);
  return "tp=" + std::to_string(p.tp) + " pp=" + std::to_string(p.pp) + " dp=" + std::to_string(p.dp) +
         (p.ep > 1 ? " ep=" + std::to_string(p.ep) : std::string()) +
         (p.etp != 0 && p.etp != p.tp ? " etp=" + std::to_string(p.etp) : std::string()) +
         (p.cp > 1 ? " cp=" + std::to_string(p.cp) : std::string()) + " chunks=" +
         std::to_string(cfg_.schedule.chunks) + " zero=" + std::to_string(p.zero) + " pipeline_layers=[" + layers + "]";
}

int64_t Checkpointer::restore() {
  const auto& k = cfg_.checkpoint;
  const bool leader = pgs_.rank() == 0;
  if (k.dir.empty()) return 0;
  bool from_latest = false;
  const std::string latest = ckpt::newest_step(k.dir, &from_latest);
  if (!from_latest && !latest.empty() && leader)
    std::cout << "checkpoint.resume: " << k.dir << "/latest is missing; resuming from the newest complete step, "
              << latest << std::endl;
  if (latest.empty()) {
    if (k.resume && leader)
      std::cout << "checkpoint.resume: " << k.dir << " holds no checkpoint yet; starting at step 0" << std::endl;
    return 0;
  }
  if (!k.resume) throw std::logic_error("Checkpointer::restore: " + k.dir + " holds " + latest + " but resume is off "
                                        "(check_checkpoint_dir refuses such a run)");
  const auto start = std::chrono::steady_clock::now();
  ckpt::Reader r(k.dir);
  check_same_model(r, cfg_.model, stage_params_);
  for (auto* params : stage_params_) ckpt::load_params(r, *params);  // tied copies read their primary's entry

  AdamW& opt = dp_.optimizer();
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < opt.segments().size(); ++i) {
    const OptimSegment& seg = opt.segments()[i];
    for (auto& [prefix, state] : moments(opt)) {
      at::Tensor slice = at::empty(seg.param->tensor.sizes(), seg.param->tensor.options().requires_grad(false));
      ckpt::load_param(r, prefix + seg.param->info.name, seg.param->info, slice);
      (*state)[i].copy_(slice.view({-1}).narrow(0, seg.offset, seg.numel));
    }
  }
  const auto adam = r.meta().extra.find("adam_steps");
  if (adam == r.meta().extra.end())
    throw ckpt::CheckpointError("checkpoint " + r.step_dir() + " has no adam_steps in its metadata");
  opt.set_steps_taken(std::stoll(adam->second));
  // NOTE [consumed samples]; a checkpoint written before they were recorded consumed step x G.
  const int64_t G = cfg_.training.global_batch_size;
  const auto consumed = r.meta().extra.find("consumed_samples");
  restored_step_ = r.step();
  consumed_at_restore_ = consumed == r.meta().extra.end() ? r.step() * G : std::stoll(consumed->second);
  if (consumed_at_restore_ % G != 0)
    throw ckpt::CheckpointError("checkpoint " + r.step_dir() + " consumed " + std::to_string(consumed_at_restore_) +
                                " samples, not a multiple of training.global_batch_size = " + std::to_string(G) +
                                ": the run could not go on with whole global batches");

  // Same layout: every rank continues its own random stream. Another layout
  // has other ranks, so there is no stream to continue (it matters only with dropout).
  const bool same_layout = r.world() == pgs_.world_size() && r.meta().layout == layout_text();
  if (same_layout) {
    set_rng_state(r.blob(pgs_.rank(), "rng.cpu"));
    // A CUDA run's device generator too (dropout on CUDA draws from it); a
    // checkpoint written on the CPU has none, and its device stream starts afresh.
    const c10::Device dev = device();
    if (dev.is_cuda() && r.has_blob(pgs_.rank(), "rng.cuda")) set_rng_state(r.blob(pgs_.rank(), "rng.cuda"), dev);
  }
  if (leader) {
    std::cout << "checkpoint: resumed from " << r.step_dir() << " (step " << r.step() << ", saved under "
              << r.meta().layout << ") in " << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
              << " s" << std::endl;
    if (r.step() == cfg_.training.steps)
      std::cout << "checkpoint: step " << r.step() << " is already training.steps = " << cfg_.training.steps
                << ": nothing left to train" << std::endl;
    if (!same_layout && cfg_.model.dropout > 0)
      std::cout << "checkpoint: the layout changed, so dropout's random streams start afresh" << std::endl;
  }
  return r.step();
}

int64_t Checkpointer::data_step(int64_t step) const {
  return consumed_at_restore_ / cfg_.training.global_batch_size + (step - restored_step_);
}

c10::Device Checkpointer::device() const {
  for (const auto* params : stage_params_)
    if (!params->empty()) return params->front().tensor.device();
  return c10::Device(c10::kCPU);
}

// NOTE [preemption]
// A signal reaches the ranks at different moments (each in another part of its
// step), so after every step the ranks agree, with one all-reduce (max) over
// the world, on whether any received SIGTERM or SIGUSR1; all then save at the
// same step and stop. Only a run with a checkpoint.dir catches the signals
// (without one there is nothing to save, and the signal ends the process as
// before). The first rank of every node (LOCAL_RANK 0) leaves "<signal>
// <step>" as `preempted` in its launcher's progress directory
// (TRIDENT_PROGRESS_DIR), so every node's `trident launch` can report
// "preempted, checkpoint at step S" and none restarts the job; cmd_train
// exits with 128 + the signal's number, the status of a process it ended.
std::pair<int, bool> Checkpointer::agreed_signal_and_busy() const {
  const int mine = PreemptionSignals::received();
  const bool busy = pending_ && !pending_->done.load();
  if (pgs_.world_size() == 1) return {mine, busy};
  at::Tensor t = at::tensor({static_cast<double>(mine), busy ? 1.0 : 0.0}, at::kDouble);
  all_reduce(pgs_.world, t, c10d::ReduceOp::MAX);
  return {static_cast<int>(t[0].item<double>()), t[1].item<double>() > 0};
}

bool Checkpointer::after_step(int64_t steps_done) {
  const auto& t = cfg_.training;
  const auto& k = cfg_.checkpoint;
  const bool stop = t.exit_after_steps > 0 && steps_done == t.exit_after_steps && steps_done < t.steps;
  int sig = 0;
  if ((signals_ && steps_done < t.steps) || pending_) {
    bool busy = false;
    std::tie(sig, busy) = agreed_signal_and_busy();
    if (steps_done >= t.steps) sig = 0;  // the run ends here anyway, with its last save
    if (pending_ && !busy) finish_async_save();  // every writer is done: commit (NOTE [asynchronous checkpoints])
  }
  const bool last = steps_done == t.steps || stop || sig != 0;
  const bool due = !k.dir.empty() && ((k.interval > 0 && steps_done % k.interval == 0) || last);
  if (due && pending_) finish_async_save();  // at most one in flight
  if (due && k.async && !last)
    start_async_save(steps_done);
  else if (due)
    save(steps_done);
  if (sig != 0) {
    preempted_ = {sig, steps_done};
    if (pgs_.rank() == 0)
      std::cout << "preempted by " << preemption_signal_name(sig) << ": checkpoint at step " << steps_done << " of "
                << t.steps << "; continue with --set checkpoint.resume=true" << std::endl;
    // Every node's launcher reads its own progress directory: the first rank of each node writes it.
    const char* local = std::getenv("LOCAL_RANK");
    const char* dir = std::getenv("TRIDENT_PROGRESS_DIR");
    if (dir && *dir && (local ? std::string(local) == "0" : pgs_.rank() == 0))
      write_file_atomic(std::string(dir) + "/preempted",
                        std::string(preemption_signal_name(sig)) + " " + std::to_string(steps_done) + "\n");
    return true;
  }
  if (stop && pgs_.rank() == 0)
    std::cout << "training.exit_after_steps = " << t.exit_after_steps << ": stopping after step " << steps_done
              << " of " << t.steps << "; continue with --set checkpoint.resume=true" << std::endl;
  return stop;
}

Checkpointer::Shard Checkpointer::collect(int64_t steps_done, bool copy_to_host) const {
  dp_.wait_params();  // the step's overlapped gather (NOTE [overlapped parameter gather] in parallel/zero_optimizer.h)
  const Coords c = pgs_.layout().coords(pgs_.rank());
  AdamW& opt = dp_.optimizer();
  Shard shard;
  bool on_device = false;
  // A synchronous save writes the live tensors (the writer copies a device
  // tensor to the host itself); an asynchronous one needs a copy that the next
  // optimizer step cannot change: pinned host memory for a device tensor.
  const auto keep = [&](const at::Tensor& t) {
    if (!copy_to_host) return t.detach();
    on_device = on_device || t.is_cuda();
    at::Tensor h = at::empty(t.sizes(), t.options().device(at::kCPU).requires_grad(false).pinned_memory(t.is_cuda()));
    h.copy_(t.detach(), /*non_blocking=*/t.is_cuda());
    return h;
  };
  // The first replica holding a parameter writes it: dp rank 0, and for the
  // routed experts under expert parallelism the first of their expert-data-
  // parallel group, so each expert set is written once (NOTE [expert grid]).
  const auto first_holder = [&](const ParamInfo& info) {
    return info.expert ? pgs_.expert_dp.rank == 0 : pgs_.dp_cp.rank == 0;  // dense: dp and cp rank 0
  };
  for (const auto* params : stage_params_)
    for (const Param& p : *params)
      if (first_holder(p.info) && ckpt::stores_param(p.info, c.tp))
        shard.entries.push_back({p.info.name, p.info.full_shape, ckpt::param_offset(p.info), p.tensor.sizes().vec(),
                                 -1, keep(p.tensor)});
  for (size_t i = 0; i < opt.segments().size(); ++i) {
    const OptimSegment& seg = opt.segments()[i];
    const ParamInfo& info = seg.param->info;
    // Without ZeRO the replicas hold the same state; with it each its own shard.
    if (!(first_holder(info) || dp_.zero()) || !ckpt::stores_param(info, c.tp)) continue;
    for (auto& [prefix, state] : moments(opt))
      shard.entries.push_back({prefix + info.name, info.full_shape, ckpt::param_offset(info),
                               seg.param->tensor.sizes().vec(), seg.offset, keep((*state)[i])});
  }
  if (on_device) synchronize(device());  // the non-blocking copies have landed
  shard.blobs.emplace_back("rng.cpu", rng_state());
  if (device().is_cuda()) shard.blobs.emplace_back("rng.cuda", rng_state(device()));
  shard.meta.step = steps_done;
  shard.meta.config_toml = to_toml(cfg_);
  shard.meta.layout = layout_text();
  shard.meta.extra["adam_steps"] = std::to_string(opt.steps_taken());
  shard.meta.extra["consumed_samples"] = std::to_string(data_step(steps_done) * cfg_.training.global_batch_size);
  return shard;
}

void Checkpointer::write(const Shard& shard, int64_t steps_done) const {
  const int rank = pgs_.rank();
  ckpt::ShardWriter w(cfg_.checkpoint.dir, steps_done, rank, pgs_.world_size());
  for (const Shard::Entry& e : shard.entries) {
    if (e.flat_begin >= 0)
      ckpt::add_tensor_flat(w, e.name, e.full_shape, e.offset, e.extent, e.flat_begin, e.t);
    else
      ckpt::add_tensor(w, e.name, e.full_shape, e.offset, e.t);
  }
  for (const auto& [name, bytes] : shard.blobs) w.add_blob(name, bytes);
  w.set_meta(shard.meta);
  w.finish();
}

// After every rank wrote its shard (or failed to): NOTE [checkpoint commit].
void Checkpointer::commit_agreed(int64_t steps_done, const std::string& written_error,
                                 std::chrono::steady_clock::time_point start, const std::string& how) {
  const auto& k = cfg_.checkpoint;
  const int rank = pgs_.rank();
  std::string error = written_error;
  const std::string step_dir = k.dir + "/" + ckpt::step_dir_name(steps_done);
  agree(pgs_.world, error, "saving checkpoint " + step_dir);
  if (rank == 0) {
    try {
      ckpt::commit(k.dir, steps_done, pgs_.world_size(), static_cast<int>(k.keep));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(pgs_.world, error, "committing checkpoint " + step_dir);
  if (rank == 0 && how.empty())
    std::cout << "checkpoint: saved step " << steps_done << " to " << step_dir << " in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s" << std::endl;
  else if (rank == 0)
    std::cout << "checkpoint: saved step " << steps_done << " to " << step_dir << " " << how << std::endl;
}

// The fault hook of NOTE [checkpoint commit]: after this rank's shard is written, before the commit.
namespace {
void maybe_fault(int rank, int64_t steps_done, int fault_rank, int64_t fault_step) {
  if (rank != fault_rank || steps_done != fault_step) return;
  const std::string msg = "TRIDENT_SAVE_FAULT: rank " + std::to_string(rank) + " killing itself after writing its " +
                          "shard of step " + std::to_string(steps_done) + ", before the commit\n";
  const ssize_t n = ::write(STDERR_FILENO, msg.data(), msg.size());
  (void)n;
  ::raise(SIGKILL);
}
}  // namespace

void Checkpointer::save(int64_t steps_done) {
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  try {
    write(collect(steps_done, /*copy_to_host=*/false), steps_done);
  } catch (const std::exception& e) {
    error = e.what();
  }
  maybe_fault(pgs_.rank(), steps_done, fault_rank_, fault_step_);
  commit_agreed(steps_done, error, start, "");
}

void Checkpointer::start_async_save(int64_t steps_done) {
  const auto start = std::chrono::steady_clock::now();
  auto p = std::make_unique<PendingSave>();
  p->step = steps_done;
  p->shard = collect(steps_done, /*copy_to_host=*/true);
  p->copied = std::chrono::steady_clock::now();
  p->copy_s = std::chrono::duration<double>(p->copied - start).count();
  PendingSave* raw = p.get();
  const int rank = pgs_.rank(), delay = async_delay_ms_;
  const int fault_rank = fault_rank_;
  const int64_t fault_step = fault_step_;
  // The writer touches only its own copy (raw->shard) and the files; it runs no collective.
  raw->writer = std::thread([this, raw, rank, delay, fault_rank, fault_step] {
    const auto began = std::chrono::steady_clock::now();
    if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    try {
      write(raw->shard, raw->step);
    } catch (const std::exception& e) {
      raw->error = e.what();
    }
    raw->shard = Shard();  // the host copy is not needed any more
    maybe_fault(rank, raw->step, fault_rank, fault_step);
    raw->written_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    raw->done.store(true);
  });
  pending_ = std::move(p);
  if (pgs_.rank() == 0)
    std::cout << "checkpoint: step " << steps_done << " copied to host memory in " << pending_->copy_s
              << " s; writing it in the background" << std::endl;
}

void Checkpointer::finish_async_save() {
  PendingSave& p = *pending_;
  p.writer.join();
  const double behind = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.copied).count();
  const int64_t step = p.step;
  const std::string error = p.error;
  const auto copied = p.copied;
  char how[160];
  std::snprintf(how, sizeof how, "asynchronously: the copy to host memory took %.3f s of training, the write %.3f s "
                "behind it, committed %.3f s after the copy", p.copy_s, p.written_s, behind);
  pending_.reset();
  commit_agreed(step, error, copied, how);
}

Checkpointer::~Checkpointer() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
}

}  // namespace trident
