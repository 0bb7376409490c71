// NOTE [message matching] This run (the simulator's timing model, and the
// validator's first pass) matches a receive to its send by what it carries:
// (direction, micro-batch, virtual stage it goes into). A RECV only posts the
// receive and never blocks; the compute that needs the data waits for it. So
// the rules checked here are per rank (receive posted before, send after its
// compute) plus the absence of deadlock; the order NCCL needs on top (a
// pair's messages in one order, no cycle on its streams) is checked by
// check_pair_order() (NOTE [pair order] in pair_order.h). The deadlock check
// executes every list with a worklist: a rank runs until its next compute
// lacks an input, then waits on that one message key; the send of that key
// wakes it.
// Each action is visited once, so the run is linear in the actions, and the
// message times live in one flat table indexed by (stage, micro-batch)
// (NOTE [one slot per input]). The per-rank checks are in engine_checks.cpp.
#include "schedules/engine.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>

#include "schedules/generators.h"
#include "schedules/zeroed_buffer.h"

namespace trident::sched::detail {

namespace {

// Message times are stored XOR-ed with a NaN's bits so that the zero pages a
// fresh table starts with read as "not sent yet" (NaN never is a time), and
// no fill pass is needed.
constexpr uint64_t kTimeMask = 0x7ff8000000000000ull;
inline uint64_t encode_time(double t) {
  uint64_t b;
  std::memcpy(&b, &t, sizeof b);
  return b ^ kTimeMask;
}
inline bool is_sent(uint64_t stored) { return stored != 0; }
inline double decode_time(uint64_t stored) {
  const uint64_t b = stored ^ kTimeMask;
  double t;
  std::memcpy(&t, &b, sizeof t);
  return t;
}

// The executor run with clocks (all zero when only validating).
class Runner {
 public:
  Runner(const Schedule& s, const Costs* costs, bool record, bool comm)
      : s_(s), costs_(costs), record_(record && costs), comm_(comm), p_(s.pipeline_ranks), m_(s.microbatches),
        v_(s.chunks), S_(s.virtual_stages()) {
    // Placement as tables: the run looks these up once or twice per action.
    rank_of_.resize(S_);
    for (int st = 0; st < S_; ++st) rank_of_[st] = s.rank_of(st);
    stage_of_.resize(static_cast<size_t>(p_) * v_);
    for (int r = 0; r < p_; ++r)
      for (int c = 0; c < v_; ++c) stage_of_[static_cast<size_t>(r) * v_ + c] = s.stage_of(r, c);
    ready_ = ZeroedBuffer<uint64_t>(static_cast<size_t>(S_) * m_);
    if (record_ && comm_)
      for (auto& r : recv_at_) r.assign(static_cast<size_t>(S_) * m_, -1);
    cost_.assign(5 * static_cast<size_t>(S_), 0.0);  // F, B, I, W, and the all-to-all part (overlapped pairs)
    latency_.assign(S_, 0.0);
    if (costs_) {
      for (int k = 0; k < 4; ++k)
        for (int st = 0; st < S_; ++st)
          cost_[k * S_ + st] = stage_action_cost(*costs_, static_cast<ActionKind>(k), s.chunks, st);
      for (int st = 0; st < S_; ++st) cost_[4 * S_ + st] = stage_expert_comm(*costs_, s.chunks, st);
      for (int b = 0; b + 1 < S_; ++b)
        latency_[b] = costs_->latency.empty() ? 0.0 : costs_->latency.size() == 1 ? costs_->latency[0] : costs_->latency[b];
    }
    pc_.assign(p_, 0);
    clock_.assign(p_, 0.0);
    busy_.assign(p_, 0.0);
    first_start_.assign(p_, -1.0);
    alive_.assign(p_, 0);
    peak_.assign(p_, 0);
    waiting_.assign(p_, -1);
    blocked_at_.assign(p_, 0);
    if (record_) timeline_.ranks.assign(p_, {});
  }

  void run() {
    // Newest first: a woken rank runs as soon as the current one blocks, while
    // the message it waited for is still in cache (first-in-first-out measured
    // a quarter slower at p=1024). A rank is queued at most once (only a
    // waiting rank is woken), so p slots suffice.
    Ring todo(p_);
    for (int r = 0; r < p_; ++r) todo.push(r);
    while (!todo.empty()) advance(todo.pop(), todo);
    report_deadlock();
  }

  int messages() const { return messages_; }
  TimelineStats stats() const {
    TimelineStats st;
    st.busy = busy_;
    st.peak_inflight = peak_;
    st.first_start = first_start_;
    st.end = clock_;
    for (double c : clock_) st.step_time = std::max(st.step_time, c);
    double idle = 0;
    for (double b : busy_) idle += st.step_time - b;
    st.bubble_fraction = st.step_time > 0 ? idle / (p_ * st.step_time) : 0.0;
    st.span_bubble_fraction = span_bubble(busy_, first_start_, clock_);
    return st;
  }
  Timeline take_timeline() { return std::move(timeline_); }

