// Hang diagnosis: from every rank's last progress record (schedules/progress.h)
// and which rank failed first, the chain of waits ("rank 1 waits RB3 from rank
// 2 · rank 2 waits RB3 from rank 3 · rank 3 has made no progress since F5 for
// 30 s") or the rank that died. Pure C++: the launcher prints it after a
// failed run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedules/progress.h"

namespace trident::launch {

struct FirstFailure {
  int rank = -1;    // the first rank to fail, -1 when none did
  std::string how;  // "exited with status 86", from describe_wait_status()
};

// One line per chain of waits; empty when there are no records.
std::string diagnose(const std::vector<sched::ProgressRecord>& records, const FirstFailure& first, int64_t now_ms);

}  // namespace trident::launch
