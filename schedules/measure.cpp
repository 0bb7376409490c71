// Measured timelines: see measure.h.
#include "schedules/measure.h"

#include <cstdio>
#include <sstream>


namespace trident::sched {
namespace {

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

std::string quoted(const std::string& s) {  // tokens and phase names need no escaping beyond quotes
  return "\"" + s + "\"";
}

// The inverse of to_token() (KIND MB [.CHUNK]); action.h keeps its parser private.
Action parse_token(const std::string& tok) {
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
  t.stages = static_cast<int>(pipeline.size());
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
      const int peer = peer_rank(s, static_cast<int>(r), a.action);
      if (peer == static_cast<int>(r)) continue;  // a local hand-over has no link
      const Action send = counterpart(s, static_cast<int>(r), a.action);
      for (const TimedAction& b : t.ranks.at(static_cast<size_t>(peer)))
        if (b.action.kind == send.kind && b.action.mb == send.mb && b.action.chunk == send.chunk) {
          if (idle_since <= b.start && a.end >= b.start) sum += a.end - b.start, ++n;
          break;
        }
    }
  }
  return n ? sum / n : 0.0;
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