 private:
  // Stage major: a rank reads its stage's row in micro-batch order.
  size_t key(int into, int mb) const { return static_cast<size_t>(into) * m_ + mb; }
  int64_t wait_key(int dir, int into, int mb) const { return static_cast<int64_t>(dir) * S_ * m_ + key(into, mb); }

  // A message into virtual stage `into` (dir 0: activation, 1: gradient) is
  // there at time t; wake its receiver if it waits for exactly this one.
  struct Ring {
    std::vector<int> slot;
    size_t head = 0, count = 0;
    explicit Ring(int n) : slot(n) {}
    bool empty() const { return count == 0; }
    void push(int r) { slot[(head + count++) % slot.size()] = r; }
    int pop() { return slot[(head + --count) % slot.size()]; }  // newest first
  };

  void deliver(int dir, int into, int mb, double t, Ring& todo) {
    uint64_t& slot = ready_[key(into, mb)];
    if (is_sent(slot))  // NOTE [one slot per input]: the forward input is consumed before the gradient can exist
      throw std::logic_error("schedule run: second message into stage " + std::to_string(into) + " micro-batch " +
                             std::to_string(mb) + " before the first was used (a bug in engine.cpp)");
    slot = encode_time(t);
    const int dest = rank_of_[into];
    if (waiting_[dest] == wait_key(dir, into, mb)) {
      waiting_[dest] = -1;
      todo.push(dest);
      __builtin_prefetch(&s_.ranks[dest][pc_[dest]]);  // it runs next: start the likely cache miss now
    }
  }

  double link(int from_rank, int to_stage, int boundary) const {
    return rank_of_[to_stage] == from_rank ? 0.0 : latency_[boundary];  // same rank: local hand-over
  }

  // Input a compute action needs: dir and stage; false if none (pipeline end, or W).
  bool input_of(const Action& a, int stage, int* dir) const {
    if (a.kind == ActionKind::F && stage > 0) return *dir = 0, true;
    if (is_backward(a.kind) && stage < S_ - 1) return *dir = 1, true;
    return false;
  }

  // NOTE [run beside the checks] Large schedules are run while another thread
  // does the per-rank checks, so the run must not rely on them for memory
  // safety: it stops at any action whose micro-batch, chunk or peer
  // stage would index outside its tables, and run() reports the checks' error
  // (which names the spot) in its place.
  bool in_range(const Action& a) const {
    return static_cast<uint32_t>(a.mb) < static_cast<uint32_t>(m_) && a.chunk < v_;
  }
  [[noreturn]] void malformed(int r, size_t pc) const {
    throw ScheduleError("invalid schedule: rank " + std::to_string(r) + " position " + std::to_string(pc) +
                         " is malformed (out of range, or a send past the pipeline's end)");
  }

  // The communication action at list position pc of rank r, on virtual stage
  // `stage`, at time `at`: a send stamps its message ready (its link later);
  // a receive is posted and never blocks.
  void communicate(int r, size_t pc, int stage, double at, std::vector<TimedAction>* tl, Ring& todo) {
    const Action& a = s_.ranks[r][pc];
    if (a.kind == ActionKind::SEND_F || a.kind == ActionKind::SEND_B) {
      const bool fwd = a.kind == ActionKind::SEND_F;
      const int into = fwd ? stage + 1 : stage - 1;
      if (into < 0 || into >= S_) malformed(r, pc);
      deliver(fwd ? 0 : 1, into, a.mb, at + link(r, into, fwd ? stage : stage - 1), todo);
    } else if (tl) {
      recv_at_[a.kind == ActionKind::RECV_F ? 0 : 1][key(stage, a.mb)] = static_cast<int32_t>(tl->size());
    }
    if (tl) tl->push_back({a, at, at});
  }

  // In a compute-only list, the sends add_communication() would put after
  // compute action `a` of rank r on virtual stage `stage`, at time `t`.
  void implied_sends(int r, const Action& a, int stage, double t, Ring& todo) {
    if (a.kind == ActionKind::F && stage < S_ - 1) deliver(0, stage + 1, a.mb, t + link(r, stage + 1, stage), todo);
    if (is_backward(a.kind) && stage > 0) deliver(1, stage - 1, a.mb, t + link(r, stage - 1, stage - 1), todo);
  }

