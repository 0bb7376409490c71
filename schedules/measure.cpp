// Measured timelines: see measure.h.
#include "schedules/measure.h"
#include "schedules/format.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace trident::sched {
namespace {

std::string num(double v) { return fixed(v, 3); }
std::string quoted(const std::string& s) { return json_string(s); }

// The inverse of to_token() (KIND MB [.CHUNK], or RD [.CHUNK]); action.h keeps its parser private.
Action parse_token(const std::string& tok) {
  if (tok.rfind("RD", 0) == 0) {  // REDUCE_GRAD: no micro-batch
    int chunk = 0;
    if (tok.size() == 2 || (std::sscanf(tok.c_str() + 2, ".%d", &chunk) == 1 && tok[2] == '.')) return reduce_grad(chunk);
  }
  static const std::pair<const char*, ActionKind> kKinds[] = {
      {"SF", ActionKind::SEND_F}, {"RF", ActionKind::RECV_F}, {"SB", ActionKind::SEND_B}, {"RB", ActionKind::RECV_B},
      {"F", ActionKind::F},       {"B", ActionKind::B},       {"I", ActionKind::I},       {"W", ActionKind::W}};
  for (const auto& [prefix, kind] : kKinds) {
    const std::string pre = prefix;
    if (tok.rfind(pre, 0) != 0) continue;
    int mb = -1, chunk = 0;
    char dot = 0;
    const int n = std::sscanf(tok.c_str() + pre.size(), "%d%c%d", &mb, &dot, &chunk);
    if (n == 1 || (n == 3 && dot == '.')) return {kind, mb, n == 3 ? chunk : 0};
    break;
  }
  throw ScheduleError("recording: '" + tok + "' is not an action token");
}

}  // namespace

std::string to_text(const RankRecording& r) {
  std::ostringstream s;
  s << "origin " << num(r.origin_us) << "\n";
  for (const TimedAction& a : r.actions) s << "a " << to_token(a.action) << " " << num(a.start) << " " << num(a.end) << "\n";
  for (const Phase& p : r.phases) s << "p " << p.name << " " << num(p.start) << " " << num(p.end) << "\n";
  return s.str();
}

RankRecording recording_from_text(const std::string& text, int rank) {
  RankRecording r;
  r.rank = rank;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    std::string kind, name;
    ls >> kind;
    if (kind == "origin") {
      ls >> r.origin_us;
    } else if (kind == "a" || kind == "p") {
      double a = 0, b = 0;
      ls >> name >> a >> b;
      if (kind == "a") {
        r.actions.push_back({parse_token(name), a, b});
      } else {
        r.phases.push_back({name, a, b});
      }
    }
    if (!ls) throw ScheduleError("rank " + std::to_string(rank) + " recording: bad line '" + line + "'");
  }
  return r;
}

Timeline to_timeline(const std::vector<RankRecording>& pipeline, int microbatches, int chunks) {
  Timeline t;
  t.pipeline_ranks = static_cast<int>(pipeline.size());
  t.microbatches = microbatches;
  t.chunks = chunks;
  t.us_per_unit = 1000.0;
  for (const RankRecording& r : pipeline) {
    t.ranks.emplace_back();
    for (const TimedAction& a : r.actions)
      t.ranks.back().push_back({a.action, (a.start - r.origin_us) / 1000.0, (a.end - r.origin_us) / 1000.0});
  }
  return t;
}

MeasuredCosts measured_costs(const std::vector<Timeline>& steps) {
  MeasuredCosts m;
  double sum[4] = {0, 0, 0, 0};
  int n[4] = {0, 0, 0, 0};
  int chunks = 1;
  for (const Timeline& t : steps) {
    chunks = t.chunks;
    for (const auto& rank : t.ranks)
      for (const TimedAction& a : rank) {
        int k = -1;
        switch (a.action.kind) {
          case ActionKind::F: k = 0; break;
          case ActionKind::B: k = 1; break;
          case ActionKind::I: k = 2; break;
          case ActionKind::W: k = 3; break;
          default: break;
        }
        if (k < 0) continue;
        sum[k] += a.end - a.start;
        ++n[k];
        ++m.samples;
      }
  }
  auto mean = [&](int k) { return n[k] ? sum[k] / n[k] : 0.0; };
  m.f = mean(0), m.b = mean(1), m.i = mean(2), m.w = mean(3);
  const double v = chunks;
  // The simulator wants F > 0 and B > W >= 0 for a full stage.
  m.costs.forward = std::max(1e-9, m.f * v);
  const double backward = n[1] ? m.b : m.i + m.w;  // a split backward costs I + W
  m.costs.weight = m.w * v;
  m.costs.backward = std::max(backward * v, m.costs.weight + 1e-9);
  return m;
}

