// NCCL's rules for a schedule's messages: NOTE [pair order] in pair_order.h.
#include "schedules/pair_order.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "schedules/engine.h"
#include "schedules/simulate.h"
#include "schedules/stream_run.h"

namespace trident::sched {

namespace {

// One message between two ranks: its pair (from, to) and what it carries,
// (virtual stage it goes into, micro-batch, direction) as one number.
struct Message {
  int from = 0, to = 0;
  int64_t key = 0;
  bool local() const { return from == to; }
};

bool is_send(ActionKind k) { return k == ActionKind::SEND_F || k == ActionKind::SEND_B; }

// What a message carries, as one number: the virtual stage it goes into, the
// micro-batch, and the direction (gradient or activation).
int64_t message_key(const Schedule& s, int into, int mb, bool grad) {
  return (static_cast<int64_t>(into) * s.microbatches + mb) * 2 + (grad ? 1 : 0);
}

Message message_of(const Schedule& s, int r, int pos) {
  const Action& a = s.ranks[r][pos];
  const int stage = s.stage_of(r, a.chunk), S = s.virtual_stages();
  const bool grad = a.kind == ActionKind::SEND_B || a.kind == ActionKind::RECV_B;
  int into = stage;
  if (a.kind == ActionKind::SEND_F) into = stage + 1;
  if (a.kind == ActionKind::SEND_B) into = stage - 1;
  const int other = grad ? into + 1 : into - 1;  // the stage it comes from
  if (a.mb < 0 || a.mb >= s.microbatches || a.chunk >= s.chunks || into < 0 || into >= S || other < 0 || other >= S)
    detail::violation(s, {{r, pos}}, detail::at_text(s, r, pos) + " is outside the pipeline (no such peer stage)");
  const int peer = s.rank_of(is_send(a.kind) ? into : other);
  Message msg;
  msg.from = is_send(a.kind) ? r : peer;
  msg.to = is_send(a.kind) ? peer : r;
  msg.key = message_key(s, into, a.mb, grad);
  return msg;
}

// "the activation of micro-batch 2 into virtual stage 1"
std::string describe(const Schedule& s, int64_t key) {
  const bool grad = key % 2 == 1;
  const int64_t into = key / 2 / s.microbatches, mb = key / 2 % s.microbatches;
  return std::string(grad ? "the gradient" : "the activation") + " of micro-batch " + std::to_string(mb) +
         " into virtual stage " + std::to_string(into);
}

int64_t pair_id(int p, int from, int to) { return static_cast<int64_t>(from) * p + to; }

// A pair's sends (in the sender's list order) and receives (in the receiver's).
struct PairLists {
  std::vector<std::pair<int64_t, int>> sends, recvs;  // (message key, list position)
};

std::unordered_map<int64_t, PairLists> pair_lists(const Schedule& s) {
  std::unordered_map<int64_t, PairLists> pairs;
  for (int r = 0; r < s.pipeline_ranks; ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      if (!is_communication(s.ranks[r][i].kind)) continue;
      const Message msg = message_of(s, r, i);
      if (msg.local()) continue;
      PairLists& pl = pairs[pair_id(s.pipeline_ranks, msg.from, msg.to)];
      (is_send(s.ranks[r][i].kind) ? pl.sends : pl.recvs).push_back({msg.key, i});
    }
  return pairs;
}

// Rule 1: a's sends to b and b's receives from a are one sequence.
void check_sequences(const Schedule& s) {
  const int p = s.pipeline_ranks;
  for (const auto& [id, pl] : pair_lists(s)) {
    const int from = static_cast<int>(id / p), to = static_cast<int>(id % p);
    const size_t n = std::min(pl.sends.size(), pl.recvs.size());
    for (size_t k = 0; k < n; ++k) {
      if (pl.sends[k].first == pl.recvs[k].first) continue;
      detail::violation(
          s, {{from, pl.sends[k].second}, {to, pl.recvs[k].second}},
          "pair order: rank " + std::to_string(from) + "'s message #" + std::to_string(k) + " to rank " +
              std::to_string(to) + " is " + detail::at_text(s, from, pl.sends[k].second) + ", " +
              describe(s, pl.sends[k].first) + ", but rank " + std::to_string(to) + "'s receive #" + std::to_string(k) +
              " from rank " + std::to_string(from) + " is " + detail::at_text(s, to, pl.recvs[k].second) + ", " +
              describe(s, pl.recvs[k].first) +
              ": NCCL matches a pair's messages in issue order (no tags), so that buffer would receive the wrong "
              "tensor; both ends must post a pair's messages in the same order (NOTE [pair order])");
    }
    if (pl.sends.size() != pl.recvs.size()) {
      const bool more_sends = pl.sends.size() > n;
      const int who = more_sends ? from : to, pos = (more_sends ? pl.sends : pl.recvs)[n].second;
      detail::violation(s, {{who, pos}},
                        "pair order: rank " + std::to_string(from) + " sends " + std::to_string(pl.sends.size()) +
                            " messages to rank " + std::to_string(to) + " and rank " + std::to_string(to) +
                            " receives " + std::to_string(pl.recvs.size()) + "; the first unmatched one is " +
                            detail::at_text(s, who, pos));
    }
  }
}

// Rule 2: the run of groups and computes under NCCL's stream rules.
// With `repair`, a stall where a rank's group waits on a send whose receive
// its peer has not posted, while the peer's own group is stuck, is resolved
// by posting that receive (and the pair's receives before it) in the peer's
// stuck group: the receiver takes its order from the sender, as Megatron's
// combined send-and-receive calls do. moves() says where each went.
// The run also keeps time (NOTE [coupled sends] in group_waits.h): a compute
// takes the simulator's cost (for the costs given, else unit_costs()) once the one before it and the group holding its input are
// done; a group starts on its rank's stream once the compute before it is
// done and the group before it has completed, and completes once each of its
// operations has met its partner (both started) and the link's latency has
// passed.
class StreamRun {
 public:
  StreamRun(const Schedule& s, bool repair, const Costs* costs = nullptr)
      : s_(s), p_(s.pipeline_ranks), repair_(repair), costs_(costs ? *costs : unit_costs(s.chunks)), ranks_(p_) {
    for (int r = 0; r < p_; ++r) split(r);
    for (const auto& [pair, n] : sends_issued_) posted_[pair].send_at.assign(n, 0.0);
    for (const auto& [pair, n] : recvs_issued_) posted_[pair].recv_at.assign(n, 0.0);
  }

