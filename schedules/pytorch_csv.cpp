// PyTorch's schedule CSV <-> Schedule. The stage of a comm action is the
// stage of the rank that runs it, as in Trident (SEND_F on the sender's
// stage, RECV_F on the receiver's), so the conversion is one to one.
#include "schedules/pytorch_csv.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace trident::sched {

namespace {

struct Kind {
  ActionKind kind;
  const char* name;
};
// Longest names first so "SEND_F" is not read as a stage's "S".
const Kind kKinds[] = {{ActionKind::REDUCE_GRAD, "REDUCE_GRAD"}, {ActionKind::SEND_F, "SEND_F"}, {ActionKind::RECV_F, "RECV_F"}, {ActionKind::SEND_B, "SEND_B"},
                       {ActionKind::RECV_B, "RECV_B"}, {ActionKind::F, "F"},           {ActionKind::B, "B"},
                       {ActionKind::I, "I"},           {ActionKind::W, "W"}};

const char* name_of(ActionKind k) {
  for (const Kind& x : kKinds)
    if (x.kind == k) return x.name;
  return "?";
}

struct Cell {  // one parsed action with its global stage
  ActionKind kind;
  int stage, mb;
};

[[noreturn]] void fail(int row, const std::string& cell, const std::string& expected) {
  throw ScheduleError("schedule CSV row " + std::to_string(row) + ": bad cell '" + cell + "', expected " + expected);
}

const char* kGrammar =
    "STAGE TYPE MB with TYPE one of F B I W SEND_F RECV_F SEND_B RECV_B (e.g. 0F0, 1SEND_F3), or STAGE REDUCE_GRAD "
    "(e.g. 3REDUCE_GRAD)";

Cell parse_action(const std::string& text, int row, const std::string& cell) {
  size_t i = 0;
  long stage = 0, mb = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) && stage < 10000000) stage = stage * 10 + (text[i++] - '0');
  if (i == 0) fail(row, cell, kGrammar);
  const std::string rest = text.substr(i);
  for (const char* unsupported : {"UNSHARD", "RESHARD"})
    if (rest.rfind(unsupported, 0) == 0)
      fail(row, cell, std::string("an action Trident has; ") + unsupported + " (FSDP) has none");
  for (const Kind& k : kKinds) {
    const size_t n = std::char_traits<char>::length(k.name);
    if (rest.compare(0, n, k.name) != 0) continue;
    size_t j = n;
    if (k.kind == ActionKind::REDUCE_GRAD) {  // no micro-batch
      if (j != rest.size()) fail(row, cell, kGrammar);
      return Cell{k.kind, static_cast<int>(stage), 0};
    }
    while (j < rest.size() && std::isdigit(static_cast<unsigned char>(rest[j])) && mb < 10000000) mb = mb * 10 + (rest[j++] - '0');
    if (j == n || j != rest.size()) fail(row, cell, kGrammar);
    return Cell{k.kind, static_cast<int>(stage), static_cast<int>(mb)};
  }
  fail(row, cell, kGrammar);
}

// "(a;b)OVERLAP_F_B" or a plain action. A pair becomes its two actions in
// order, what runs (NOTE [no overlapped pairs] in generators_v.cpp).
void parse_cell(const std::string& cell, int row, std::vector<Cell>* out) {
  if (cell.empty()) return;  // an idle step
  if (cell[0] != '(') {
    out->push_back(parse_action(cell, row, cell));
    return;
  }
  const size_t close = cell.find(')'), semi = cell.find(';');
  if (close == std::string::npos || semi == std::string::npos || semi > close || cell.substr(close + 1) != "OVERLAP_F_B")
    fail(row, cell, "an overlapped pair '(A;B)OVERLAP_F_B' of two compute actions");
  Cell a = parse_action(cell.substr(1, semi - 1), row, cell), b = parse_action(cell.substr(semi + 1, close - semi - 1), row, cell);
  if (!is_compute(a.kind) || !is_compute(b.kind)) fail(row, cell, "two compute actions in an overlapped pair");
  out->push_back(a);
  out->push_back(b);
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

}  // namespace

std::string to_pytorch_csv(const Schedule& s) {
  std::string out;
  for (int r = 0; r < s.pipeline_ranks; ++r) {
    const auto& list = s.ranks[r];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (i) out += ",";
      out += std::to_string(s.stage_of(r, a.chunk)) + name_of(a.kind);
      if (a.kind != ActionKind::REDUCE_GRAD) out += std::to_string(a.mb);
    }
    out += "\n";
  }
  return out;
}

Schedule from_pytorch_csv(const std::string& text, int microbatches) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();  // trailing newline(s)
  if (lines.empty()) throw ScheduleError("schedule CSV is empty, expected one row per rank");
  const int p = static_cast<int>(lines.size());
  std::vector<std::vector<Cell>> rows(p);
  int max_stage = -1, max_mb = -1;
  for (int r = 0; r < p; ++r) {
    std::istringstream cells(lines[r]);
    for (std::string cell; std::getline(cells, cell, ',');) parse_cell(trim(cell), r, &rows[r]);
    for (const Cell& c : rows[r]) max_stage = std::max(max_stage, c.stage), max_mb = std::max(max_mb, c.mb);
  }
  if (max_stage < 0) throw ScheduleError("schedule CSV has no actions");
  const int stages = max_stage + 1;
  if (stages % p != 0)
    throw ScheduleError("schedule CSV has stages 0.." + std::to_string(max_stage) + " on " + std::to_string(p) +
                        " rows, expected a multiple of the rank count (p*v stages)");
  const int v = stages / p, m = microbatches > 0 ? microbatches : max_mb + 1;
  if (max_mb >= m)
    throw ScheduleError("schedule CSV has micro-batch " + std::to_string(max_mb) + ", expected below m=" + std::to_string(m));
  auto fits = [&](Placement pl) {
    for (int r = 0; r < p; ++r)
      for (const Cell& c : rows[r])
        if (rank_of(pl, p, c.stage) != r) return false;
    return true;
  };
  Placement pl = Placement::loop;
  if (!fits(pl)) {
    pl = Placement::v;
    if (!fits(pl))
      throw ScheduleError("schedule CSV places stages on rows neither as loop (stage s on rank s % p) nor as v "
                          "(rank r holds r, 2p-1-r, ...), the two placements Trident knows");
  }
  Schedule s = empty_schedule(p, m, v, pl);
  for (int r = 0; r < p; ++r)
    for (const Cell& c : rows[r]) s.ranks[r].push_back(Action(c.kind, c.mb, chunk_of(p, c.stage)));
  return s;
}

}  // namespace trident::sched
