// Hang diagnosis: from every rank's last progress record (schedules/progress.h)
// and which rank failed first, the chain of waits ("rank 1 waits RB3 from rank
// 2 · rank 2 waits RB3 from rank 3 · rank 3 has made no progress since F5 for
// 30 s") or the rank that died. Pure C++: the launcher prints it after a
// failed run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "schedules/progress.h"

namespace trident::launch {

struct FirstFailure {
  int rank = -1;    // the first rank to fail, -1 when none did
  std::string how;  // "exited with status 86", from describe_wait_status()
};

// The rank and how it failed, from a launcher's "rank R on node N (pid P)
// HOW[; notes]" line; rank -1 for another text (a launcher that went away).
FirstFailure parse_failure_line(const std::string& text);

// One line per chain of waits, then where the first failed rank was if no
// chain ends there; empty when there are no records and no failure.
// `ended` names ranks that had exited or been stopped before the failure
// (rank -> "exited with status 0", "been stopped by signal 19 (SIGSTOP)"):
// their last record is stale, so a chain ends there, as at a rank killed by
// a signal; one that failed on its own (a timeout) is followed.
std::string diagnose(const std::vector<sched::ProgressRecord>& records, const FirstFailure& first, int64_t now_ms,
                     const std::map<int, std::string>& ended = {});

}  // namespace trident::launch
