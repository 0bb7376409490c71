// NOTE [group waits]: the grouped run and the pass that moves sends.
#include "schedules/group_waits.h"

#include <algorithm>

#include "schedules/generators.h"
#include "schedules/pair_order.h"

namespace trident::sched {
namespace {

double action_cost(ActionKind k) { return k == ActionKind::B ? 2.0 : 1.0; }  // F, I and W cost 1

// One rank's list cut into groups (the communication between two computes)
// and computes, as the executor posts and runs them.
struct Item {
  bool group;
  int index;  // group: global group id; compute: position in the rank's list
};

struct Run {
  double step = -1;                 // -1: deadlock
  std::vector<double> group_wait;   // per group: how long a send held it past its receives (0 if none)
  std::vector<int> group_rank, group_first, group_end;  // per group: rank, list range [first, end)
};

Run run_grouped(const Schedule& s) {
  const int p = s.pipeline_ranks;
  const StageMap map = s.stage_map();
  Run out;
  const int m = s.microbatches, v = s.chunks;
  std::vector<std::vector<Item>> items(static_cast<size_t>(p));
  // Per group: partners (global group ids), split by whether this side sends.
  std::vector<std::vector<int>> send_partners, recv_partners;
  // [(sender * p + receiver) * 2 + direction]: the sender's groups and the receiver's, in order.
  std::vector<std::pair<std::vector<int>, std::vector<int>>> pairs(static_cast<size_t>(p) * p * 2);
  // [((rank * 2 + direction) * v + chunk) * m + mb]: the group that receives that compute's input, -1 none.
  std::vector<int> input_group(static_cast<size_t>(p) * 2 * v * m, -1);
  const auto input_slot = [&](int r, int dir, int chunk, int mb) {
    return ((static_cast<size_t>(r) * 2 + static_cast<size_t>(dir)) * static_cast<size_t>(v) + static_cast<size_t>(chunk)) *
               static_cast<size_t>(m) + static_cast<size_t>(mb);
  };
  for (int r = 0; r < p; ++r) {
    const ActionList& list = s.ranks[static_cast<size_t>(r)];
    int open = -1;
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (is_compute(a.kind)) {
        if (open >= 0) out.group_end[static_cast<size_t>(open)] = static_cast<int>(i);
        open = -1;
        items[static_cast<size_t>(r)].push_back({false, static_cast<int>(i)});
        continue;
      }
      if (!is_communication(a.kind)) continue;
      const int peer = peer_rank(map, r, a);
      if (peer == r) continue;  // a hand-over: no NCCL operation
      if (open < 0) {
        open = static_cast<int>(out.group_rank.size());
        out.group_rank.push_back(r);
        out.group_first.push_back(static_cast<int>(i));
        out.group_end.push_back(static_cast<int>(list.size()));
        send_partners.emplace_back();
        recv_partners.emplace_back();
        items[static_cast<size_t>(r)].push_back({true, open});
      }
      const bool send = a.kind == ActionKind::SEND_F || a.kind == ActionKind::SEND_B;
      const int dir = a.kind == ActionKind::SEND_F || a.kind == ActionKind::RECV_F ? 0 : 1;
      auto& seq = pairs[(static_cast<size_t>(send ? r : peer) * p + static_cast<size_t>(send ? peer : r)) * 2 +
                        static_cast<size_t>(dir)];
      (send ? seq.first : seq.second).push_back(open);
      if (!send) input_group[input_slot(r, dir, a.chunk, a.mb)] = open;
    }
  }
  for (const auto& seq : pairs) {
    if (seq.first.size() != seq.second.size()) return out;  // unmatched: check_pair_order names it
    for (size_t k = 0; k < seq.first.size(); ++k) {
      send_partners[static_cast<size_t>(seq.first[k])].push_back(seq.second[k]);
      recv_partners[static_cast<size_t>(seq.second[k])].push_back(seq.first[k]);
    }
  }
  const size_t groups = out.group_rank.size();
  std::vector<double> posted(groups, -1.0), done(groups, -1.0);
  out.group_wait.assign(groups, 0.0);
  std::vector<int> last_group(static_cast<size_t>(p), -1);  // per rank: the group posted before this one
  std::vector<int> prev_group(groups, -1);
  // A group completes once it and every partner are posted, after the one before it on its rank.
  auto completion = [&](int g) -> double {
    if (done[static_cast<size_t>(g)] >= 0) return done[static_cast<size_t>(g)];
    std::vector<int> chain;
    for (int h = g; h >= 0 && done[static_cast<size_t>(h)] < 0; h = prev_group[static_cast<size_t>(h)]) chain.push_back(h);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const auto h = static_cast<size_t>(*it);
      if (posted[h] < 0) return -1;
      double t = posted[h], recv_t = posted[h];
      if (prev_group[h] >= 0) t = std::max(t, done[static_cast<size_t>(prev_group[h])]), recv_t = t;
      for (int q : recv_partners[h]) {
        if (posted[static_cast<size_t>(q)] < 0) return -1;
        t = std::max(t, posted[static_cast<size_t>(q)]);
        recv_t = std::max(recv_t, posted[static_cast<size_t>(q)]);
      }
      for (int q : send_partners[h]) {
        if (posted[static_cast<size_t>(q)] < 0) return -1;
        t = std::max(t, posted[static_cast<size_t>(q)]);
      }
      done[h] = t;
      out.group_wait[h] = t - recv_t;
    }
    return done[static_cast<size_t>(g)];
  };
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto ru = static_cast<size_t>(r);
      const ActionList& list = s.ranks[ru];
      while (pc[ru] < items[ru].size()) {
        const Item& it = items[ru][pc[ru]];
        if (it.group) {
          posted[static_cast<size_t>(it.index)] = clock[ru];
          prev_group[static_cast<size_t>(it.index)] = last_group[ru];
          last_group[ru] = it.index;
          ++pc[ru];
          progress = true;
          continue;
        }
        const Action& a = list[static_cast<size_t>(it.index)];
        double start = clock[ru];
        if (a.kind != ActionKind::W) {
          const int g = input_group[input_slot(r, a.kind == ActionKind::F ? 0 : 1, a.chunk, a.mb)];
          if (g >= 0) {
            const double t = completion(g);
            if (t < 0) break;  // not yet: another rank must post first
            start = std::max(start, t);
          }
        }
        clock[ru] = start + action_cost(a.kind);
        ++pc[ru];
        progress = true;
      }
    }
  }
  double step = 0;
  for (int r = 0; r < p; ++r) {
    if (pc[static_cast<size_t>(r)] < items[static_cast<size_t>(r)].size()) return out;  // deadlock
    step = std::max(step, clock[static_cast<size_t>(r)]);
  }
  for (size_t g = 0; g < groups; ++g) {
    const double t = completion(static_cast<int>(g));
    if (t < 0) return out;
    step = std::max(step, t);
  }
  out.step = step;
  return out;
}

