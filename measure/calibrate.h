// `trident plan calibrate`'s measurements of this machine: one rank's fp32
// matmul rate and memory bandwidth, Gloo all-reduce, all-gather and
// point-to-point timings between local ranks, and the executor's overhead per
// pipeline action. launch/cmd_plan.cpp turns them into a cluster file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"

namespace trident::bench {

struct CalibrateOptions {
  int ranks = 2;                 // local ranks (processes forked from this one, over loopback Gloo)
  int repeats = 20;              // calls timed back to back per message size and round (3 rounds)
  int64_t max_bytes = 16 << 20;  // largest message; sizes go up from 1 KiB by x4
  int threads = 1;               // intra-op threads of the matmul (training.threads of the runs)
};

struct CommTiming {
  std::string kind;  // all_reduce | all_gather | p2p
  double bytes = 0;  // all-reduce, p2p: the tensor; all-gather: the gathered whole
  double seconds = 0;  // per call: the median round's mean, rank 0's clock
};

struct Calibration {
  double matmul_flops = 0;          // fp32, best of several 1024^3 matmuls on `threads` threads
  std::vector<std::pair<double, double>> small_matmuls;  // (n, FLOP/s) of n^3 matmuls, n = 64..512
  double memory_gbs = 0;            // streaming a += b over 64 MiB tensors (3 bytes moved per byte)
  std::vector<CommTiming> comm;     // every kind at every size
  double action_overhead_us = 0;    // mean F, I and W time of a stage that computes nothing, through the executor
  // A pipeline transfer's latency as the executor sees it while both ranks compute (NOTE [busy link]).
  double pipeline_latency_us = 0;
  int pipeline_latency_samples = 0;
  // A small all-reduce's and all-gather's time between computing ranks, what the computation alone
  // took subtracted (NOTE [busy link]); `busy_collective_bytes` is the message.
  double busy_collective_us = 0;   // all-reduce
  double busy_all_gather_us = 0;   // all-gather of the same bytes in all
  double busy_collective_bytes = 0;
  // The same all-reduce of a larger message (min(the largest size, 4 MiB); 0 bytes when that is not
  // larger): with the small one, the bandwidth between computing ranks (NOTE [busy link]).
  double busy_large_all_reduce_us = 0;
  double busy_large_bytes = 0;
  // How much slower a rank computes in a 2-rank pipeline (the other rank computing and both
  // communicating) than the same stage alone (NOTE [shared compute]); >= 1.
  double concurrent_slowdown = 1;
  // Per block (GPT-2's, model.arch = "gpt"; Llama's decoder, "llama"): median host time of one layer's
  // forward and backward, us, from a middle pipeline stage of a model too small to compute anything
  // (NOTE [layer overhead] in calibrate.cpp).
  struct Layer {
    double forward_us = 0, backward_us = 0;
  };
  Layer gpt_layer, llama_layer;
  double host_memory_gib = 0;       // MemTotal of /proc/meminfo
  int cores = 0;                    // std::thread::hardware_concurrency
};

// Runs every measurement; throws std::runtime_error naming a bad option or a failed rank.
Calibration calibrate(const CalibrateOptions& o);

}  // namespace trident::bench