  void run() {
    std::vector<int> todo;
    std::vector<char> queued(p_, 1);
    for (int r = p_ - 1; r >= 0; --r) todo.push_back(r);
    auto wake = [&](int peer) {
      if (!queued[peer]) queued[peer] = 1, todo.push_back(peer);
    };
    for (;;) {
      while (!todo.empty()) {
        const int r = todo.back();
        todo.pop_back();
        queued[r] = 0;
        advance(r, wake);
      }
      if (!repair_ || !repair_stall(wake)) break;
    }
  }

  // Per rank: (list position of a receive, list position it goes right after).
  const std::vector<std::vector<std::pair<int, int>>>& moves() const { return moves_; }

  // Every list reached its end.
  bool finished() const {
    for (const Rank& rk : ranks_)
      if (rk.computes_done < rk.need.size() || rk.groups_done < rk.groups.size()) return false;
    return true;
  }

  // The times of a finished run (detail::TimedRun in stream_run.h).
  detail::TimedRun timed() const {
    detail::TimedRun out;
    if (!finished()) return out;
    double step = 0;
    for (int r = 0; r < p_; ++r) {
      const Rank& rk = ranks_[r];
      if (!rk.compute_end.empty()) step = std::max(step, rk.compute_end.back());
      for (const Group& g : rk.groups) {
        step = std::max(step, g.done);
        const int end = g.computes_before < static_cast<int>(rk.compute_pos.size())
                            ? rk.compute_pos[g.computes_before]
                            : static_cast<int>(s_.ranks[r].size());
        out.groups.push_back({r, rk.ops[g.begin].pos, end, g.done - g.received});
      }
    }
    out.step = step;
    return out;
  }

