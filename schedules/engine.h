// Internal: the one pass that validates and (optionally) simulates a schedule.
// validate() and simulate() are thin wrappers; nothing else includes this.
#pragma once

#include <string>
#include <vector>

#include "schedules/simulate.h"
#include "schedules/validate.h"

namespace trident::sched::detail {

// engine_checks.cpp. A spot in the lists: rank and index in its list.
struct Where {
  int rank;
  int pos;
};
[[noreturn]] void violation(const Schedule& s, std::vector<Where> at, const std::string& what);
std::string at_text(const Schedule& s, int rank, int pos);  // "rank R position P (TOKEN)"
// Every per-rank check; throws ScheduleError naming the first violation.
// Adds compute actions and whether any is an I to rep. Returns whether the
// communication is explicit (decided by rank 0's list).
bool check_ranks(const Schedule& s, ValidationReport* rep);

struct RunResult {
  ValidationReport report;
  TimelineStats stats;  // filled when costs were given
  Timeline timeline;    // filled when record is true
};

// Checks every rank's list, then runs the lists under the executor semantics
// (README "Executor semantics"). A compute-only schedule runs with the
// communication add_communication() would insert, without materialising it.
// costs == nullptr: validation only. Throws ScheduleError on the first violation.
RunResult run(const Schedule& s, const Costs* costs, bool record);

}  // namespace trident::sched::detail
