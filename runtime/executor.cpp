// Pipeline executor: see executor.h. Communication follows NOTE [pair order]
// (schedules/pair_order.h), which the validator checks every list against:
// the sends and receives between two computes are posted as one group when
// the next compute is reached, in list order; a compute waits for the group
// that received its input; every group is waited for by the end of the step.
#include "runtime/executor.h"

#include <cmath>
#include <exception>
#include <stdexcept>
#include <thread>
#include <utility>

#include <ATen/Parallel.h>

#include "core/host_read.h"
#include "core/op_count.h"
#include "parallel/expert_parallel.h"
#include "schedules/generators.h"

namespace trident {

using sched::Action;
using sched::ActionKind;

Executor::Executor(std::vector<Stage*> stages, const Group& pp, const sched::StageMap& map,
                   int64_t micro_batch_size, c10::Device device)
    : stages_(std::move(stages)),
      pp_(pp),
      map_(map),
      mbs_(micro_batch_size),
      device_(device),
      clock_(device),
      progress_(pp.global(pp.rank)) {
  if (stages_.empty()) throw std::logic_error("Executor needs at least one stage");
  if (map_.pipeline_ranks != pp.size() || map_.chunks != static_cast<int>(stages_.size()))
    throw std::logic_error("Executor: stage map is for p=" + std::to_string(map_.pipeline_ranks) + " v=" +
                           std::to_string(map_.chunks) + " but the pipeline group has " +
                           std::to_string(pp.size()) + " ranks and this rank " + std::to_string(stages_.size()) +
                           " stages");
}

int Executor::tag(bool grad, int mb, int to_stage) const {
  return (mb * 2 + (grad ? 1 : 0)) * map_.virtual_stages() + to_stage;
}

void Executor::post_recv(const Action& a) {
  Slot& s = slots_[{a.mb, a.chunk}];
  const bool grad = a.kind == ActionKind::RECV_B;
  const int peer = sched::peer_rank(map_, pp_.rank, a);
  at::Tensor& buf = grad ? s.recv_grad_buf : s.recv_act_buf;
  if (buf.defined()) return;     // delivered locally already
  if (peer == pp_.rank) return;  // same rank (p = 1, the turn of a V): send() hands the tensor over
  buf = at::empty(grad ? stages_[a.chunk]->output_shape(mbs_) : stages_[a.chunk]->input_shape(mbs_),
                  at::TensorOptions().dtype(stages_[a.chunk]->boundary_dtype()).device(device_));
  (grad ? s.recv_grad_group : s.recv_act_group) = static_cast<int>(groups_.size());  // the group being gathered
  queued_.ops.push_back({false, buf, peer, tag(grad, a.mb, stage(a.chunk))});
  queued_.actions.push_back(a);
  if (const int64_t n = side_width(); n > 0) {  // NOTE [pipeline side values]: right after the hidden state
    at::Tensor& side = grad ? s.recv_grad_side : s.recv_act_side;
    side = at::empty({n}, at::TensorOptions().dtype(at::kFloat).device(device_));
    queued_.ops.push_back({false, side, peer, tag(grad, a.mb, stage(a.chunk)) | kSideTag});
    queued_.actions.push_back(a);
  }
}

void Executor::post_group() {
  if (queued_.ops.empty()) return;
  queued_.works = batch_isend_irecv(pp_, queued_.ops);
  groups_.push_back(std::move(queued_));
  queued_ = CommGroup{};
}

void Executor::wait_group(int index) {
  CommGroup& g = groups_.at(static_cast<size_t>(index));
  if (g.done) return;
  std::string what = "pipeline group {";
  for (size_t i = 0; i < g.ops.size(); ++i)
    if ((g.ops[i].tag & kSideTag) == 0)  // a side tensor goes with the op before it
      what += std::string(i ? ", " : "") + (g.ops[i].send ? "send " : "receive ") + sched::to_token(g.actions[i]) +
            (g.ops[i].send ? " to" : " from") + " pipeline rank " + std::to_string(g.ops[i].peer);
  what += "}";
  for (auto& w : g.works) wait_work(pp_, w, what.c_str(), -1);
  g = CommGroup{};
  g.done = true;
}

void Executor::record_recv(const Action& a) {
  Slot& s = slots_[{a.mb, a.chunk}];
  const bool grad = a.kind == ActionKind::RECV_B;
  const int group = grad ? s.recv_grad_group : s.recv_act_group;
  const bool pending = group >= 0;  // not waited for yet
  const int t = clock_.mark();
  // Pending: its consumer's wait fills in the end. Otherwise the data is here
  // already (a hand-over between chunks of this rank).
  timeline_.push_back({a, 0, 0});
  marks_.push_back({t, pending ? -1 : t});
  if (group >= 0) (grad ? s.recv_grad_entry : s.recv_act_entry) = static_cast<int>(timeline_.size()) - 1;
}

void Executor::wait_inputs(const Action& a, int i) {
  const bool grad = a.kind != ActionKind::F;
  if (grad ? is_last(a.chunk) : is_first(a.chunk)) return;
  auto it = slots_.find({a.mb, a.chunk});
  if (it == slots_.end()) return;  // the compute itself reports the missing input
  Slot& s = it->second;
  int& group = grad ? s.recv_grad_group : s.recv_act_group;
  if (group < 0) return;  // a local hand-over
  const Action recv{grad ? ActionKind::RECV_B : ActionKind::RECV_F, a.mb, a.chunk};
  if (progress_.enabled()) progress_.wait(i, sched::to_token(recv), pp_.global(sched::peer_rank(map_, pp_.rank, recv)));
  wait_group(group);
  group = -1;
  const int entry = grad ? s.recv_grad_entry : s.recv_act_entry;
  if (entry >= 0 && record_) marks_[static_cast<size_t>(entry)].second = clock_.mark();
}

void Executor::send(const Action& a) {
  Slot& s = slots_.at({a.mb, a.chunk});
  const bool grad = a.kind == ActionKind::SEND_B;
  const int peer = sched::peer_rank(map_, pp_.rank, a);
  const sched::Action into = sched::counterpart(map_, pp_.rank, a);  // the peer's RECV
  const int to_stage = map_.stage_of(peer, into.chunk);
  at::Tensor t = (grad ? s.grad_in : s.output.detach()).contiguous();
  if (grad) s.grad_in.reset();
  if (t.scalar_type() != stages_[a.chunk]->boundary_dtype())  // the peer receives into a buffer of that dtype
    throw std::logic_error(sched::to_token(a) + " sends " + std::string(c10::toString(t.scalar_type())) +
                           " but the stage's boundary dtype is " +
                           c10::toString(stages_[a.chunk]->boundary_dtype()) + " (NOTE [pipeline dtype])");
  at::Tensor side;  // NOTE [pipeline side values]
  if (side_width() > 0) {
    if (grad)
      side = std::exchange(s.grad_side, at::Tensor());
    else if (s.side)
      side = s.side->values.clone();  // its backward writes the totals into the stage's own
    else  // evaluation: nothing is counted, but the receiver expects the tensor
      side = at::zeros({side_width()}, at::TensorOptions().dtype(at::kFloat).device(device_));
    if (!side.defined()) throw std::logic_error(sched::to_token(a) + " has no side values to send beside its tensor");
  }
  if (peer == pp_.rank) {  // that virtual stage lives here too: hand over directly
    Slot& dst = slots_[{a.mb, into.chunk}];
    (grad ? dst.recv_grad_buf : dst.recv_act_buf) = t.clone();
    if (side.defined()) (grad ? dst.recv_grad_side : dst.recv_act_side) = side.clone();
    return;
  }
  queued_.ops.push_back({true, t, peer, tag(grad, a.mb, to_stage)});
  queued_.actions.push_back(a);
  if (side.defined()) {
    queued_.ops.push_back({true, side, peer, tag(grad, a.mb, to_stage) | kSideTag});
    queued_.actions.push_back(a);
  }
}

// NOTE [sent tensors] A group's tensors (what it sends, where it receives)
// are referenced by it until it is done. A group whose receive a compute
// consumes is waited for then; one that only sends is waited for by nobody
// before the end of the step, and would keep every activation and gradient
// it sent alive until then, growing with the micro-batches. Before each
// compute the groups that have completed by themselves are released: a
// non-blocking look (Work::isCompleted), so nothing waits earlier or in
// another order than NOTE [pair order] says. Under NCCL a send is complete
// once its kernel has run on the communication stream, after which the
// caching allocator may reuse its memory.
void Executor::release_completed_groups() {
  for (size_t i = first_open_; i < groups_.size(); ++i) {
    CommGroup& g = groups_[i];
    if (g.done) continue;
    bool complete = true;
    for (const auto& w : g.works) complete = complete && w->isCompleted();
    if (complete) wait_group(static_cast<int>(i));  // returns at once; reports a failed one
  }
  while (first_open_ < groups_.size() && groups_[first_open_].done) ++first_open_;
}

void Executor::finish_groups() {
  post_group();
  for (size_t i = 0; i < groups_.size(); ++i) wait_group(static_cast<int>(i));
  groups_.clear();
}

void Executor::forward(const Action& a, const std::function<MicroBatch(int)>& batch) {
  Slot& s = slots_[{a.mb, a.chunk}];
  const bool first = is_first(a.chunk), last = is_last(a.chunk);
  MicroBatch data;
  if (first || last || packed_) data = batch(a.mb);
  if (first) {
    s.input = data.input;
  } else {
    if (!s.recv_act_buf.defined() || s.recv_act_group >= 0)
      throw std::logic_error("F" + std::to_string(a.mb) + " on chunk " + std::to_string(a.chunk) +
                             " has no received activation (schedule lacks its RECV_F)");
    s.input = s.recv_act_buf.requires_grad_(at::GradMode::is_enabled());
    s.recv_act_buf.reset();
  }
  Stage& stage = *stages_[a.chunk];
  // NOTE [pipeline side values]: a training forward adds to what the previous stage sent.
  if (const int64_t n = side_width(); n > 0) {
    if (at::GradMode::is_enabled()) {
      s.side = std::make_shared<SideValues>();
      if (first) {
        s.side->values = at::zeros({n}, at::TensorOptions().dtype(at::kFloat).device(device_));
      } else {
        if (!s.recv_act_side.defined())
          throw std::logic_error("F" + std::to_string(a.mb) + " on chunk " + std::to_string(a.chunk) +
                                 " has no received side values");
        s.side->values = std::exchange(s.recv_act_side, at::Tensor());
      }
      stage.set_side(s.side);
    } else {
      s.recv_act_side.reset();
      stage.set_side(nullptr);
    }
  }
  const int64_t before = live_cpu_bytes();
  const ExpertMicroBatch names(a.mb);  // NOTE [all-to-all order]
  WeightGradScope scope(&s.deferred);  // the graph keeps this micro-batch's W queue (NOTE [I/W split])
  if (packed_) stage.set_documents(data.documents);
  if (last && data.loss_mask) stage.set_loss_mask(data.loss_mask);
  s.output = stage.forward(s.input, last ? data.targets : at::Tensor());
  if (packed_) stage.set_documents(nullptr);  // the layers that read them hold their own reference
  if (last && data.loss_mask) stage.set_loss_mask(nullptr);
  if (s.side) {
    stage.set_side(nullptr);
    if (last) s.side->sealed = true;  // the micro-batch's totals
  }
  s.activation_bytes = before < 0 ? -1 : live_cpu_bytes() - before;
  // The double sum of float losses, added in micro-batch order: the same
  // doubles a host-side `+= item<double>()` gives.
  if (last) loss_acc_.add_(s.output.detach().reshape({}).to(at::kDouble));
}

void Executor::backward(const Action& a, double loss_scale, bool defer_weights) {
  backward_slot(slots_.at({a.mb, a.chunk}), a, loss_scale, defer_weights);
}

// Touches only `s` (no map of slots): a pair runs it on a second thread.
void Executor::backward_slot(Slot& s, const Action& a, double loss_scale, bool defer_weights) {
  if (!s.output.defined())
    throw std::logic_error("backward of micro-batch " + std::to_string(a.mb) + " before its forward");
  s.deferred.arm(defer_weights);  // read by the backward functions, on whichever thread runs them
  if (s.side && !is_last(a.chunk)) {  // NOTE [pipeline side values]: the totals, before the backward reads them
    if (!s.recv_grad_side.defined())
      throw std::logic_error("B" + std::to_string(a.mb) + " has no received side values");
    s.side->values.copy_(std::exchange(s.recv_grad_side, at::Tensor()));  // in place: the layers hold the tensor
    s.side->sealed = true;
  }
  if (is_last(a.chunk)) {
    (s.output * loss_scale).backward();
  } else {
    if (!s.recv_grad_buf.defined() || s.recv_grad_group >= 0)
      throw std::logic_error("B" + std::to_string(a.mb) + " has no received gradient (schedule lacks its RECV_B)");
    s.output.backward(s.recv_grad_buf);
    s.recv_grad_buf.reset();
  }
  if (!is_first(a.chunk)) s.grad_in = s.input.grad();
  if (s.side && !is_first(a.chunk)) s.grad_side = s.side->values;
  s.side.reset();
  s.input.reset();
  s.output.reset();
}

void Executor::reset_loss() { loss_acc_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_)); }