  // Throws naming each blocked rank when the run did not reach every list's end.
  void report_deadlock() const {
    std::vector<detail::Where> at;
    std::string what;
    for (int r = 0; r < p_; ++r) {
      const Rank& rk = ranks_[r];
      if (rk.computes_done == rk.need.size() && rk.groups_done == rk.groups.size()) continue;
      std::string line;
      if (rk.active) {
        const Group& g = rk.groups[rk.groups_done];
        for (int k = g.begin; k < g.end; ++k) {
          const Op& op = rk.ops[k];
          if (matched(op)) continue;
          const Posted& pp = posted_[op.pair];
          const int theirs = op.send ? pp.recvs : pp.sends;
          at.push_back({r, op.pos});
          line = detail::at_text(s_, r, op.pos) + " waits for rank " + std::to_string(op.peer) + "'s " +
                 (op.send ? "receive" : "send") + " #" + std::to_string(op.seq) + " on their pair (it has posted " +
                 std::to_string(theirs) + ")";
          break;
        }
      } else if (rk.computes_done < rk.need.size()) {
        const int pos = rk.compute_pos[rk.computes_done];
        at.push_back({r, pos});
        line = detail::at_text(s_, r, pos) + " waits for its input";
      } else {
        const int pos = rk.ops[rk.groups[rk.groups_done].begin].pos;
        at.push_back({r, pos});
        line = detail::at_text(s_, r, pos) + " waits for the compute before it";
      }
      what += (what.empty() ? "" : "; ") + line;
    }
    if (!at.empty())
      detail::violation(s_, at,
                        "deadlock under NCCL's rules (a rank's communication between two computes launches as one "
                        "group, its groups run in order on one stream, a receive holds it until matched: NOTE [pair "
                        "order]): " + what);
  }

 private:
  struct Op {
    int pair;  // index into posted_
    int seq;   // its place in the pair's sequence
    bool send;
    int pos;   // list position
    int peer;
    double latency = 0;  // of the link it crosses
    bool moved = false;  // posted with an earlier group (repair)
  };
  struct Group {
    int computes_before = 0;  // computes that precede it in the list
    int begin = 0, end = 0;   // its ops: ops[begin, end)
    double start = 0;         // it starts on the stream
    double received = 0;      // its receives' partners have started (and it has)
    double done = 0;          // every partner has started: it completes
  };
  struct Rank {
    std::vector<Op> ops;
    std::vector<Group> groups;
    std::vector<int> need;         // per compute: the group holding its input, -1 for none
    std::vector<int> compute_pos;  // per compute: list position
    std::vector<double> cost, compute_end;  // per compute: its cost, when it ends
    size_t computes_done = 0, groups_done = 0;
    bool active = false;     // groups[groups_done] is posted
    std::vector<int> extra;  // ops moved into the active group (repair)
  };
  struct Posted {
    int sends = 0, recvs = 0;
    std::vector<double> send_at, recv_at;  // per place in the sequence: when its group started
  };

  int pair_index(int from, int to) {
    auto [it, added] = pair_of_.try_emplace(pair_id(p_, from, to), static_cast<int>(posted_.size()));
    if (added) posted_.push_back({});
    return it->second;
  }

