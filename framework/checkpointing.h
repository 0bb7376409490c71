// Training checkpoints: what the trainer saves every checkpoint.interval steps
// and at the end of a run, and loads on checkpoint.resume, on top of the
// sharded store (checkpoint/checkpoint_store.h, NOTE [checkpoint format]).
//
// NOTE [training checkpoint contents]
//   <param name>                 each parameter slice under its global name with its offset in
//                                the full tensor (dp rank 0 writes; TP-replicated ones from tp
//                                rank 0; a tied copy never: it is restored from its primary's)
//   optim.exp_avg.<param name>   AdamW's moments, in the parameter's own full-tensor coordinates
//   optim.exp_avg_sq.<name>      (a ZeRO-1 shard is a flat range of the rank's slice), so any
//                                layout (zero on or off, other tp/pp/dp/chunks) reads its part
//   meta.step                    optimizer steps done; also the LR-schedule position (lr_at) and
//                                the data position: a batch is a pure function of (seed, step)
//                                (datasets/dataset.h), so the step is all of it
//   meta.extra.adam_steps        AdamW's update count t (its bias corrections)
//   blob rng.cpu (per rank)      the default CPU generator (dropout); restored on the same layout
//   meta.config_toml, layout     the effective config and "tp=.. pp=.. dp=.. ..."
// Loading checks the model keys first (another model is an error naming the key, and a tensor
// with both its shapes), then reads every slice this rank holds from whichever shards cover it.

// NOTE [checkpoint commit]
//   Every rank writes its shard (temp files, fsync, rename); then all ranks
//   agree over the world that every shard is written (a rank that failed makes
//   every rank throw rather than hang), rank 0 commits (manifest, then moves
//   `latest`, then prunes to checkpoint.keep), and all agree again that the
//   commit happened. A rank killed anywhere before the commit leaves `latest`
//   at the previous complete step. Rank 0 checks every rank's files, so on
//   several nodes checkpoint.dir must be one shared filesystem. TRIDENT_SAVE_FAULT="rank=R,step=S" (tests
//   only, read in one place: the Checkpointer's constructor) SIGKILLs rank R
//   right after it wrote its shard of step S, before the commit.
//
// NOTE [asynchronous checkpoints]
//   With checkpoint.async, an interval save copies this rank's shard (parameters,
//   AdamW moments, RNG states, metadata) to host memory (pinned, one device
//   synchronisation, on CUDA) and returns; a background thread writes it (temp
//   files, fsync, rename) while training goes on. No collective runs on that
//   thread: after every step the ranks agree, in the one all-reduce that also
//   carries the preemption signal, whether every rank's writer is done, and only
//   then agree on errors and rank 0 commits as a synchronous save does (NOTE
//   [checkpoint commit]). At most one save is in flight: one that falls due while
//   the previous is being written waits for it. The run's last save (training.steps,
//   exit_after_steps, preemption) finishes the one in flight, then writes
//   synchronously. A rank killed mid-save leaves that step uncommitted, so `latest`
//   names the previous complete one. TRIDENT_SAVE_FAULT fires on the writer thread;
//   TRIDENT_ASYNC_SAVE_DELAY_MS (tests only) delays the writer, so a test sees
//   training go on past the copy.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "framework/preemption.h"
#include "parallel/data_parallel.h"
#include "core/param.h"
#include "parallel/process_groups.h"

namespace trident {

// Before any process group exists: throws ConfigError when checkpoint.dir
// already holds a checkpoint and checkpoint.resume is off (a fresh run would
// otherwise interleave its saves with another run's).
void check_checkpoint_dir(const Config& cfg);

class Checkpointer {
 public:
  // stage_params[c]: the parameters of this rank's stage c (Stage::params()).
  Checkpointer(const Config& cfg, ProcessGroups& pgs, std::vector<std::vector<Param>*> stage_params, DataParallel& dp);

  // At start-up. With checkpoint.resume and a checkpoint in checkpoint.dir:
  // loads it (any layout) and returns its step; otherwise returns 0.
  // check_checkpoint_dir() has refused a fresh run into a used directory.
  int64_t restore();

  // After optimizer step `steps_done` (1-based) and its logging: saves when
  // due (every checkpoint.interval steps, at training.steps, at
  // training.exit_after_steps, on preemption: NOTE [preemption]). Returns true
  // when the run should stop here.
  bool after_step(int64_t steps_done);

  // NOTE [consumed samples] A checkpoint records the samples the run has consumed
  // (consumed_samples in its metadata, as Megatron's checkpoints do), and a resumed
  // run reads on from there: optimizer step `step` reads the data order's global
  // batch data_step(step) = (consumed at the restore + (step - restored step) x G) / G,
  // which is `step` itself unless training.global_batch_size changed. restore()
  // throws when the consumed samples are not a multiple of the new G.
  int64_t data_step(int64_t step) const;

  // The signal that preempted the run (SIGTERM, SIGUSR1) and the step of its
  // checkpoint; {0, 0} when none did.
  std::pair<int, int64_t> preempted() const { return preempted_; }

  // Joins an asynchronous save still being written (a run that ends by an
  // exception); it stays uncommitted.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // One rank's share of a step, as the writer adds it (NOTE [asynchronous checkpoints]).
  struct Shard;
  struct PendingSave;

 private:
  // Where this rank's parameters live (training.device): whose generator is saved besides the CPU's.
  c10::Device device() const;
  void save(int64_t steps_done);
  // NOTE [asynchronous checkpoints]
  Shard collect(int64_t steps_done, bool copy_to_host) const;
  void write(const Shard& shard, int64_t steps_done) const;  // the shard's files, then TRIDENT_SAVE_FAULT
  // how: "" (a synchronous save begun at `start`: its time is printed) or how an asynchronous one went.
  void commit_agreed(int64_t steps_done, const std::string& error, std::chrono::steady_clock::time_point start,
                     const std::string& how);
  void start_async_save(int64_t steps_done);
  void finish_async_save();  // waits for the writer, then agrees and commits
  std::string layout_text() const;

  const Config& cfg_;
  ProcessGroups& pgs_;
  std::vector<std::vector<Param>*> stage_params_;
  DataParallel& dp_;
  int64_t restored_step_ = 0, consumed_at_restore_ = 0;  // NOTE [consumed samples]
  // The preemption signal any rank received (0: none) and whether any rank's
  // asynchronous writer is still busy: one all-reduce over the world.
  std::pair<int, bool> agreed_signal_and_busy() const;
  std::unique_ptr<PendingSave> pending_;  // NOTE [asynchronous checkpoints]
  int async_delay_ms_ = 0;                 // TRIDENT_ASYNC_SAVE_DELAY_MS
  std::unique_ptr<PreemptionSignals> signals_;  // with a checkpoint.dir only
  std::pair<int, int64_t> preempted_{0, 0};
  int fault_rank_ = -1;  // TRIDENT_SAVE_FAULT
  int64_t fault_step_ = -1;
};

// The step a resume loads from `dir` ("step-00000100"; ckpt::newest_step), or "" when it holds none.
std::string latest_checkpoint(const std::string& dir);

}  // namespace trident