void Executor::resolve_timeline() const {
  if (resolved_) return;
  const std::vector<double> t = clock_.times_us();  // NOTE [device time]: on CUDA, waits for the step
  auto at = [&](int mark) { return mark >= 0 && static_cast<size_t>(mark) < t.size() ? t[static_cast<size_t>(mark)] : NAN; };
  for (size_t i = 0; i < timeline_.size(); ++i) {
    timeline_[i].start = at(marks_[i].first);
    timeline_[i].end = at(marks_[i].second);
    if (std::isnan(timeline_[i].end)) timeline_[i].end = timeline_[i].start;  // a receive nobody waited for (cannot happen in a valid list)
  }
  run_span_ = {at(span_marks_.first), at(span_marks_.second)};
  resolved_ = true;
}

double ExecutorStats::loss_sum() const { return read_scalar(loss, "pipeline loss"); }

void Executor::track(ExecutorStats& stats) {
  int inflight = 0;
  int64_t bytes = 0, activations = 0;
  auto add = [&bytes](const at::Tensor& t) {
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  };
  for (const auto& [key, s] : slots_) {
    if (s.output.defined()) ++inflight, activations += s.activation_bytes;
    // What crosses a boundary: not the first stage's token ids, not the last one's loss.
    if (!is_first(key.second)) add(s.input), add(s.grad_in);
    if (!is_last(key.second)) add(s.output);
  }
  stats.peak_inflight = std::max(stats.peak_inflight, inflight);
  stats.peak_boundary_bytes = std::max(stats.peak_boundary_bytes, bytes);
  if (live_cpu_bytes() >= 0) stats.peak_activation_bytes = std::max(stats.peak_activation_bytes, activations);
}