size_t action_count(const Schedule& s) {
  size_t n = 0;
  for (const auto& list : s.ranks) n += list.size();
  return n;
}

}  // namespace

double grouped_step_time(const Schedule& s) { return run_grouped(s).step; }

Schedule defer_coupled_sends(const Schedule& s) {
  if (!has_communication(s) || action_count(s) > kMaxDeferActions) return s;
  Schedule best = s;
  Run run = run_grouped(best);
  if (run.step < 0) return s;
  // Scan the groups in order; after a move the ids from that group on may
  // shift, so the scan goes on from the same id. A scan without a move ends it.
  size_t tries = 0;
  const size_t max_tries = 4 * run.group_wait.size() + 16;  // at most four tries per group
  for (bool moved = true; moved && tries < max_tries;) {
    moved = false;
    for (size_t g = 0; g < run.group_wait.size(); ++g) {
      if (run.group_wait[g] <= 0) continue;  // no send held this group past its receives
      const auto r = static_cast<size_t>(run.group_rank[g]);
      const ActionList& list = best.ranks[r];
      const auto first = static_cast<size_t>(run.group_first[g]), end = static_cast<size_t>(run.group_end[g]);
      if (end >= list.size() || !is_compute(list[end].kind)) continue;  // no compute after it to move past
      // The group's sends go right after that compute, ahead of what follows it.
      ActionList moved_list(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(first));
      ActionList sends;
      for (size_t i = first; i < end; ++i) {
        const bool send = list[i].kind == ActionKind::SEND_F || list[i].kind == ActionKind::SEND_B;
        (send && peer_rank(best.stage_map(), static_cast<int>(r), list[i]) != static_cast<int>(r) ? sends
                                                                                                  : moved_list)
            .push_back(list[i]);
      }
      if (sends.empty()) continue;
      moved_list.push_back(list[end]);
      moved_list.insert(moved_list.end(), sends.begin(), sends.end());
      moved_list.insert(moved_list.end(), list.begin() + static_cast<std::ptrdiff_t>(end) + 1, list.end());
      Schedule candidate = best;
      candidate.ranks[r] = std::move(moved_list);
      if (++tries > max_tries) break;
      const Run tried = run_grouped(candidate);
      if (tried.step >= 0 && tried.step < run.step) {
        best = std::move(candidate);
        run = tried;
        moved = true;
        --g;  // this id again: it may name the next group now
      }
    }
  }
  try {
    check_pair_order(best);
  } catch (const ScheduleError&) {
    return s;  // never run a list the validator refuses
  }
  return best;
}

Schedule place_communication(const Schedule& compute_only) {
  return defer_coupled_sends(add_communication(compute_only));
}

}  // namespace trident::sched
