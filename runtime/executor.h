// Runs one pipeline rank's action list against its stages (models/common/model.h): forwards and
// backwards (full, or split into I and W), with activations and gradients moved
// over the PP group by c10d send/recv. The communication actions between two
// compute actions go out as one group (batch_isend_irecv: coalesced under
// NCCL), in list order, when the list reaches the next compute; that compute
// waits for the group holding its input (NOTE [pair order] in
// schedules/pair_order.h says why this, and only this, is safe under NCCL).
// Every action starts and ends in Executor::run_action(), the one place a
// timeline recorder hooks in.
//
// NOTE [pipeline dtype]
// Activations and their gradients cross a pipeline boundary in the stages'
// boundary dtype (Stage::boundary_dtype, set from parallel.pipeline_dtype as
// Megatron-LM's pipeline_dtype: "auto" = the compute dtype). Receive buffers
// are allocated in it and a stage that sends anything else is a logic error.
// Under bf16 the hidden state is bf16 already, so sending it as it is halves
// the bytes on the wire and in the boundary buffers (peak_boundary_bytes)
// with the same values: bf16 -> fp32 -> bf16 is exact, so "fp32" and "bf16"
// give bit-identical runs. bf16 with fp32 training is refused by the config
// check: it would round the activations at stage edges only, so an fp32 run's
// results would depend on its pipeline layout.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "core/cpu_memory.h"
#include "models/common/model.h"
#include "parallel/grad_observer.h"
#include "parallel/process_groups.h"
#include "parallel/weight_grad_queue.h"
#include "schedules/action.h"
#include "schedules/progress.h"
#include "schedules/simulate.h"

namespace trident {

struct MicroBatch {
  at::Tensor input;    // (mbs, seq) int64 token ids
  at::Tensor targets;  // (mbs, seq) int64 next tokens
  // The packed samples' documents (NOTE [packed documents] in
  // models/common/document_attention.h); none for undivided samples.
  std::shared_ptr<const Documents> documents;
  // Its loss mask (NOTE [token-weighted loss] in models/common/loss_mask.h), handed to the last
  // stage; none: each micro-batch's mean loss.
  std::shared_ptr<const LossMask> loss_mask;
};

struct ExecutorStats {
  // Sum of micro-batch mean losses (last stage only; 0 elsewhere), a double
  // scalar on the stages' device: read back only when asked (a read per step
  // would stall a GPU's queue on steps that do not log).
  at::Tensor loss;
  double loss_sum() const;  // reads it (NOTE [host reads])
  int peak_inflight = 0;             // most micro-batches with live activations at once
  // Weight-gradient computations the W actions ran (deferred by their I):
  // 0 under a schedule without I/W, and 0 if deferral silently failed.
  int64_t deferred_weight_grads = 0;
  // Most bytes held at once in tensors that cross a pipeline boundary: stage
  // inputs and outputs (not the first stage's token ids nor the last one's
  // loss) and input gradients to send; in parallel.pipeline_dtype.
  int64_t peak_boundary_bytes = 0;
  // Most bytes held by in-flight micro-batches' activations at once: each
  // forward's growth in live CPU bytes (core/cpu_memory.h), held until
  // its backward. -1 when the memory meter is not installed.
  int64_t peak_activation_bytes = -1;
  // Most live CPU bytes (core/cpu_memory.h) above the step's start, sampled
  // after every action: everything the step holds at once, activations,
  // received and sent tensors and the communication groups' references
  // included. -1 when the memory meter is not installed.
  int64_t peak_step_bytes = -1;
  // Overlapped pairs run with their two halves on two threads (0 unless set_overlap).
  int overlapped_pairs = 0;
};

class Executor {
 public:
  // stages[c] is this rank's chunk c, virtual stage map.stage_of(pp.rank, c).
  // `device` is where the stages compute: received activations and gradients
  // land there (the batches' tensors are expected there too).
  Executor(std::vector<Stage*> stages, const Group& pp, const sched::StageMap& map, int64_t micro_batch_size,
           c10::Device device = c10::Device(c10::kCPU));