void Executor::run_action(const Action& a, const std::function<MicroBatch(int)>& batch, double loss_scale,
                          ExecutorStats& stats) {
  // NOTE [operation counts]: a forward action's operations are the forward's, a B, I or W's the backward's.
  struct Phase {
    OpPhase before = op_phase();
    explicit Phase(ActionKind k) {
      if (sched::is_compute(k)) set_op_phase(k == ActionKind::F ? OpPhase::kForward : OpPhase::kBackward);
    }
    ~Phase() { set_op_phase(before); }
  } phase(a.kind);
  switch (a.kind) {
    case ActionKind::RECV_F:
    case ActionKind::RECV_B: post_recv(a); break;
    case ActionKind::SEND_F:
    case ActionKind::SEND_B: send(a); break;
    case ActionKind::F: forward(a, batch); break;
    case ActionKind::B: backward(a, loss_scale, false); break;
    case ActionKind::I: backward(a, loss_scale, true); break;
    case ActionKind::W: {
      WeightGradQueue& q = slots_.at({a.mb, a.chunk}).deferred;
      stats.deferred_weight_grads += static_cast<int64_t>(q.size());
      q.run();
      break;
    }
    case ActionKind::REDUCE_GRAD: break;  // run() tells the GradObserver: nothing of a slot changes
  }
  settle(a, stats);
}