namespace {

// A receive NOTE [measured link latency] (measure.h) may count.
struct WaitedReceive {
  size_t index = 0;       // in its rank's timeline
  double wait_start = 0;  // when its consumer started waiting: the end of the compute before it
  std::vector<size_t> group;  // the other non-local operations of its group (timeline indices)
};

bool is_receive(ActionKind k) { return k == ActionKind::RECV_F || k == ActionKind::RECV_B; }

// The compute that consumes receive `a`: F of its micro-batch and chunk, or its B or I.
bool consumes(const Action& c, const Action& a) {
  if (c.mb != a.mb || c.chunk != a.chunk) return false;
  return a.kind == ActionKind::RECV_F ? c.kind == ActionKind::F : is_backward(c.kind);
}

// Rank r's non-local receives that it waited for at their consumer (longer than min_wait).
std::vector<WaitedReceive> waited_receives(const Schedule& s, int r, const std::vector<TimedAction>& mine,
                                           double min_wait) {
  std::vector<WaitedReceive> out;
  for (size_t i = 0; i < mine.size(); ++i) {
    const Action& a = mine[i].action;
    if (!is_receive(a.kind) || peer_rank(s.stage_map(), r, a) == r) continue;
    size_t c = i + 1;
    while (c < mine.size() && !consumes(mine[c].action, a)) ++c;
    if (c == mine.size()) continue;
    double wait_start = mine[i].start;  // no compute before: idle since its post
    for (size_t k = c; k-- > 0;)
      if (is_compute(mine[k].action.kind)) {
        wait_start = std::max(wait_start, mine[k].end);
        break;
      }
    if (mine[i].end - wait_start <= min_wait) continue;  // the data was there before it was needed
    WaitedReceive w{i, wait_start, {}};
    size_t lo = i, hi = i + 1;  // the group: the communication between two computes
    while (lo > 0 && !is_compute(mine[lo - 1].action.kind)) --lo;
    while (hi < mine.size() && !is_compute(mine[hi].action.kind)) ++hi;
    for (size_t k = lo; k < hi; ++k)
      if (k != i && is_communication(mine[k].action.kind) && peer_rank(s.stage_map(), r, mine[k].action) != r)
        w.group.push_back(k);
    out.push_back(std::move(w));
  }
  return out;
}

// When the peer of rank r's operation `a` made its half of it ready: its send's post, or
// its receive's post for a send of r's; NaN when the peer has none.
double partner_ready(const Schedule& s, const Timeline& t, int r, const Action& a) {
  const int peer = peer_rank(s.stage_map(), r, a);
  const Action other = counterpart(s.stage_map(), r, a);
  for (const TimedAction& b : t.ranks.at(static_cast<size_t>(peer)))
    if (b.action.kind == other.kind && b.action.mb == other.mb && b.action.chunk == other.chunk) return b.start;
  return std::nan("");
}

// The latest of `ready` and `other` that could have held a receive ending at `end`: an
// operation whose partner was ready only after it did not (a simulated timeline, which
// waits for inputs only, has such; the executor's groups never do).
double held_until(double ready, double other, double end) { return other < end ? std::max(ready, other) : ready; }

// When the last operation of receive w's group became ready (its own send's post, or another
// operation's partner's, NOTE [measured link latency]); NaN when its send is not recorded.
// `one_peer` (optional): whether every operation of the group is with the receive's peer.
double group_ready(const Schedule& s, const Timeline& t, int r, const WaitedReceive& w, bool* one_peer = nullptr) {
  const auto& mine = t.ranks.at(static_cast<size_t>(r));
  const TimedAction& a = mine[w.index];
  const int from = peer_rank(s.stage_map(), r, a.action);
  double ready = partner_ready(s, t, r, a.action);
  if (one_peer) *one_peer = true;
  for (size_t k : w.group) {
    if (one_peer) *one_peer = *one_peer && peer_rank(s.stage_map(), r, mine[k].action) == from;
    ready = held_until(ready, partner_ready(s, t, r, mine[k].action), a.end);
  }
  return ready;
}

// One receive's latency (NOTE [measured link latency]), on a timeline whose ranks share a clock.
struct LatencySample {
  size_t boundary = 0;  // virtual-stage boundary b -> b + 1
  int dir = 0;          // 0: activation, 1: gradient
  double d = 0;         // its end - the last of its group to be ready
  bool unbiased = false;  // its rank waited already when that one became ready
};

std::vector<LatencySample> latency_samples(const Schedule& s, const Timeline& t, double min_wait) {
  std::vector<LatencySample> out;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    const auto& mine = t.ranks[r];
    const int rank = static_cast<int>(r);
    for (const WaitedReceive& w : waited_receives(s, rank, mine, min_wait)) {
      const TimedAction& a = mine[w.index];
      const double ready = group_ready(s, t, rank, w);
      if (std::isnan(ready) || a.end < ready) continue;
      const int stage = s.stage_of(rank, a.action.chunk);
      const int dir = a.action.kind == ActionKind::RECV_F ? 0 : 1;
      out.push_back({static_cast<size_t>(dir == 0 ? stage - 1 : stage), dir, a.end - ready, w.wait_start <= ready});
    }
  }
  return out;
}

