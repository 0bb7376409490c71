// Schedule validator: per-(micro-batch, chunk) completeness and order, sends
// and receives matched by (direction, micro-batch, stage), and a run of the
// executor's semantics to rule out deadlock.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "schedules/action.h"

namespace trident::sched {

struct ValidationReport {
  bool communication_added = false;  // input was compute-only; checked with add_communication()
  bool split_backward = false;       // some backward is I + W
  int compute_actions = 0;           // F/B/I/W over all ranks
  int messages = 0;                  // matched send/recv pairs (implicit ones too)
};

// Throws ScheduleError on the first violation, naming rank, position (index in
// that rank's list), action and a small grid of the lists around it. A
// compute-only schedule is checked as if add_communication() had been applied.
ValidationReport validate(const Schedule& s);

// Rank rows of s around list position `pos`, each marked (rank, position)
// shown as [TOKEN]. Used in error messages.
std::string context_grid(const Schedule& s, int pos, const std::vector<std::pair<int, int>>& marks);

}  // namespace trident::sched
