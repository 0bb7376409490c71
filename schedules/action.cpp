// Action tokens and the text form of a schedule.
#include "schedules/action.h"

#include <algorithm>
#include <cassert>
#include <cctype>
#include <sstream>
#include <vector>

namespace trident::sched {


namespace {

const char* prefix_of(ActionKind k) {
  switch (k) {
    case ActionKind::F: return "F";
    case ActionKind::B: return "B";
    case ActionKind::I: return "I";
    case ActionKind::W: return "W";
    case ActionKind::SEND_F: return "SF";
    case ActionKind::RECV_F: return "RF";
    case ActionKind::SEND_B: return "SB";
    case ActionKind::RECV_B: return "RB";
    case ActionKind::REDUCE_GRAD: return "RD";
  }
  return "?";
}

const char* kGrammar =
    "F|B|I|W|SF|RF|SB|RB, a micro-batch number, and optionally '.' and a chunk number (e.g. F3, RB0.1); "
    "or RD and optionally '.' and a chunk number (RD, RD.1)";

bool parse_kind(const std::string& p, ActionKind* k) {
  static const ActionKind all[] = {ActionKind::F,      ActionKind::B,      ActionKind::I,      ActionKind::W,
                                   ActionKind::SEND_F, ActionKind::RECV_F, ActionKind::SEND_B, ActionKind::RECV_B,
                                   ActionKind::REDUCE_GRAD};
  for (ActionKind c : all) {
    if (p == prefix_of(c)) {
      *k = c;
      return true;
    }
  }
  return false;
}

// Reads a non-negative decimal at s[*i]; false if there is none or it is too long.
bool parse_number(const std::string& s, size_t* i, int* out) {
  const size_t start = *i;
  long v = 0;
  while (*i < s.size() && std::isdigit(static_cast<unsigned char>(s[*i]))) {
    v = v * 10 + (s[*i] - '0');
    if (v > 1000000) return false;
    ++*i;
  }
  *out = static_cast<int>(v);
  return *i > start;
}

[[noreturn]] void fail(int line, const std::string& token, const std::string& expected) {
  throw ScheduleError("schedule text line " + std::to_string(line) + ": bad token '" + token + "', expected " +
                      expected);
}

Action parse_one(const std::string& tok, int line, const Schedule& s) {
  size_t i = 0;
  while (i < tok.size() && std::isalpha(static_cast<unsigned char>(tok[i]))) ++i;
  ActionKind kind;
  int mb = 0, chunk = 0;
  if (!parse_kind(tok.substr(0, i), &kind)) fail(line, tok, kGrammar);
  // REDUCE_GRAD has no micro-batch: "RD" or "RD.1", never "RD0".
  if (kind != ActionKind::REDUCE_GRAD && !parse_number(tok, &i, &mb)) fail(line, tok, kGrammar);
  if (i < tok.size() && tok[i] == '.') {
    ++i;
    if (!parse_number(tok, &i, &chunk)) fail(line, tok, kGrammar);
  }
  if (i != tok.size()) fail(line, tok, kGrammar);
  if (mb >= s.microbatches)
    fail(line, tok, "a micro-batch below m=" + std::to_string(s.microbatches));
  if (chunk >= s.chunks) fail(line, tok, "a chunk below v=" + std::to_string(s.chunks));
  return Action(kind, mb, chunk);
}

// One token, one action; or an overlapped pair (NOTE [overlapped pairs] in
// schedules/overlap.h): an F, the communication posted when it is done, and
// the B or I that runs with it, joined by '+': "F7+B3.1", "F7+SF7+RF8+B3.1".
void parse_token(const std::string& tok, int line, const Schedule& s, ActionList* out) {
  if (tok.find('+') == std::string::npos) {
    out->push_back(parse_one(tok, line, s));
    return;
  }
  const char* pair = "an overlapped pair F<mb>+B<mb> or F<mb>+I<mb>, only communication between them "
                     "(F7+SF7+B3.1; chunks as '.c')";
  std::vector<Action> parts;
  size_t start = 0;
  for (;;) {
    const size_t plus = tok.find('+', start);
    const std::string part = tok.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
    if (part.empty()) fail(line, tok, pair);
    parts.push_back(parse_one(part, line, s));
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  const Action& f = parts.front();
  const Action& b = parts.back();
  if (f.kind != ActionKind::F || (b.kind != ActionKind::B && b.kind != ActionKind::I)) fail(line, tok, pair);
  for (size_t k = 1; k + 1 < parts.size(); ++k)
    if (!is_communication(parts[k].kind)) fail(line, tok, pair);
  parts.front().flags = Action::kOverlapNext;
  out->insert(out->end(), parts.begin(), parts.end());
}

// Header "pipeline p=P m=M v=V [placement=loop|v]"; no placement means loop.
Schedule parse_header(const std::string& text, int line) {
  std::istringstream in(text);
  std::string word, fields[3], place, extra;
  in >> word >> fields[0] >> fields[1] >> fields[2];
  const char* names[3] = {"p=", "m=", "v="};
  int values[3] = {0, 0, 0};
  bool ok = word == "pipeline";
  for (int k = 0; ok && k < 3; ++k) {
    size_t i = 2;
    ok = fields[k].compare(0, 2, names[k]) == 0 && parse_number(fields[k], &i, &values[k]) && i == fields[k].size();
  }
  Placement pl = Placement::loop;
  if (ok && (in >> place)) {
    ok = place == "placement=loop" || place == "placement=v";
    pl = place == "placement=v" ? Placement::v : Placement::loop;
  }
  if (!ok || (in >> extra))
    throw ScheduleError("schedule text line " + std::to_string(line) + ": bad header '" + text +
                        "', expected 'pipeline p=P m=M v=V' and optionally 'placement=loop' or 'placement=v'");
  return empty_schedule(values[0], values[1], values[2], pl);
}

}  // namespace

std::string to_token(const Action& a) {
  std::string t = prefix_of(a.kind);
  if (a.kind != ActionKind::REDUCE_GRAD) t += std::to_string(a.mb);
  if (a.chunk != 0) t += "." + std::to_string(a.chunk);
  if (a.overlaps_next()) t += "+";
  return t;
}

std::string placement_name(Placement p) { return p == Placement::v ? "v" : "loop"; }

Placement parse_placement(const std::string& name) {
  if (name == "loop") return Placement::loop;
  if (name == "v") return Placement::v;
  throw ScheduleError("placement '" + name + "', expected loop or v");
}


std::vector<int> stages_of_rank(Placement pl, int p, int v, int rank) {
  std::vector<int> out;
  for (int c = 0; c < v; ++c) out.push_back(stage_of(pl, p, rank, c));
  return out;
}

int peer_rank(const StageMap& s, int rank, const Action& a) {
  assert(is_communication(a.kind));
  const int stage = s.stage_of(rank, a.chunk);
  const bool towards_next = a.kind == ActionKind::SEND_F || a.kind == ActionKind::RECV_B;
  return s.rank_of(towards_next ? stage + 1 : stage - 1);
}

Action counterpart(const StageMap& s, int rank, const Action& a) {
  assert(is_communication(a.kind));
  const int stage = s.stage_of(rank, a.chunk);
  switch (a.kind) {
    case ActionKind::SEND_F: return Action{ActionKind::RECV_F, a.mb, s.chunk_of(stage + 1)};
    case ActionKind::RECV_F: return Action{ActionKind::SEND_F, a.mb, s.chunk_of(stage - 1)};
    case ActionKind::SEND_B: return Action{ActionKind::RECV_B, a.mb, s.chunk_of(stage - 1)};
    default: return Action{ActionKind::SEND_B, a.mb, s.chunk_of(stage + 1)};
  }
}

Schedule empty_schedule(int p, int m, int v, Placement pl) {
  if (p < 1 || m < 1 || v < 1 || v > 65535)
    throw ScheduleError("schedule needs pipeline ranks, microbatches and chunks >= 1, got p=" + std::to_string(p) +
                        " m=" + std::to_string(m) + " v=" + std::to_string(v) + (v > 65535 ? " (at most 65535 chunks)" : ""));
  Schedule s;
  s.placement = pl;
  s.pipeline_ranks = p;
  s.microbatches = m;
  s.chunks = v;
  s.ranks.assign(p, {});
  return s;
}

std::string to_text(const Schedule& s) {
  std::string out = "pipeline p=" + std::to_string(s.pipeline_ranks) + " m=" + std::to_string(s.microbatches) +
                    " v=" + std::to_string(s.chunks) +
                    (s.placement == Placement::v ? " placement=v" : "") + "\n";
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    out += std::to_string(r) + ":";
    const ActionList& list = s.ranks[r];
    for (size_t i = 0; i < list.size(); ++i) {
      out += " " + to_token(list[i]);  // a pair's F ends in '+'
      if (!list[i].overlaps_next()) continue;
      const size_t j = std::min(pair_partner(list, i), list.size() - 1);  // one token: F3+SF3+B1
      for (size_t k = i + 1; k < j; ++k) out += to_token(list[k]) + "+";
      if (j > i) out += to_token(list[j]);
      i = j;
    }
    out += "\n";
  }
  return out;
}

Schedule parse_text(const std::string& text) {
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  bool have_header = false;
  Schedule s;
  int next_rank = 0;
  while (std::getline(in, raw)) {
    ++line;
    const std::string body = raw.substr(0, raw.find('#'));
    if (body.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!have_header) {
      s = parse_header(body, line);
      have_header = true;
      continue;
    }
    std::istringstream words(body);
    std::string label, tok;
    words >> label;
    if (label != std::to_string(next_rank) + ":")
      fail(line, label, "the rank label '" + std::to_string(next_rank) + ":' (ranks in order, one line each)");
    if (next_rank >= s.pipeline_ranks)
      fail(line, label, "at most p=" + std::to_string(s.pipeline_ranks) + " rank lines");
    while (words >> tok) parse_token(tok, line, s, &s.ranks[next_rank]);
    ++next_rank;
  }
  if (!have_header) throw ScheduleError("schedule text is empty, expected a 'pipeline p=P m=M v=V' header");
  if (next_rank != s.pipeline_ranks)
    throw ScheduleError("schedule text has " + std::to_string(next_rank) + " rank lines, expected p=" +
                        std::to_string(s.pipeline_ranks));
  return s;
}

}  // namespace trident::sched