  // Runs this rank's list for one step. `batch(mb)` gives micro-batch mb's
  // data; each micro-batch loss is scaled by `loss_scale` before its backward.
  // `observer`, when given, hears when each chunk's gradients become final:
  // grads_final(c) at the chunk's REDUCE_GRAD, final_backward_begins(c)
  // before the last B or I of chunk c ahead of that REDUCE_GRAD. Throws
  // std::logic_error naming the chunk if the list lacks a chunk's REDUCE_GRAD
  // (lists from sched::generate() and the schedule-file loaders have them).
  // Every action kind of the IR is run; none is skipped.
  ExecutorStats run(const sched::ActionList& actions, const std::function<MicroBatch(int)>& batch,
                    double loss_scale, GradObserver* observer = nullptr);

  // Forward only (evaluation, no autograd): every micro-batch through every
  // local chunk in virtual-stage order (sched::forward_only_actions). Returns
  // the summed loss on the last stage, 0 elsewhere: a double scalar on the
  // stages' device, as ExecutorStats::loss.
  at::Tensor forward_only(int microbatches, const std::function<MicroBatch(int)>& batch);

  // The last run()'s measured timeline, in list order: a compute spans its
  // first to last op (after its inputs arrived), a RECV from when its group
  // was posted to when its data was there (its consumer waited for it), a
  // SEND is the instant it was queued. Times are steady-clock microseconds (comparable
  // between processes of one host); run_span() is run()'s own begin and end.
  // Recording costs two clock marks per action (see tests/torch_unit/test_timeline.cpp).
  // On CUDA the marks are events on the compute stream, so the times are the
  // device's (NOTE [device time] in parallel/backend.h) and reading them
  // waits for the step's work; on the CPU they are host clock reads.
  void set_recording(bool on) { record_ = on; }
  const std::vector<sched::TimedAction>& timeline() const {
    resolve_timeline();
    return timeline_;
  }
  std::pair<double, double> run_span() const {
    resolve_timeline();
    return run_span_;
  }
  // Overlapped pairs (NOTE [overlapped pairs] in schedules/overlap.h) run
  // together: the backward on a second thread while this one runs the
  // forward and posts its sends. Off, a pair runs as its F, the F's sends and
  // its B or I, one after the other (the same numbers). Under a pair the
  // operation counts' phase (core/op_count.h) and the forward's activation
  // bytes are the pair's together: two threads share the counters.
  void set_overlap(bool on) { overlap_ = on; }
  // Packed documents: every stage's forward (not only the first's and the
  // last's) reads its micro-batch and is handed its documents before it runs
  // (Stage::set_documents).
  void set_packed_documents(bool on) { packed_ = on; }
  // Where this rank reports its position for hang diagnosis (schedules/progress.h).
  sched::Progress& progress() { return progress_; }

