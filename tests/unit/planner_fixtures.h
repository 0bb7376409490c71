// What the planner's unit tests build their hand-computed cases from.
#pragma once

#include <cstdint>

#include "framework/config.h"
#include "planner/cluster.h"
#include "planner/step.h"

namespace trident::testing {

// A GPT shape with no vocabulary padding.
inline ModelConfig gpt(int64_t l, int64_t h, int64_t a, int64_t s, int64_t v) {
  ModelConfig m;
  m.layers = l, m.hidden = h, m.heads = a, m.seq_len = s, m.vocab_size = v, m.vocab_pad_multiple = 1;
  return m;
}

// 1 TFLOP/s fp32 at full efficiency, 1 GB/s links without latency, no overheads: costs by hand.
inline plan::Cluster unit_cluster() {
  return plan::parse_cluster(
      "[cluster]\nnodes = 1\ndevices_per_node = 8\ndevice_memory_gib = 16\n"
      "[compute]\npeak_tflops_fp32 = 1.0\ngemm_efficiency = 1.0\nmemory_bandwidth_gbs = 1e12\n"
      "[intra_node]\nbandwidth_gbs = 1.0\nlatency_us = 0\n[inter_node]\nbandwidth_gbs = 1.0\nlatency_us = 0\n",
      "unit.toml");
}

// An fp32 run of `m` on unit_cluster() with `global_batch` samples a step.
inline plan::Problem unit_problem(const ModelConfig& m, int64_t global_batch) {
  plan::Problem pr;
  pr.model = m;
  pr.precision = "fp32";
  pr.cluster = unit_cluster();
  pr.global_batch = global_batch;
  return pr;
}

}  // namespace trident::testing