  void advance(int r, Ring& todo) {
    const auto& list = s_.ranks[r];
    const size_t n = list.size();
    std::vector<TimedAction>* tl = record_ ? &timeline_.ranks[r] : nullptr;
    size_t pc = pc_[r];
    double clock = clock_[r];
    while (pc < n) {
      const Action& a = list[pc];
      if (!in_range(a)) malformed(r, pc);
      const int stage = stage_of_[static_cast<size_t>(r) * v_ + a.chunk];
      if (is_communication(a.kind)) {
        communicate(r, pc, stage, clock, tl, todo);
        ++pc;
        continue;
      }
      if (a.kind == ActionKind::REDUCE_GRAD) {  // zero cost: marks the chunk's gradients final, waits for nothing
        if (tl) tl->push_back({a, clock, clock});
        ++pc;
        continue;
      }
      // An overlapped pair (NOTE [overlapped pairs]): the F and the B or I after it, as one.
      if (a.overlaps_next()) {
        const size_t j = pair_partner(list, pc);
        if (j < n && is_backward(list[j].kind) && in_range(list[j])) {
          if (!run_pair(r, pc, j, &clock, tl, todo)) return;
          pc = j + 1;
          continue;
        }
      }
      // A compute action.
      double start = clock, got = -1;
      int dir = -1;
      const double cost = cost_[static_cast<int>(a.kind) * S_ + stage];
      if (input_of(a, stage, &dir)) {
        const uint64_t stored = ready_[key(stage, a.mb)];
        if (!is_sent(stored)) {  // blocked until that message is sent
          waiting_[r] = wait_key(dir, stage, a.mb);
          blocked_at_[r] = static_cast<int>(pc);
          pc_[r] = pc;
          clock_[r] = clock;
          return;
        }
        got = decode_time(stored);
        ready_[key(stage, a.mb)] = 0;  // consumed: the slot is free for the gradient
        start = std::max(start, got);
      }
      const double end = start + cost;
      if (a.kind == ActionKind::F) peak_[r] = std::max(peak_[r], ++alive_[r]);
      if (is_backward(a.kind)) --alive_[r];
      if (dir >= 0) ++messages_;
      if (tl) {
        tl->push_back({a, start, end});
        if (comm_ && dir >= 0) {
          const int32_t at = recv_at_[dir][key(stage, a.mb)];
          if (at >= 0) (*tl)[at].end = std::max((*tl)[at].start, got);
        }
      }
      if (!comm_) implied_sends(r, a, stage, end, todo);
      if (first_start_[r] < 0) first_start_[r] = start;
      busy_[r] += end - start;
      clock = end;
      ++pc;
    }
    pc_[r] = pc;
    clock_[r] = clock;
  }

  // Runs the pair of the F at list[pc] and its partner at list[j] on rank r
  // when both inputs are in (the F's sends between them leave when the F's
  // own chain would end, start + F's cost); otherwise blocks on the first
  // missing input and returns false (the run comes back to pc when it arrives).
  bool run_pair(int r, size_t pc, size_t j, double* clock, std::vector<TimedAction>* tl, Ring& todo) {
    const auto& list = s_.ranks[r];
    const Action* acts[2] = {&list[pc], &list[j]};
    int stages[2], dirs[2] = {-1, -1};
    for (int k = 0; k < 2; ++k) {
      stages[k] = stage_of_[static_cast<size_t>(r) * v_ + acts[k]->chunk];
      if (input_of(*acts[k], stages[k], &dirs[k]) && !is_sent(ready_[key(stages[k], acts[k]->mb)])) {
        waiting_[r] = wait_key(dirs[k], stages[k], acts[k]->mb);
        blocked_at_[r] = static_cast<int>(k == 0 ? pc : j);
        pc_[r] = pc;
        clock_[r] = *clock;
        return false;
      }
    }
    double start = *clock;
    double got[2] = {-1, -1};
    for (int k = 0; k < 2; ++k) {
      if (dirs[k] < 0) continue;
      uint64_t& slot = ready_[key(stages[k], acts[k]->mb)];
      got[k] = decode_time(slot);
      slot = 0;
      start = std::max(start, got[k]);
      ++messages_;
    }
    const double f = cost_[static_cast<int>(ActionKind::F) * S_ + stages[0]];
    const double b = cost_[static_cast<int>(acts[1]->kind) * S_ + stages[1]];
    const double end = start + overlapped_pair_cost(f, cost_[4 * S_ + stages[0]], b, cost_[4 * S_ + stages[1]]);
    const double f_end = start + f;
    peak_[r] = std::max(peak_[r], ++alive_[r]);
    --alive_[r];
    for (int k = 0; k < 2; ++k) {
      const Action& a = *acts[k];
      if (tl) {
        tl->push_back({a, start, k == 0 ? f_end : end});
        if (comm_ && dirs[k] >= 0) {
          const int32_t at = recv_at_[dirs[k]][key(stages[k], a.mb)];
          if (at >= 0) (*tl)[at].end = std::max((*tl)[at].start, got[k]);
        }
      }
      if (k == 0) {  // what is posted once the F is done: the communication between the two
        for (size_t i = pc + 1; i < j; ++i) {
          if (!in_range(list[i])) malformed(r, i);
          communicate(r, i, stage_of_[static_cast<size_t>(r) * v_ + list[i].chunk], f_end, tl, todo);
        }
      }
      if (!comm_) implied_sends(r, a, stages[k], k == 0 ? f_end : end, todo);
    }
    if (first_start_[r] < 0) first_start_[r] = start;
    busy_[r] += end - start;
    *clock = end;
    return true;
  }

