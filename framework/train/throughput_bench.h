// `trident bench throughput`: tokens/s and MFU of real GPT stages (a
// `trident train` run through `trident launch` per case) against p, m, v and
// the schedule. Pure C++: it runs the trident executable and reads metrics.jsonl.
#pragma once

#include <string>
#include <vector>

namespace trident::bench {

struct ThroughputCase {
  std::string schedule;
  int p = 1, m = 4, v = 1;
};

struct ThroughputRow {
  ThroughputCase c;
  double tokens_per_s = 0, mfu = 0, bubble = 0, step_s = 0;  // medians over the steps after the first
};

// Runs `trident launch --nproc-per-node p -- trident train --config CONFIG ...`
// with the case's keys and `steps` steps; throws with the run's output on failure.
ThroughputRow run_throughput_case(const std::string& trident, const std::string& config, const ThroughputCase& c,
                                  int steps, const std::string& scratch_dir);

std::string throughput_csv(const std::vector<ThroughputRow>& rows);
// Tokens/s against p, one line per (schedule, v, m).
std::string throughput_svg(const std::vector<ThroughputRow>& rows, const std::string& title);

}  // namespace trident::bench