  // Rank r's list as computes and groups of the communication between them.
  void split(int r) {
    Rank& rk = ranks_[r];
    std::unordered_map<int64_t, int> recv_group;  // received, not yet consumed: key -> group
    bool open = false;
    const auto& list = s_.ranks[r];
    const int S = s_.virtual_stages();
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      if (is_communication(a.kind)) {
        const Message msg = message_of(s_, r, i);
        if (msg.local()) continue;  // a copy on this rank, not an NCCL operation
        if (!open) rk.groups.push_back({static_cast<int>(rk.need.size()), static_cast<int>(rk.ops.size()),
                                        static_cast<int>(rk.ops.size())}),
            open = true;
        const bool send = is_send(a.kind);
        const int pair = pair_index(msg.from, msg.to);
        int& count = send ? sends_issued_[pair] : recvs_issued_[pair];
        if (!send) recv_op_[pair].push_back({r, static_cast<int>(rk.ops.size())});
        rk.ops.push_back({pair, count++, send, i, send ? msg.to : msg.from, link_latency(msg.key)});
        rk.groups.back().end = static_cast<int>(rk.ops.size());
        if (!send) recv_group[msg.key] = static_cast<int>(rk.groups.size()) - 1;
        continue;
      }
      if (!is_compute(a.kind)) continue;  // REDUCE_GRAD: neither
      open = false;
      const int stage = s_.stage_of(r, a.chunk);
      int need = -1;
      const bool has_input = (a.kind == ActionKind::F && stage > 0) || (is_backward(a.kind) && stage < S - 1);
      if (has_input) {
        auto it = recv_group.find(message_key(s_, stage, a.mb, a.kind != ActionKind::F));
        if (it != recv_group.end()) need = it->second, recv_group.erase(it);
      }
      if (a.overlaps_next()) {  // NOTE [overlapped pairs]: the pair starts once its partner's input is in too
        const size_t j = pair_partner(list, static_cast<size_t>(i));
        if (j < list.size() && is_backward(list[j].kind)) {
          const int pstage = s_.stage_of(r, list[j].chunk);
          if (pstage < S - 1) {
            auto it = recv_group.find(message_key(s_, pstage, list[j].mb, true));
            if (it != recv_group.end()) need = std::max(need, it->second);
          }
        }
      }
      rk.need.push_back(need);
      rk.compute_pos.push_back(i);
      rk.cost.push_back(stage_action_cost(costs_, a.kind, s_.chunks, stage));
    }
  }

  // Both ends of op's place in its pair's sequence are posted.
  bool paired(const Op& op) const {
    const Posted& pp = posted_[op.pair];
    return std::min(pp.sends, pp.recvs) > op.seq;
  }
  // Done where its group is: a moved op counts with the group it joined (rk.extra).
  bool matched(const Op& op) const { return op.moved || paired(op); }
  bool group_matched(const Rank& rk, const Group& g) const {
    for (int k = g.begin; k < g.end; ++k)
      if (!matched(rk.ops[k])) return false;
    for (int k : rk.extra)
      if (!paired(rk.ops[k])) return false;
    return true;
  }

  template <class Wake>
  bool repair_stall(Wake&& wake) {
    bool any = false;
    for (int r = 0; r < p_; ++r) {
      Rank& rk = ranks_[r];
      if (!rk.active) continue;
      const Group& g = rk.groups[rk.groups_done];
      for (int k = g.begin; k < g.end; ++k) {
        const Op& op = rk.ops[k];
        if (!op.send || matched(op)) continue;
        // The peer's receives of this pair up to op.seq go into its stuck group.
        Posted& pp = posted_[op.pair];
        Rank& q = ranks_[op.peer];
        if (!q.active) continue;
        const auto& recvs = recv_op_[op.pair];
        const int last_pos = last_position(q);
        for (int seq = pp.recvs; seq <= op.seq && seq < static_cast<int>(recvs.size()); ++seq) {
          Op& rv = q.ops[recvs[seq].second];
          rv.moved = true;
          pp.recv_at[seq] = q.groups[q.groups_done].start;
          q.extra.push_back(recvs[seq].second);
          moves_[op.peer].push_back({rv.pos, last_pos});
          pp.recvs = seq + 1;
          any = true;
        }
        wake(r);
        wake(op.peer);
      }
    }
    return any;
  }

  // The latency of the link a message crosses: boundary into - 1 -> into for
  // an activation, into -> into + 1 for a gradient (Costs::latency).
  double link_latency(int64_t key) const {
    if (costs_.latency.empty()) return 0.0;
    if (costs_.latency.size() == 1) return costs_.latency[0];
    const bool grad = key % 2 == 1;
    const int64_t into = key / 2 / s_.microbatches;
    return costs_.latency[static_cast<size_t>(grad ? into : into - 1)];
  }

  // When g completes: each operation has met its partner (both started; a
  // moved receive counts with the group it joined) and crossed its link.
  void complete(const Rank& rk, Group& g) const {
    g.done = g.received = g.start;
    auto partner = [&](const Op& op) {
      const Posted& pp = posted_[op.pair];
      const double t = std::max(g.start, op.send ? pp.recv_at[op.seq] : pp.send_at[op.seq]) + op.latency;
      g.done = std::max(g.done, t);
      if (!op.send) g.received = std::max(g.received, t);
    };
    for (int k = g.begin; k < g.end; ++k)
      if (!rk.ops[k].moved) partner(rk.ops[k]);
    for (int k : rk.extra) partner(rk.ops[k]);
  }