// The mean of the unbiased samples, or of all waited ones where none is (a balanced pipeline
// under load may give none in a few steps): {sum, count} pairs of both kinds.
double preferred_mean(const double unbiased[2], const double waited[2]) {
  if (unbiased[1] > 0) return unbiased[0] / unbiased[1];
  return waited[1] > 0 ? waited[0] / waited[1] : std::nan("");
}

}  // namespace

double measured_latency(const Schedule& s, const Timeline& t) {
  double unbiased[2] = {0, 0}, waited[2] = {0, 0};
  for (const LatencySample& x : latency_samples(s, t, 0.0)) {
    waited[0] += x.d, waited[1] += 1;
    if (x.unbiased) unbiased[0] += x.d, unbiased[1] += 1;
  }
  const double mean = preferred_mean(unbiased, waited);
  return std::isnan(mean) ? 0.0 : mean;
}

void KindSums::add(ActionKind k, double duration) {
  if (!is_compute(k)) return;
  const int i = static_cast<int>(k);  // F, B, I, W are 0..3
  sum[i] += duration;
  count[i] += 1;
}

Costs costs_from_stage_sums(const std::vector<KindSums>& stages, std::vector<double> latency) {
  double all[4] = {0, 0, 0, 0}, n_all[4] = {0, 0, 0, 0};
  for (const KindSums& k : stages)
    for (int i = 0; i < 4; ++i) all[i] += k.sum[i], n_all[i] += k.count[i];
  Costs c;
  c.latency = std::move(latency);
  for (const KindSums& k : stages) {
    double mean[4];
    for (int i = 0; i < 4; ++i)
      mean[i] = k.count[i] > 0 ? k.sum[i] / k.count[i] : n_all[i] > 0 ? all[i] / n_all[i] : 0.0;
    const bool split = k.count[1] == 0 && (k.count[2] > 0 || (n_all[1] == 0 && n_all[2] > 0));  // I + W
    StageCosts x;
    x.forward = std::max(1e-9, mean[0]);  // the simulator wants F > 0 and B > W >= 0
    x.weight = split ? mean[3] : 0.0;
    x.backward = std::max(split ? mean[2] + mean[3] : mean[1], x.weight + 1e-9);
    c.stage_costs.push_back(x);
  }
  return c;
}

namespace {

// Rank r's clock minus rank 0's, per rank, from the waits each link's two directions saw
// (NOTE [measured link latency]): an activation's d = arrival - post reads L + (o_q - o_r),
// a gradient's L - (o_q - o_r), so half the difference of their means is the offset
// whatever the latency. Ranks reached by no link keep offset 0.
std::vector<double> clock_offsets(const Schedule& s, const std::vector<Timeline>& steps, double min_wait) {
  const int p = s.pipeline_ranks;
  // [pair (r, r + 1)][up: sum, count; down: sum, count]
  std::vector<std::array<double, 4>> d(static_cast<size_t>(p), {0, 0, 0, 0});
  for (const Timeline& t : steps)
    for (int r = 0; r < p; ++r)
      for (const WaitedReceive& w : waited_receives(s, r, t.ranks[static_cast<size_t>(r)], min_wait)) {
        const TimedAction& a = t.ranks[static_cast<size_t>(r)][w.index];
        const int from = peer_rank(s.stage_map(), r, a.action);
        // From the last of its group to be ready, all on `from`'s clock (a group of one peer).
        bool one_peer = true;
        const double at = group_ready(s, t, r, w, &one_peer);
        if (std::isnan(at) || !one_peer) continue;
        // The pair (lo, lo + 1) of neighbouring ranks, the message going up (lo -> lo + 1) or down.
        const int lo = std::min(from, r);
        if (std::max(from, r) != lo + 1) continue;  // interleaved's wrap (p - 1 -> 0): not on the chain
        auto& e = d[static_cast<size_t>(lo)];
        const bool up = from == lo;
        e[up ? 0 : 2] += a.end - at, e[up ? 1 : 3] += 1;
      }
  std::vector<double> offset(static_cast<size_t>(p), 0.0);
  for (int r = 0; r + 1 < p; ++r) {
    const auto& e = d[static_cast<size_t>(r)];
    const double delta = e[1] > 0 && e[3] > 0 ? (e[0] / e[1] - e[2] / e[3]) / 2 : 0.0;
    offset[static_cast<size_t>(r + 1)] = offset[static_cast<size_t>(r)] + delta;
  }
  return offset;
}

}  // namespace

