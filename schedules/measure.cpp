// Measured timelines: see measure.h.
#include "schedules/measure.h"
#include "schedules/format.h"

#include <algorithm>
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

double measured_latency(const Schedule& s, const Timeline& t) {
  double sum = 0;
  int n = 0;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    const auto& mine = t.ranks[r];
    double idle_since = 0;  // end of the latest compute before the current position
    for (size_t i = 0; i < mine.size(); ++i) {
      const TimedAction& a = mine[i];
      if (is_compute(a.action.kind)) idle_since = a.end;
      if (a.action.kind != ActionKind::RECV_F && a.action.kind != ActionKind::RECV_B) continue;
      const int peer = peer_rank(s.stage_map(), static_cast<int>(r), a.action);
      if (peer == static_cast<int>(r)) continue;  // a local hand-over has no link
      const Action send = counterpart(s.stage_map(), static_cast<int>(r), a.action);
      for (const TimedAction& b : t.ranks.at(static_cast<size_t>(peer)))
        if (b.action.kind == send.kind && b.action.mb == send.mb && b.action.chunk == send.chunk) {
          if (idle_since <= b.start && a.end >= b.start) sum += a.end - b.start, ++n;
          break;
        }
    }
  }
  return n ? sum / n : 0.0;
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

LinkLatency measured_link_latency(const Schedule& s, const std::vector<Timeline>& steps, double min_wait) {
  const int S = s.virtual_stages();
  // [boundary][0: activation s -> s+1, 1: gradient s+1 -> s]: sum and count of d
  std::vector<double> sum(2 * static_cast<size_t>(std::max(S - 1, 0)), 0.0), n(sum.size(), 0.0);
  LinkLatency out;
  for (const Timeline& t : steps) {
    // Where each send was posted: [dir][into stage * m + mb].
    std::vector<double> sent[2];
    for (auto& v : sent) v.assign(static_cast<size_t>(S) * s.microbatches, std::nan(""));  // times may be negative
    for (size_t r = 0; r < t.ranks.size(); ++r)
      for (const TimedAction& a : t.ranks[r]) {
        if (a.action.kind != ActionKind::SEND_F && a.action.kind != ActionKind::SEND_B) continue;
        const int stage = s.stage_of(static_cast<int>(r), a.action.chunk);
        const bool fwd = a.action.kind == ActionKind::SEND_F;
        sent[fwd ? 0 : 1][static_cast<size_t>(fwd ? stage + 1 : stage - 1) * s.microbatches + a.action.mb] = a.start;
      }
    for (size_t r = 0; r < t.ranks.size(); ++r) {
      double idle_since = 0;  // end of this rank's previous action (receives are only posted)
      bool any = false;       // before its first action a rank is idle from the start: its first receive's post
      for (const TimedAction& a : t.ranks[r]) {
        const bool recv = a.action.kind == ActionKind::RECV_F || a.action.kind == ActionKind::RECV_B;
        if (!recv) {
          idle_since = a.end, any = true;
          continue;
        }
        if (peer_rank(s.stage_map(), static_cast<int>(r), a.action) == static_cast<int>(r)) continue;  // local hand-over
        if (a.end - (any ? idle_since : a.start) <= min_wait) continue;  // the data was there before it was needed
        const int stage = s.stage_of(static_cast<int>(r), a.action.chunk);
        const int dir = a.action.kind == ActionKind::RECV_F ? 0 : 1;
        const double at = sent[dir][static_cast<size_t>(stage) * s.microbatches + a.action.mb];
        if (std::isnan(at)) continue;
        const size_t b = static_cast<size_t>(dir == 0 ? stage - 1 : stage);  // boundary b -> b+1
        sum[2 * b + dir] += a.end - at;
        n[2 * b + dir] += 1;
      }
    }
  }
  out.per_boundary.assign(static_cast<size_t>(std::max(S - 1, 0)), -1.0);
  double total = 0;
  for (size_t b = 0; b < out.per_boundary.size(); ++b) {
    if (n[2 * b] == 0 || n[2 * b + 1] == 0) continue;
    out.per_boundary[b] = std::max(0.0, (sum[2 * b] / n[2 * b] + sum[2 * b + 1] / n[2 * b + 1]) / 2);
    total += out.per_boundary[b];
    ++out.links;
    out.samples += static_cast<int>(n[2 * b] + n[2 * b + 1]);
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
