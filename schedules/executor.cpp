// Pipeline executor: see executor.h. Communication semantics match what the
// validator assumes: sends never block (their completion is awaited at the end
// of the step), a receive blocks only the compute action that consumes it.
#include "schedules/executor.h"

#include <chrono>
#include <cmath>
#include <stdexcept>

namespace trident {

using sched::Action;
using sched::ActionKind;

namespace {
double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Executor::Executor(std::vector<Stage*> stages, const Group& pp, const sched::StageMap& map,
                   int64_t micro_batch_size, c10::Device device)
    : chunks_(std::move(stages)),
      pp_(pp),
      map_(map),
      mbs_(micro_batch_size),
      device_(device),
      progress_(pp.global(pp.rank)) {
  if (chunks_.empty()) throw std::logic_error("Executor needs at least one stage");
  if (map_.pipeline_ranks != pp.size() || map_.chunks != static_cast<int>(chunks_.size()))
    throw std::logic_error("Executor: stage map is for p=" + std::to_string(map_.pipeline_ranks) + " v=" +
                           std::to_string(map_.chunks) + " but the pipeline group has " +
                           std::to_string(pp.size()) + " ranks and this rank " + std::to_string(chunks_.size()) +
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
  auto& work = grad ? s.recv_grad : s.recv_act;
  if (buf.defined()) return;  // already posted (or delivered locally)
  if (peer == pp_.rank) return;  // same rank (p = 1): send() hands the tensor over
  buf = at::empty(grad ? chunks_[a.chunk]->output_shape(mbs_) : chunks_[a.chunk]->input_shape(mbs_),
                  at::TensorOptions().dtype(at::kFloat).device(device_));
  work = irecv(pp_, buf, peer, tag(grad, a.mb, stage(a.chunk)));
  (grad ? s.recv_grad_posted : s.recv_act_posted) = now_us();
}

void Executor::record_recv(const Action& a) {
  Slot& s = slots_[{a.mb, a.chunk}];
  const bool grad = a.kind == ActionKind::RECV_B;
  const bool pending = static_cast<bool>(grad ? s.recv_grad : s.recv_act);
  const double t = now_us(), posted = grad ? s.recv_grad_posted : s.recv_act_posted;
  // Pending: its consumer's wait fills in the end. Otherwise the data is here
  // already (a hand-over between chunks of this rank).
  timeline_.push_back({a, pending && posted > 0 ? posted : t, pending ? NAN : t});
  if (pending) (grad ? s.recv_grad_entry : s.recv_act_entry) = static_cast<int>(timeline_.size()) - 1;
}

void Executor::wait_inputs(const Action& a, int i) {
  const bool grad = a.kind != ActionKind::F;
  if (grad ? is_last(a.chunk) : is_first(a.chunk)) return;
  auto it = slots_.find({a.mb, a.chunk});
  if (it == slots_.end()) return;  // the compute itself reports the missing input
  Slot& s = it->second;
  auto& work = grad ? s.recv_grad : s.recv_act;
  if (!work) return;
  const Action recv{grad ? ActionKind::RECV_B : ActionKind::RECV_F, a.mb, a.chunk};
  if (progress_.enabled()) progress_.wait(i, sched::to_token(recv), pp_.global(sched::peer_rank(map_, pp_.rank, recv)));
  wait_work(pp_, work, grad ? "pipeline recv gradient" : "pipeline recv activation", -1);
  work.reset();
  const int entry = grad ? s.recv_grad_entry : s.recv_act_entry;
  if (entry >= 0 && record_) timeline_[static_cast<size_t>(entry)].end = now_us();
}

void Executor::send(const Action& a) {
  Slot& s = slots_.at({a.mb, a.chunk});
  const bool grad = a.kind == ActionKind::SEND_B;
  const int peer = sched::peer_rank(map_, pp_.rank, a);
  const sched::Action into = sched::counterpart(map_, pp_.rank, a);  // the peer's RECV
  const int to_stage = map_.stage_of(peer, into.chunk);
  at::Tensor t = (grad ? s.grad_in : s.output.detach()).contiguous();
  if (grad) s.grad_in.reset();
  if (peer == pp_.rank) {  // that virtual stage lives here too: hand over directly
    Slot& dst = slots_[{a.mb, into.chunk}];
    (grad ? dst.recv_grad_buf : dst.recv_act_buf) = t.clone();
    return;
  }
  pending_sends_.emplace_back(isend(pp_, t, peer, tag(grad, a.mb, to_stage)), t);
}

void Executor::finish_sends() {
  for (auto& [work, tensor] : pending_sends_) wait_work(pp_, work, "pipeline send", -1);
  pending_sends_.clear();
}

void Executor::forward(const Action& a, const std::function<MicroBatch(int)>& batch) {
  Slot& s = slots_[{a.mb, a.chunk}];
  const bool first = is_first(a.chunk), last = is_last(a.chunk);
  MicroBatch data;
  if (first || last) data = batch(a.mb);
  if (first) {
    s.input = data.input;
  } else {
    if (s.recv_act) wait_work(pp_, s.recv_act, "pipeline recv activation", -1);
    if (!s.recv_act_buf.defined())
      throw std::logic_error("F" + std::to_string(a.mb) + " on chunk " + std::to_string(a.chunk) +
                             " has no received activation (schedule lacks its RECV_F)");
    s.input = s.recv_act_buf.requires_grad_(true);
    s.recv_act_buf.reset();
    s.recv_act.reset();
  }
  const int64_t before = live_cpu_bytes();
  WeightGradScope scope(&s.deferred);  // the graph keeps this micro-batch's W queue (NOTE [I/W split])
  s.output = chunks_[a.chunk]->forward(s.input, last ? data.targets : at::Tensor());
  s.activation_bytes = before < 0 ? -1 : live_cpu_bytes() - before;
  // The double sum of float losses, added in micro-batch order: the same
  // doubles a host-side `+= item<double>()` gives.
  if (last) loss_acc_.add_(s.output.detach().reshape({}).to(at::kDouble));
}

void Executor::backward(const Action& a, double loss_scale, bool defer_weights) {
  Slot& s = slots_.at({a.mb, a.chunk});
  if (!s.output.defined())
    throw std::logic_error("backward of micro-batch " + std::to_string(a.mb) + " before its forward");
  s.deferred.arm(defer_weights);  // read by the backward functions, on whichever thread runs them
  if (is_last(a.chunk)) {
    (s.output * loss_scale).backward();
  } else {
    if (s.recv_grad) wait_work(pp_, s.recv_grad, "pipeline recv gradient", -1);
    if (!s.recv_grad_buf.defined())
      throw std::logic_error("B" + std::to_string(a.mb) + " has no received gradient (schedule lacks its RECV_B)");
    s.output.backward(s.recv_grad_buf);
    s.recv_grad_buf.reset();
    s.recv_grad.reset();
  }
  if (!is_first(a.chunk)) s.grad_in = s.input.grad();
  s.input.reset();
  s.output.reset();
}

void Executor::reset_loss() { loss_acc_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_)); }

double Executor::read_loss() const { return loss_acc_.item<double>(); }

void Executor::track(ExecutorStats& stats) {
  int inflight = 0;
  int64_t bytes = 0, activations = 0;
  for (const auto& [key, s] : slots_) {
    if (s.output.defined()) ++inflight, activations += s.activation_bytes;
    for (const at::Tensor* t : {&s.input, &s.output, &s.grad_in})
      if (t->defined()) bytes += t->numel() * static_cast<int64_t>(t->element_size());
  }
  stats.peak_inflight = std::max(stats.peak_inflight, inflight);
  stats.peak_boundary_bytes = std::max(stats.peak_boundary_bytes, bytes);
  if (live_cpu_bytes() >= 0) stats.peak_activation_bytes = std::max(stats.peak_activation_bytes, activations);
}

void Executor::run_action(const Action& a, const std::function<MicroBatch(int)>& batch, double loss_scale,
                          ExecutorStats& stats) {
  switch (a.kind) {
    case ActionKind::RECV_F:
    case ActionKind::RECV_B: post_recv(a); break;
    case ActionKind::SEND_F:
    case ActionKind::SEND_B: send(a); break;
    case ActionKind::F: forward(a, batch); break;
    case ActionKind::B: backward(a, loss_scale, false); break;
    case ActionKind::I: backward(a, loss_scale, true); break;
    case ActionKind::W: slots_.at({a.mb, a.chunk}).deferred.run(); break;
    case ActionKind::REDUCE_GRAD: break;  // run() tells the GradObserver: nothing of a slot changes
  }
  if (a.kind == ActionKind::B || a.kind == ActionKind::W) {  // nothing of this (mb, chunk) is left
    auto it = slots_.find({a.mb, a.chunk});
    if (it != slots_.end() && !it->second.grad_in.defined() && it->second.deferred.empty()) slots_.erase(it);
  }
  if (sched::is_compute(a.kind)) track(stats);
}

void Executor::find_reduce_points(const sched::ActionList& actions, std::vector<size_t>* reduce,
                                  std::vector<size_t>* last_backward) const {
  // The chunk's gradients are final at its REDUCE_GRAD (the validator's rule:
  // one per chunk, after every B, I and W of it), so the final backward is the
  // last B or I before it.
  reduce->assign(chunks_.size(), actions.size());
  last_backward->assign(chunks_.size(), actions.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const auto c = static_cast<size_t>(a.chunk);
    if (c >= chunks_.size()) throw std::logic_error("action " + sched::to_token(a) + " names a chunk this rank lacks");
    if (a.kind == ActionKind::REDUCE_GRAD && (*reduce)[c] == actions.size()) (*reduce)[c] = i;
    if (sched::is_backward(a.kind) && (*reduce)[c] == actions.size()) (*last_backward)[c] = i;
  }
  for (size_t c = 0; c < chunks_.size(); ++c)
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
  reset_loss();
  run_span_.first = now_us();
  std::vector<size_t> reduce_at, last_backward;
  find_reduce_points(actions, &reduce_at, &last_backward);
  for (size_t i = 0; i < actions.size(); ++i) {
    const auto chunk = static_cast<size_t>(actions[i].chunk);
    if (sched::is_compute(actions[i].kind)) {
      // Post the receives the next compute action will need, so they arrive
      // while this one computes.
      size_t j = i + 1;
      while (j < actions.size() && !sched::is_compute(actions[j].kind)) {
        if (actions[j].kind == ActionKind::RECV_F || actions[j].kind == ActionKind::RECV_B) post_recv(actions[j]);
        ++j;
      }
    }
    const Action& a = actions[i];
    if (progress_.enabled()) progress_.action(static_cast<int>(i), sched::to_token(a));
    if (sched::is_compute(a.kind) && a.kind != ActionKind::W) wait_inputs(a, static_cast<int>(i));
    if (observer && i == last_backward[chunk]) observer->final_backward_begins(a.chunk);
    const double t0 = record_ ? now_us() : 0;
    run_action(a, batch, loss_scale, stats);
    if (record_) {
      if (a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B)
        record_recv(a);
      else
        timeline_.push_back({a, t0, sched::is_compute(a.kind) ? now_us() : t0});
    }
    if (observer && a.kind == ActionKind::REDUCE_GRAD) observer->grads_final(a.chunk);
  }
  finish_sends();
  stats.loss = loss_acc_;
  run_span_.second = now_us();
  for (auto& e : timeline_)  // a receive whose data nobody waited for (cannot happen in a valid list)
    if (std::isnan(e.end)) e.end = e.start;
  for (auto it = slots_.begin(); it != slots_.end();) {  // slots kept only for an I/W pair's SEND_B
    if (!it->second.output.defined() && it->second.deferred.empty() && !it->second.grad_in.defined())
      it = slots_.erase(it);
    else
      throw std::logic_error("micro-batch " + std::to_string(it->first.first) + " chunk " +
                             std::to_string(it->first.second) + " still holds state after the step");
  }
  return stats;
}

double Executor::forward_only(int microbatches, const std::function<MicroBatch(int)>& batch) {
  at::NoGradGuard no_grad;
  ExecutorStats stats;
  reset_loss();
  const int v = static_cast<int>(chunks_.size());
  for (int mb = 0; mb < microbatches; ++mb) {
    for (int c = 0; c < v; ++c) {
      if (!is_first(c)) run_action({ActionKind::RECV_F, mb, c}, batch, 1.0, stats);
      run_action({ActionKind::F, mb, c}, batch, 1.0, stats);
      if (!is_last(c)) run_action({ActionKind::SEND_F, mb, c}, batch, 1.0, stats);
      slots_.erase({mb, c});  // no backward follows: drop the activations now
    }
  }
  finish_sends();
  return read_loss();
}

}  // namespace trident
