// `trident bench throughput`: tokens/s and MFU of real GPT stages (a
// `trident train` run through `trident launch` per case) against p, m, v and
// the schedule. Pure C++: it runs the trident executable and reads metrics.jsonl.
#pragma once

#include <cmath>
#include <string>
#include <vector>

namespace trident::bench {

struct ThroughputCase {
  std::string schedule;
  int p = 1, m = 4, v = 1;
};

struct ThroughputRow {
  ThroughputCase c;
  double tokens_per_s = 0, mfu = 0, bubble = 0, step_s = 0, tflops = 0;  // medians over the steps after the first
  double run_peak_flops = 0;  // the matmul rate this run measured at its start-up, on `threads` threads
  int threads = 1;            // training.threads of the run (intra-op threads per rank)
  // A mixture of experts' balance (NOTE [MoE stats]), medians of metrics.jsonl's moe_load_max,
  // moe_dropped_max and moe_bias_range_max; NaN where the run has no such key.
  double moe_load = NAN, moe_dropped = NAN, moe_bias_range = NAN;
};

// One thread's fp32 1024^3 matmul rate, the best of `trials` timings: other
// work on the machine only ever slows a matmul, so the fastest trial is the
// estimate a burst of load cannot deflate (a single timing under load once
// gave a peak half the real one, and MFU 140 %).
double measure_one_thread_peak(int trials = 8);

// Sets every row's `mfu` to tflops / (peak x min(p x threads, cores)), with
// one peak for the whole sweep: the largest of `measured_peak` and the
// start-up measurements of the rows that ran one thread per rank. Returns that peak.
double rescale_mfu(std::vector<ThroughputRow>& rows, double measured_peak, int cores);

// Runs `trident launch --nproc-per-node p -- trident train --config CONFIG ...`
// with the case's keys and `steps` steps; throws with the run's output on failure.
ThroughputRow run_throughput_case(const std::string& trident, const std::string& config, const ThroughputCase& c,
                                  int steps, const std::string& scratch_dir);

std::string throughput_csv(const std::vector<ThroughputRow>& rows);
// Tokens/s against p, one line per (schedule, v, m).
std::string throughput_svg(const std::vector<ThroughputRow>& rows, const std::string& title);

}  // namespace trident::bench