void Executor::settle(const Action& a, ExecutorStats& stats) {
  if (a.kind == ActionKind::B || a.kind == ActionKind::W) {  // nothing of this (mb, chunk) is left
    auto it = slots_.find({a.mb, a.chunk});
    if (it != slots_.end() && !it->second.grad_in.defined() && it->second.deferred.empty()) slots_.erase(it);
  }
  if (sched::is_compute(a.kind)) track(stats);
  if (const int64_t live = live_cpu_bytes(); live >= 0 && step_base_bytes_ >= 0)
    stats.peak_step_bytes = std::max(stats.peak_step_bytes, live - step_base_bytes_);
}

// The thread a pair's backward half runs on: one for the executor's life, so
// that each pair pays a hand-over, not a thread's start (and its BLAS and
// autograd set-up). OpenMP's thread count is per thread: it runs with the
// run's (a new thread starts at the machine's cores, and its parallel
// regions would spin beside the forward's).
Executor::PairWorker::PairWorker(int threads)
    : thread_([this, threads] {
        at::set_num_threads(threads);
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
          cv_.wait(lock, [this] { return stop_ || static_cast<bool>(job_); });
          if (stop_) return;
          std::function<void()> job = std::move(job_);
          job_ = nullptr;
          lock.unlock();
          std::exception_ptr failed;
          try {
            job();
          } catch (...) {
            failed = std::current_exception();
          }
          lock.lock();
          failed_ = failed;
          done_ = true;
          cv_.notify_all();
        }
      }) {}

