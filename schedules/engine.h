// Internal: the one pass that validates and (optionally) simulates a schedule.
// validate() and simulate() are thin wrappers; nothing else includes this.
#pragma once

#include "schedules/simulate.h"
#include "schedules/validate.h"

namespace trident::sched::detail {

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
