// The NCCL-rules test backend: NOTE [NCCL rules on the CPU] in nccl_rules.h.
#include "parallel/nccl_rules.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace trident {

namespace {

// A unit's Work: finished by the stream thread.
class UnitWork : public c10d::Work {
 public:
  explicit UnitWork(int rank) : c10d::Work(rank, c10d::OpType::UNKNOWN) {}
  void done(std::exception_ptr e) { finish(std::move(e)); }
};

// An out-of-place collective whose output is written when it is waited for
// (NOTE [NCCL collectives on the CPU]): Gloo fills a staging tensor in its own
// thread; wait() copies it into the caller's output, once.
class LandOnWait : public c10d::Work {
 public:
  LandOnWait(c10::intrusive_ptr<c10d::Work> inner, at::Tensor staged, at::Tensor out)
      : c10d::Work(-1, c10d::OpType::UNKNOWN), inner_(std::move(inner)), staged_(std::move(staged)), out_(std::move(out)) {}
  bool wait(std::chrono::milliseconds timeout) override {
    const bool done = inner_->wait(timeout);
    if (done && !landed_) {
      at::NoGradGuard no_grad;
      out_.copy_(staged_);
      landed_ = true;
    }
    return done;
  }
  bool isCompleted() override { return inner_->isCompleted(); }
  bool isSuccess() const override { return inner_->isSuccess(); }
  std::exception_ptr exception() const override { return inner_->exception(); }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  at::Tensor staged_, out_;
  bool landed_ = false;
};

struct Op {
  bool send;
  at::Tensor tensor;
  int peer;
};

struct Unit {
  std::vector<Op> ops;
  c10::intrusive_ptr<UnitWork> work;
};

// Gloo slots: a pair's k-th data message and its acknowledgement (the ack
// travels the other way, so the two never share a slot of one direction).
uint32_t data_tag(int64_t k) { return static_cast<uint32_t>(2 * k); }
uint32_t ack_tag(int64_t k) { return static_cast<uint32_t>(2 * k + 1); }

thread_local std::string t_next_label;  // label_next_collective()'s, for this thread's next call

class NcclRulesBackend : public CommBackend {
 public:
  NcclRulesBackend(c10::intrusive_ptr<CommBackend> gloo, int rank, int size, std::chrono::milliseconds timeout)
      : CommBackend(rank, size), gloo_(std::move(gloo)), deadline_(timeout / 2), stream_([this] { loop(); }) {}

  ~NcclRulesBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    stream_.join();
    // The last acknowledgements may still be on their way: a peer waits for
    // them, so they are delivered before the Gloo pairs close.
    for (auto& a : acks_) {
      try {
        a.first->wait(deadline_);
      } catch (const std::exception&) {  // the peer is gone already: nothing waits for it
      }
    }
  }

  const std::string getBackendName() const override { return "nccl-rules"; }
  bool supportsCoalescing() const override { return true; }