Executor::PairWorker::~PairWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Executor::PairWorker::start(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mu_);
  job_ = std::move(job);
  done_ = false;
  failed_ = nullptr;
  cv_.notify_all();
}

void Executor::PairWorker::finish() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  if (failed_) std::rethrow_exception(std::exchange(failed_, nullptr));
}

// NOTE [overlapped pairs] in schedules/overlap.h. The backward half runs on
// a second thread with its slot looked up beforehand (the forward half may
// add slots to the map meanwhile: a hand-over to another chunk of this
// rank); its all-to-alls go over the backward's expert group (NOTE [two
// expert groups]). This thread runs the forward, then posts the F's sends as
// one group at once, so the next stage can start its own pair while the
// backward still runs; the pipeline group is this thread's only.
void Executor::run_pair(const sched::ActionList& actions, size_t i, size_t j,
                        const std::function<MicroBatch(int)>& batch, double loss_scale, ExecutorStats& stats) {
  const Action& f = actions[i];
  const Action& b = actions[j];
  const bool rec = record_;
  const int t0 = rec ? clock_.mark() : -1;
  Slot& bs = slots_.at({b.mb, b.chunk});
  const bool defer = b.kind == ActionKind::I;
  int t_f = -1;
  auto forward_half = [&] {
    const OpPhase before = set_op_phase(OpPhase::kForward);
    forward(f, batch);
    set_op_phase(before);
    t_f = rec ? clock_.mark() : -1;
    for (size_t k = i + 1; k < j; ++k) {  // the communication between the two, posted now
      const Action& c = actions[k];
      if (c.kind == ActionKind::SEND_F || c.kind == ActionKind::SEND_B)
        send(c);
      else
        post_recv(c);  // never the partner's input (the validator's rule)
    }
    post_group();
  };
  if (overlap_) {
    if (!worker_) worker_ = std::make_unique<PairWorker>(at::get_num_threads());
    worker_->start([&] { backward_slot(bs, b, loss_scale, defer); });
    try {
      forward_half();
    } catch (...) {
      try {
        worker_->finish();
      } catch (...) {  // the forward's error is the one to report
      }
      throw;
    }
    worker_->finish();  // rethrows the backward's error
    ++stats.overlapped_pairs;
  } else {
    forward_half();
    const OpPhase before = set_op_phase(OpPhase::kBackward);
    backward_slot(bs, b, loss_scale, defer);
    set_op_phase(before);
  }
  if (rec) {
    const int t_end = clock_.mark();
    Action plain = f;  // the timeline's entries are single actions; the pair shows in their times
    plain.flags = 0;
    timeline_.push_back({plain, 0, 0}), marks_.push_back({t0, t_f});
    for (size_t k = i + 1; k < j; ++k) {
      const Action& c = actions[k];
      if (c.kind == ActionKind::RECV_F || c.kind == ActionKind::RECV_B) {
        record_recv(c);  // its end is filled in by its consumer's wait
        marks_.back().first = t_f;
      } else {
        timeline_.push_back({c, 0, 0}), marks_.push_back({t_f, t_f});
      }
    }
    timeline_.push_back({b, 0, 0}), marks_.push_back({t0, t_end});
  }
  settle(b, stats);  // the pair is one compute for the step's peaks
}

void Executor::find_reduce_points(const sched::ActionList& actions, std::vector<size_t>* reduce,
                                  std::vector<size_t>* last_backward) const {
  // The chunk's gradients are final at its REDUCE_GRAD (the validator's rule:
  // one per chunk, after every B, I and W of it), so the final backward is the
  // last B or I before it.
  reduce->assign(stages_.size(), actions.size());
  last_backward->assign(stages_.size(), actions.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const auto c = static_cast<size_t>(a.chunk);
    if (c >= stages_.size()) throw std::logic_error("action " + sched::to_token(a) + " names a chunk this rank lacks");
    if (a.kind == ActionKind::REDUCE_GRAD && (*reduce)[c] == actions.size()) (*reduce)[c] = i;
    if (sched::is_backward(a.kind) && (*reduce)[c] == actions.size()) (*last_backward)[c] = i;
  }
  for (size_t c = 0; c < stages_.size(); ++c)
    if ((*reduce)[c] == actions.size())
      throw std::logic_error("Executor: the action list has no REDUCE_GRAD for chunk " + std::to_string(c) + " (" +
                             sched::to_token(sched::reduce_grad(static_cast<int>(c))) +
                             "), so it cannot say when that chunk's gradients are final; lists from "
                             "sched::generate() and the schedule-file loaders have one per chunk");
}