  void report_deadlock() const {
    std::vector<Where> blocked;
    std::string what;
    for (int r = 0; r < p_; ++r) {
      if (pc_[r] == s_.ranks[r].size()) continue;
      const int pos = blocked_at_[r];
      const Action& a = s_.ranks[r][pos];
      const int stage = s_.stage_of(r, a.chunk), from = a.kind == ActionKind::F ? stage - 1 : stage + 1;
      const Action send(a.kind == ActionKind::F ? ActionKind::SEND_F : ActionKind::SEND_B, a.mb, s_.chunk_of(from));
      blocked.push_back({r, pos});
      what += (what.empty() ? "" : "; ") + at_text(s_, r, pos) + " waits for " + to_token(send) + " from rank " +
              std::to_string(s_.rank_of(from));
    }
    if (!blocked.empty()) violation(s_, blocked, "deadlock: " + what);
  }

  const Schedule& s_;
  const Costs* costs_;
  const bool record_, comm_;
  const int p_, m_, v_, S_;
  std::vector<int> rank_of_, stage_of_;  // [stage], [rank * v + chunk]
  // NOTE [one slot per input] [stage * m + mb]: when the message into that
  // stage is there (encode_time), 0 = not sent or already used. One slot serves
  // both directions: the gradient into stage s for mb is produced by stage
  // s+1's backward, after stage s+1's forward, after stage s's forward has
  // used its activation (the per-rank checks guarantee each order), so the
  // two messages are never pending at once. Half the memory of two tables.
  ZeroedBuffer<uint64_t> ready_;
  std::vector<int32_t> recv_at_[2];  // timeline index of the RECV of that input (record with comm only)
  std::vector<double> cost_;         // [kind F,B,I,W, then the all-to-all part][stage]
  std::vector<double> latency_;      // [boundary s -> s+1]
  std::vector<size_t> pc_;
  std::vector<double> clock_, busy_, first_start_;  // first_start_: when the rank's first compute started (-1: none yet)
  std::vector<int> alive_, peak_, blocked_at_;
  std::vector<int64_t> waiting_;     // per rank: the message key it waits for, -1 = runnable
  int messages_ = 0;
  Timeline timeline_;
};

}  // namespace

RunResult run(const Schedule& s, const Costs* costs, bool record) {
  if (costs) check_costs(*costs, s.pipeline_ranks, s.chunks);
  RunResult out;
  if (s.pipeline_ranks < 1 || static_cast<int>(s.ranks.size()) != s.pipeline_ranks || s.microbatches < 1 || s.chunks < 1) {
    check_ranks(s, &out.report);  // throws, naming the shape
  }
  // Explicit communication is all or nothing; rank 0's list decides (check_ranks() checks the rest).
  const bool comm = std::any_of(s.ranks[0].begin(), s.ranks[0].end(), [](const Action& a) { return is_communication(a.kind); });
  out.report.communication_added = !comm;
  Runner runner(s, costs, record, comm);
  if (action_count(s) < (1u << 20)) {  // small: one after the other
    check_ranks(s, &out.report);
    runner.run();
  } else {  // NOTE [run beside the checks]: the checks' error, if any, wins
    std::exception_ptr check_error, run_error;
    std::thread checker([&] {
      try {
        check_ranks(s, &out.report);
      } catch (...) {
        check_error = std::current_exception();
      }
    });
    try {
      runner.run();
    } catch (...) {
      run_error = std::current_exception();
    }
    checker.join();
    if (check_error) std::rethrow_exception(check_error);
    if (run_error) std::rethrow_exception(run_error);
  }
  out.report.messages = runner.messages();
  if (costs) out.stats = runner.stats();
  if (record && costs) {
    out.timeline = runner.take_timeline();
    out.timeline.pipeline_ranks = s.pipeline_ranks;
    out.timeline.microbatches = s.microbatches;
    out.timeline.chunks = s.chunks;
  }
  return out;
}

}  // namespace trident::sched::detail