 private:
  struct Slot {  // one (micro-batch, chunk)
    at::Tensor input, output, grad_in;
    at::Tensor recv_act_buf, recv_grad_buf;
    int recv_act_group = -1, recv_grad_group = -1;  // index in groups_ of the group receiving them
    WeightGradQueue deferred;
    int64_t activation_bytes = 0;  // live bytes the forward left behind
    int recv_act_entry = -1, recv_grad_entry = -1;     // their RECV's index in timeline_
    // NOTE [pipeline side values] (models/common/model.h), when the stages have them:
    std::shared_ptr<SideValues> side;         // this micro-batch's at this chunk, forward to backward
    at::Tensor recv_act_side, recv_grad_side;  // received beside the activation and the gradient
    at::Tensor grad_side;                      // the totals to send back beside grad_in
  };
  // One group of point-to-point operations (the communication between two computes).
  struct CommGroup {
    std::vector<P2POp> ops;               // their tensors stay alive until the group is done
    std::vector<sched::Action> actions;   // ops[k] carries actions[k] (for errors)
    std::vector<c10::intrusive_ptr<c10d::Work>> works;  // set when posted
    bool done = false;
  };
  void run_action(const sched::Action& a, const std::function<MicroBatch(int)>& batch, double loss_scale,
                  ExecutorStats& stats);
  // After action `a`: its slot released when nothing of it is left, the step's peaks sampled.
  void settle(const sched::Action& a, ExecutorStats& stats);
  // Runs a list: run() and forward_only() both.
  void run_list(const sched::ActionList& actions, const std::function<MicroBatch(int)>& batch, double loss_scale,
                ExecutorStats& stats, GradObserver* observer, bool forward_only);
  void post_recv(const sched::Action& a);
  // Posts the operations queued since the last compute as one group.
  void post_group();
  void wait_group(int index);
  // Blocks until the inputs of compute action `a` (list index i) have arrived.
  void wait_inputs(const sched::Action& a, int i);
  void record_recv(const sched::Action& a);
  void forward(const sched::Action& a, const std::function<MicroBatch(int)>& batch);
  void backward(const sched::Action& a, double loss_scale, bool defer_weights);
  void backward_slot(Slot& s, const sched::Action& a, double loss_scale, bool defer_weights);
  // The pair of the F at actions[i] and its partner at actions[j] (inputs already in).
  void run_pair(const sched::ActionList& actions, size_t i, size_t j, const std::function<MicroBatch(int)>& batch,
                double loss_scale, ExecutorStats& stats);
  void send(const sched::Action& a);
  // Releases the posted groups that completed by themselves (NOTE [sent tensors]).
  void release_completed_groups();
  void finish_groups();
  int stage(int chunk) const { return map_.stage_of(pp_.rank, chunk); }
  bool is_first(int chunk) const { return stage(chunk) == 0; }
  bool is_last(int chunk) const { return stage(chunk) == map_.virtual_stages() - 1; }
  // Per chunk: list index of its REDUCE_GRAD and of its last B/I before it.
  void find_reduce_points(const sched::ActionList& actions, std::vector<size_t>* reduce,
                          std::vector<size_t>* last_backward) const;
  // Tag of the transfer of micro-batch mb's activation (or gradient) into virtual stage to_stage.
  int tag(bool grad, int mb, int to_stage) const;
  // The side values' tag: the hidden state's with this bit set (NOTE [pipeline side values]).
  static constexpr int kSideTag = 1 << 29;
  int64_t side_width() const { return stages_.front()->side_width(); }
  void track(ExecutorStats& stats);
  void reset_loss();

  std::vector<Stage*> stages_;
  const Group& pp_;
  sched::StageMap map_;  // virtual stages and peers
  int64_t mbs_;
  c10::Device device_;
  // Sum of the last stage's micro-batch losses as a double on device_, read
  // back once per run (a read per micro-batch would stall a GPU's queue).
  at::Tensor loss_acc_;
  std::map<std::pair<int, int>, Slot> slots_;
  CommGroup queued_;               // the group being gathered, posted at the next compute
  std::vector<CommGroup> groups_;  // this run's posted groups
  bool record_ = true;
  bool overlap_ = false;
  bool packed_ = false;  // set_packed_documents
  // The thread of overlapped pairs' backward halves (run_pair), started at the first pair.
  class PairWorker {
   public:
    explicit PairWorker(int threads);  // runs with this intra-op thread count
    ~PairWorker();
    void start(std::function<void()> job);
    void finish();  // waits for the job; rethrows its error

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::function<void()> job_;
    bool done_ = false, stop_ = false;
    std::exception_ptr failed_;
    std::thread thread_;  // last: started once the above exist
  };
  std::unique_ptr<PairWorker> worker_;
  // The timeline as clock marks, turned into times when first read.
  void resolve_timeline() const;
  StepClock clock_;
  std::vector<std::pair<int, int>> marks_;  // per timeline_ entry: its start and end mark (-1: none yet)
  std::pair<int, int> span_marks_{-1, -1};
  mutable bool resolved_ = true;
  int64_t step_base_bytes_ = -1;  // live CPU bytes when the step began (peak_step_bytes)
  size_t first_open_ = 0;         // groups_ before it are done (release_completed_groups)
  mutable std::vector<sched::TimedAction> timeline_;
  mutable std::pair<double, double> run_span_{0, 0};
  sched::Progress progress_;
};

}  // namespace trident