  // The list position the active group of rk ends at (its last op's).
  int last_position(const Rank& rk) const {
    const Group& g = rk.groups[rk.groups_done];
    int pos = -1;
    for (int k = g.begin; k < g.end; ++k)
      if (!rk.ops[k].moved) pos = std::max(pos, rk.ops[k].pos);
    return pos;
  }

  template <class Wake>
  void advance(int r, Wake&& wake) {
    Rank& rk = ranks_[r];
    for (bool moved = true; moved;) {
      moved = false;
      while (rk.computes_done < rk.need.size() && rk.need[rk.computes_done] < static_cast<int>(rk.groups_done)) {
        const size_t c = rk.computes_done;
        const double input = rk.need[c] >= 0 ? rk.groups[rk.need[c]].done : 0.0;
        rk.compute_end.push_back(std::max(input, c > 0 ? rk.compute_end[c - 1] : 0.0) + rk.cost[c]);
        ++rk.computes_done, moved = true;
      }
      if (rk.groups_done == rk.groups.size()) continue;
      Group& g = rk.groups[rk.groups_done];
      if (!rk.active && g.computes_before <= static_cast<int>(rk.computes_done)) {
        g.start = std::max(g.computes_before > 0 ? rk.compute_end[g.computes_before - 1] : 0.0,
                           rk.groups_done > 0 ? rk.groups[rk.groups_done - 1].done : 0.0);
        for (int k = g.begin; k < g.end; ++k) {  // launched as one: every op is posted
          const Op& op = rk.ops[k];
          if (op.moved) continue;  // posted with an earlier group
          Posted& pp = posted_[op.pair];
          int& posted = op.send ? pp.sends : pp.recvs;
          posted = std::max(posted, op.seq + 1);
          (op.send ? pp.send_at : pp.recv_at)[op.seq] = g.start;
          wake(op.peer);
        }
        rk.active = moved = true;
      }
      if (rk.active && group_matched(rk, g)) {
        complete(rk, g);
        rk.active = false;
        rk.extra.clear();
        ++rk.groups_done;
        moved = true;
      }
    }
  }

  const Schedule& s_;
  const int p_;
  const bool repair_;
  const Costs costs_;  // the run's costs: those given, else unit_costs()
  std::vector<Rank> ranks_;
  std::unordered_map<int, std::vector<std::pair<int, int>>> recv_op_;  // pair -> (rank, op) of each receive
  std::vector<std::vector<std::pair<int, int>>> moves_ = std::vector<std::vector<std::pair<int, int>>>(p_);
  std::unordered_map<int64_t, int> pair_of_;
  std::vector<Posted> posted_;
  std::unordered_map<int, int> sends_issued_, recvs_issued_;  // per pair, while splitting
};

}  // namespace

namespace detail {

TimedRun timed_stream_run(const Schedule& s, const Costs* costs) {
  StreamRun run(s, false, costs);
  run.run();
  return run.timed();
}

}  // namespace detail

void check_pair_order(const Schedule& s) {
  check_sequences(s);
  StreamRun run(s, false);
  run.run();
  run.report_deadlock();
}