  void startCoalescing() override {
    if (coalescing_) throw std::logic_error("nccl-rules: startCoalescing() inside a coalesced group");
    coalescing_ = true;
    pending_.clear();
  }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    if (!coalescing_) throw std::logic_error("nccl-rules: endCoalescing() without startCoalescing()");
    coalescing_ = false;
    return enqueue(std::move(pending_));
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int /*tag: NCCL has none*/) override {
    return add({true, single(tensors), dst});
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int /*tag*/) override {
    return add({false, single(tensors), src});
  }

  // Collectives: Gloo's (the into-tensor forms' output landing at the wait).
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& t, const c10d::BroadcastOptions& o) override {
    return gloo_->broadcast(t, o);
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t, const c10d::AllreduceOptions& o) override {
    return gloo_->allreduce(t, o);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in,
                                           const c10d::AllgatherOptions& o) override {
    return gloo_->allgather(out, in, o);
  }
  // The into-tensor forms write their output when waited for.
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions& o) override {
    at::Tensor staged = at::empty_like(out);
    return c10::make_intrusive<LandOnWait>(gloo_->_allgather_base(staged, in, o), staged, out);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override {
    at::Tensor staged = at::empty_like(out);
    return c10::make_intrusive<LandOnWait>(gloo_->_reduce_scatter_base(staged, in, o), staged, out);
  }
  // Expert parallelism's exchange (all_to_all_single with splits), landing at the wait too;
  // named calls compared first (NOTE [all-to-all order]).
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions& o) override {
    check_same_call(take_label());
    at::Tensor staged = at::empty_like(out);
    return c10::make_intrusive<LandOnWait>(gloo_->alltoall_base(staged, in, out_splits, in_splits, o), staged, out);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& o) override { return gloo_->barrier(o); }

 private:
  // Every rank's name of this all-to-all, gathered (fixed-size, so the gather itself always
  // matches) and compared with this rank's: the first other rank that differs fails the call.
  void check_same_call(const std::string& mine) {
    const int64_t k = alltoalls_++;
    if (mine.empty()) return;
    constexpr int64_t kLen = 160;
    at::Tensor buf = at::zeros({kLen}, at::kByte);
    std::memcpy(buf.data_ptr(), mine.data(), std::min<size_t>(mine.size(), kLen - 1));
    std::vector<std::vector<at::Tensor>> all(1);
    for (int r = 0; r < size_; ++r) all[0].push_back(at::zeros({kLen}, at::kByte));
    std::vector<at::Tensor> in{buf};
    gloo_->allgather(all, in, c10d::AllgatherOptions())->wait();
    for (int r = 0; r < size_; ++r) {
      const std::string theirs(reinterpret_cast<const char*>(all[0][r].data_ptr()));
      if (theirs == mine.substr(0, kLen - 1)) continue;
      throw std::runtime_error("nccl-rules: all-to-all number " + std::to_string(k) + " of this group: group rank " +
                               std::to_string(rank_) + " issues " + mine + " but group rank " + std::to_string(r) +
                               " issues " + theirs + " (NCCL matches collectives by their order alone: "
                               "NOTE [all-to-all order] in schedules/expert_order.h)");
    }
  }
  static std::string take_label();
  int64_t alltoalls_ = 0;

  static at::Tensor single(std::vector<at::Tensor>& tensors) {
    if (tensors.size() != 1) throw std::invalid_argument("nccl-rules: send/recv take one tensor");
    if (!tensors[0].is_contiguous()) throw std::invalid_argument("nccl-rules: send/recv need a contiguous tensor");
    return tensors[0];
  }

  // Inside a coalesced group the op joins it (and returns no Work, as
  // ProcessGroupNCCL's grouped operations do); otherwise it is a unit of one.
  c10::intrusive_ptr<c10d::Work> add(Op op) {
    if (coalescing_) {
      pending_.push_back(std::move(op));
      return {};
    }
    std::vector<Op> one;
    one.push_back(std::move(op));
    return enqueue(std::move(one));
  }

  c10::intrusive_ptr<c10d::Work> enqueue(std::vector<Op> ops) {
    auto work = c10::make_intrusive<UnitWork>(rank_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({std::move(ops), work});
    }
    cv_.notify_all();
    return work;
  }

  void loop() {
    for (;;) {
      Unit unit;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_
        unit = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        // As on a GPU, a failed operation leaves the stream unusable: what
        // was queued behind it fails with the first error.
        if (!broken_.empty()) throw std::runtime_error(broken_);
        run(unit);
      } catch (const std::exception& e) {
        if (broken_.empty()) broken_ = e.what();
        error = std::current_exception();
      }
      unit.work->done(error);
    }
  }

  // One unit: every op posted at once, then each waited for within the timeout.
  void run(Unit& unit) {
    std::vector<Posted> posted;
    try {
      post(unit, posted);
    } catch (const std::exception& e) {
      throw std::runtime_error("nccl-rules: rank " + std::to_string(rank_) + " could not post its operations: " +
                               first_line(e.what()));
    }
    wait(unit, posted);
  }

  struct Posted {
    c10::intrusive_ptr<c10d::Work> data, ack;
    at::Tensor ack_buf;
    int64_t seq = 0;
  };

  void post(Unit& unit, std::vector<Posted>& posted) {
    for (Op& op : unit.ops) {
      Posted p;
      std::vector<at::Tensor> t{op.tensor};
      if (op.send) {
        p.seq = sent_[op.peer]++;
        p.data = gloo_->send(t, op.peer, static_cast<int>(data_tag(p.seq)));
        p.ack_buf = at::empty({1}, at::kByte);
        std::vector<at::Tensor> a{p.ack_buf};
        p.ack = gloo_->recv(a, op.peer, static_cast<int>(ack_tag(p.seq)));
      } else {
        p.seq = received_[op.peer]++;
        p.data = gloo_->recv(t, op.peer, static_cast<int>(data_tag(p.seq)));
      }
      posted.push_back(std::move(p));
    }
  }

  void wait(Unit& unit, std::vector<Posted>& posted) {
    // Every op of the unit progresses on its own, as in one NCCL group kernel:
    // a receive acknowledges as soon as its data is in, whatever the others do.
    const auto deadline = std::chrono::steady_clock::now() + deadline_;
    std::vector<char> ok(posted.size(), 0);
    std::vector<std::string> failure(posted.size());
    std::mutex ack_mu;
    std::vector<std::thread> waiters;
    for (size_t i = 0; i < posted.size(); ++i)
      waiters.emplace_back([&, i] {
        Posted& p = posted[i];
        const Op& op = unit.ops[i];
        try {
          for (auto* w : {&p.data, &p.ack}) {
            if (!*w) continue;
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (!(*w)->wait(std::max(left, std::chrono::milliseconds(1)))) return;
          }
          if (!op.send) {  // acknowledge: the sender's op is done only now (NCCL's rendezvous)
            std::vector<at::Tensor> a{at::zeros({1}, at::kByte)};
            auto w = gloo_->send(a, op.peer, static_cast<int>(ack_tag(p.seq)));
            std::lock_guard<std::mutex> lock(ack_mu);
            acks_.push_back({w, a[0]});
          }
          ok[i] = 1;
        } catch (const std::exception& e) {
          failure[i] = first_line(e.what());
        }
      });
    for (auto& t : waiters) t.join();
    std::vector<size_t> waiting;
    std::string cause;
    for (size_t i = 0; i < posted.size(); ++i)
      if (!ok[i]) {
        waiting.push_back(i);
        if (cause.empty() && !failure[i].empty()) cause = " (" + failure[i] + ")";
      }
    if (!waiting.empty()) throw std::runtime_error(stuck(unit, posted, waiting) + cause);
    reap_acks();
  }

  // Acknowledgements this rank sent: kept alive until delivered.
  void reap_acks() {
    std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, at::Tensor>> left;
    for (auto& a : acks_)
      if (!a.first->isCompleted()) left.push_back(std::move(a));
    acks_ = std::move(left);
  }

  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

  std::string stuck(const Unit& unit, const std::vector<Posted>& posted, const std::vector<size_t>& waiting) const {
    std::string what;
    for (size_t i : waiting) {
      const Op& op = unit.ops[i];
      if (!what.empty()) what += ", ";
      what += std::string(op.send ? "send #" : "receive #") + std::to_string(posted[i].seq) + (op.send ? " to" : " from") +
              " rank " + std::to_string(op.peer);
    }
    return "nccl-rules: rank " + std::to_string(rank_) + " waited " + std::to_string(deadline_.count()) +
           " ms on its point-to-point stream for " + what +
           ": a deadlock under NCCL's rules (a pair's messages match in issue order; a posted receive holds the "
           "stream; NOTE [NCCL rules on the CPU])";
  }

  c10::intrusive_ptr<CommBackend> gloo_;
  // Half the group's timeout: the stream's own error, naming what it waits
  // on, comes before the caller's wait gives up.
  std::chrono::milliseconds deadline_;
  // Caller's side (one thread per rank calls the backend).
  bool coalescing_ = false;
  std::vector<Op> pending_;
  // Stream side.
  std::map<int, int64_t> sent_, received_;  // per peer: messages so far
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, at::Tensor>> acks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Unit> queue_;
  bool stop_ = false;
  std::string broken_;  // the stream's first error (stream thread only)
  std::thread stream_;  // last: started once everything above exists
};

std::string NcclRulesBackend::take_label() {
  std::string out;
  out.swap(t_next_label);
  return out;
}

}  // namespace

void label_next_collective(std::string what) { t_next_label = std::move(what); }

c10::intrusive_ptr<CommBackend> make_nccl_rules(c10::intrusive_ptr<CommBackend> gloo, int rank, int size,
                                                std::chrono::milliseconds timeout) {
  return c10::make_intrusive<NcclRulesBackend>(std::move(gloo), rank, size, timeout);
}

}  // namespace trident