LinkLatency measured_link_latency(const Schedule& s, const std::vector<Timeline>& steps, double min_wait) {
  const int S = s.virtual_stages();
  // [boundary * 2 + direction (0: activation s -> s+1, 1: gradient s+1 -> s)]: {sum, count} of d,
  // over the unbiased samples and over all waited ones.
  const size_t keys = 2 * static_cast<size_t>(std::max(S - 1, 0));
  std::vector<std::array<double, 2>> unbiased(keys, {0, 0}), waited(keys, {0, 0});
  LinkLatency out;
  const std::vector<double> offset = clock_offsets(s, steps, min_wait);
  for (Timeline t : steps) {
    for (size_t r = 0; r < t.ranks.size(); ++r)  // rank 0's clock for all
      for (TimedAction& a : t.ranks[r]) a.start -= offset[r], a.end -= offset[r];
    for (const LatencySample& x : latency_samples(s, t, min_wait)) {
      const size_t k = 2 * x.boundary + static_cast<size_t>(x.dir);
      waited[k][0] += x.d, waited[k][1] += 1;
      if (x.unbiased) unbiased[k][0] += x.d, unbiased[k][1] += 1;
    }
  }
  out.per_boundary.assign(static_cast<size_t>(std::max(S - 1, 0)), -1.0);
  double total = 0;
  for (size_t b = 0; b < out.per_boundary.size(); ++b) {
    const double act = preferred_mean(unbiased[2 * b].data(), waited[2 * b].data());
    const double grad = preferred_mean(unbiased[2 * b + 1].data(), waited[2 * b + 1].data());
    if (std::isnan(act) || std::isnan(grad)) continue;
    out.per_boundary[b] = std::max(0.0, (act + grad) / 2);
    total += out.per_boundary[b];
    ++out.links;
    for (size_t k : {2 * b, 2 * b + 1})
      out.samples += static_cast<int>(unbiased[k][1] > 0 ? unbiased[k][1] : waited[k][1]);
  }
  out.mean = out.links ? total / out.links : 0.0;
  for (size_t b = 0; b < out.per_boundary.size(); ++b) {
    const bool local = s.rank_of(static_cast<int>(b)) == s.rank_of(static_cast<int>(b) + 1);
    if (local) out.per_boundary[b] = 0.0;
    else if (out.per_boundary[b] < 0) out.per_boundary[b] = out.mean;
  }
  return out;
}

std::string render_chrome_ranks(const std::vector<RankRecording>& ranks, const std::string& title) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"title\": " + quoted(title) +
                    "}, \"traceEvents\": [\n";
  bool first = true;
  auto emit = [&](const std::string& ev) {
    out += (first ? "  " : ",\n  ") + ev;
    first = false;
  };
  for (const RankRecording& r : ranks) {
    const std::string ids = "\"pid\": " + std::to_string(r.rank) + ", \"tid\": 0";
    emit("{\"name\": \"process_name\", \"ph\": \"M\", " + ids + ", \"args\": {\"name\": \"rank " +
         std::to_string(r.rank) + "\"}}");
    int index = 0;
    for (const TimedAction& a : r.actions) {
      const bool compute = is_compute(a.action.kind);
      const int i = index++;
      if (!compute && a.end <= a.start) continue;  // sends, and receives that did not wait
      const std::string name = compute ? to_token(a.action) : "wait " + to_token(a.action);
      emit("{\"name\": " + quoted(name) + ", \"cat\": \"" + (compute ? "compute" : "wait") + "\", \"ph\": \"X\", " +
           ids + ", \"ts\": " + num(a.start - r.origin_us) + ", \"dur\": " + num(a.end - a.start) +
           ", \"args\": {\"index\": " + std::to_string(i) + "}}");
    }
    for (const Phase& p : r.phases)
      emit("{\"name\": " + quoted(p.name) + ", \"cat\": \"phase\", \"ph\": \"X\", " + ids +
           ", \"ts\": " + num(p.start - r.origin_us) + ", \"dur\": " + num(p.end - p.start) + "}");
  }
  return out + "\n]}\n";
}

}  // namespace trident::sched