ExecutorStats Executor::run(const sched::ActionList& actions, const std::function<MicroBatch(int)>& batch,
                            double loss_scale, GradObserver* observer) {
  ExecutorStats stats;
  timeline_.clear();
  marks_.clear();
  resolved_ = !record_;
  reset_loss();
  if (record_) clock_.begin(), span_marks_.first = clock_.mark();
  step_base_bytes_ = live_cpu_bytes();
  run_list(actions, batch, loss_scale, stats, observer, false);
  stats.loss = loss_acc_;
  if (record_) span_marks_.second = clock_.mark();
  for (auto it = slots_.begin(); it != slots_.end();) {  // slots kept only for an I/W pair's SEND_B
    if (!it->second.output.defined() && it->second.deferred.empty() && !it->second.grad_in.defined() &&
        !it->second.grad_side.defined())
      it = slots_.erase(it);
    else
      throw std::logic_error("micro-batch " + std::to_string(it->first.first) + " chunk " +
                             std::to_string(it->first.second) + " still holds state after the step");
  }
  return stats;
}

void Executor::run_list(const sched::ActionList& actions, const std::function<MicroBatch(int)>& batch,
                        double loss_scale, ExecutorStats& stats, GradObserver* observer, bool forward_only) {
  std::vector<size_t> reduce_at, last_backward;
  if (!forward_only) find_reduce_points(actions, &reduce_at, &last_backward);
  groups_.clear();
  first_open_ = 0;
  try {
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      const auto chunk = static_cast<size_t>(a.chunk);
      if (progress_.enabled()) progress_.action(static_cast<int>(i), sched::to_token(a));
      if (sched::is_compute(a.kind)) {
        post_group();  // the communication since the last compute, as one group
        release_completed_groups();
        if (a.kind != ActionKind::W) wait_inputs(a, static_cast<int>(i));
      }
      if (a.overlaps_next() && !forward_only) {  // NOTE [overlapped pairs]: the validator checked its shape
        const size_t j = sched::pair_partner(actions, i);
        if (j >= actions.size() || !sched::is_backward(actions[j].kind))
          throw std::logic_error("overlapped pair " + sched::to_token(a) + " has no B or I after it");
        wait_inputs(actions[j], static_cast<int>(j));
        if (observer && j == last_backward[actions[j].chunk]) observer->final_backward_begins(actions[j].chunk);
        run_pair(actions, i, j, batch, loss_scale, stats);
        i = j;
        continue;
      }
      if (observer && i == last_backward[chunk]) observer->final_backward_begins(a.chunk);
      const int t0 = record_ && !forward_only ? clock_.mark() : -1;
      run_action(a, batch, loss_scale, stats);
      if (record_ && !forward_only) {
        if (a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B)
          record_recv(a);
        else
          timeline_.push_back({a, 0, 0}), marks_.push_back({t0, sched::is_compute(a.kind) ? clock_.mark() : t0});
      }
      if (observer && a.kind == ActionKind::REDUCE_GRAD) observer->grads_final(a.chunk);
      // Evaluation keeps no activations: a chunk's are done once sent on (or the loss is taken).
      if (forward_only && (a.kind == ActionKind::SEND_F || (a.kind == ActionKind::F && is_last(a.chunk))))
        slots_.erase({a.mb, a.chunk});
    }
    finish_groups();
  } catch (...) {
    queued_ = CommGroup{};
    groups_.clear();
    throw;
  }
}

at::Tensor Executor::forward_only(int microbatches, const std::function<MicroBatch(int)>& batch) {
  at::NoGradGuard no_grad;
  ExecutorStats stats;
  reset_loss();
  run_list(sched::forward_only_actions(map_, pp_.rank, microbatches), batch, 1.0, stats, nullptr, true);
  return loss_acc_;
}

}  // namespace trident