namespace {

// Each non-local message's place in its sender's order to its receiver (k: the sender's k-th to it).
std::unordered_map<int64_t, int> send_sequence(const Schedule& s) {
  const int p = s.pipeline_ranks;
  std::unordered_map<int64_t, int> seq_of;  // message key -> k
  std::unordered_map<int64_t, int> count;   // per pair
  for (int r = 0; r < p; ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      if (!is_send(s.ranks[r][i].kind)) continue;
      const Message msg = message_of(s, r, i);
      if (!msg.local()) seq_of[msg.key] = count[pair_id(p, msg.from, msg.to)]++;
    }
  return seq_of;
}

// Rank r's receives from each peer posted in the peer's send order: a receive moves up to the
// earliest compute (anchor) a later message from that peer is posted before; the receives at one
// anchor by peer, then by k. Unchanged when already so.
void anchor_receives(Schedule& s, int r, const std::unordered_map<int64_t, int>& seq_of) {
  auto& list = s.ranks[r];
  const int n = static_cast<int>(list.size());
  // Each non-local receive: its peer, k, and the compute it was posted before (its anchor).
  struct Recv {
    int peer, seq, anchor, pos;
  };
  std::vector<Recv> recvs;
  std::unordered_map<int, std::vector<size_t>> by_peer;
  int next_compute = n;
  std::vector<int> anchor_of(n + 1, n);
  for (int i = n - 1; i >= 0; --i) {
    anchor_of[i] = next_compute;
    if (is_compute(list[i].kind)) next_compute = i;
  }
  for (int i = 0; i < n; ++i) {
    const ActionKind k = list[i].kind;
    if (k != ActionKind::RECV_F && k != ActionKind::RECV_B) continue;
    const Message msg = message_of(s, r, i);
    auto it = seq_of.find(msg.key);
    if (msg.local() || it == seq_of.end()) continue;  // a local hand-over, or no send: the validator says so
    by_peer[msg.from].push_back(recvs.size());
    recvs.push_back({msg.from, it->second, anchor_of[i], i});
  }
  bool moved = false;
  for (auto& [peer, idx] : by_peer) {  // suffix minimum of anchors over the sender's order
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return recvs[a].seq < recvs[b].seq; });
    int lowest = n;
    for (auto it = idx.rbegin(); it != idx.rend(); ++it) {
      Recv& rv = recvs[*it];
      lowest = std::min(lowest, rv.anchor);
      if (lowest < rv.anchor) rv.anchor = lowest, moved = true;
    }
  }
  if (!moved) {  // same anchors: the order within an anchor still follows the sender's
    for (auto& [peer, idx] : by_peer)
      for (size_t j = 1; j < idx.size(); ++j)
        if (recvs[idx[j]].pos < recvs[idx[j - 1]].pos) moved = true;
    if (!moved) return;
  }
  std::vector<std::vector<size_t>> at(n + 1);  // anchor -> receives placed right before it
  for (size_t j = 0; j < recvs.size(); ++j) at[recvs[j].anchor].push_back(j);
  std::vector<char> is_moved_recv(n, 0);
  for (const Recv& rv : recvs) is_moved_recv[rv.pos] = 1;
  ActionList out;
  out.reserve(list.size());
  auto place = [&](int anchor) {
    auto& here = at[anchor];
    std::sort(here.begin(), here.end(), [&](size_t a, size_t b) {
      return recvs[a].peer != recvs[b].peer ? recvs[a].peer < recvs[b].peer : recvs[a].seq < recvs[b].seq;
    });
    for (size_t j : here) out.push_back(list[recvs[j].pos]);
  };
  for (int i = 0; i < n; ++i) {
    if (is_moved_recv[i]) continue;
    if (is_compute(list[i].kind)) place(i);
    out.push_back(list[i]);
  }
  place(n);
  list = std::move(out);
}

// Receives that would leave two groups waiting on each other join the earlier group of their
// receiver. A deadlock no move resolves is left for the validator to report.
void join_waiting_groups(Schedule& s) {
  const int p = s.pipeline_ranks;
  StreamRun run(s, true);
  run.run();
  for (int r = 0; r < p; ++r) {
    const auto& moves = run.moves()[r];
    if (moves.empty()) continue;
    auto& list = s.ranks[r];
    const int n = static_cast<int>(list.size());
    std::vector<std::vector<int>> after(n + 1);  // position + 1 -> receives placed right after it
    std::vector<char> is_moved(n, 0);
    for (const auto& [from, to] : moves) after[to + 1].push_back(from), is_moved[from] = 1;
    ActionList out;
    out.reserve(list.size());
    for (int from : after[0]) out.push_back(list[from]);
    for (int i = 0; i < n; ++i) {
      if (!is_moved[i]) out.push_back(list[i]);
      for (int from : after[i + 1]) out.push_back(list[from]);
    }
    list = std::move(out);
  }
}

}  // namespace

void order_receives(Schedule& s) {
  const std::unordered_map<int64_t, int> seq_of = send_sequence(s);
  for (int r = 0; r < s.pipeline_ranks; ++r) anchor_receives(s, r, seq_of);
  join_waiting_groups(s);
}

}  // namespace trident::sched
