// What the planner's unit tests build their hand-computed cases from.
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.h"
#include "planner/calibration.h"
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

// Link timings made by the ring model itself (calibration.h) from `gbs`, `lat_us` per message and
// `call_us` per collective call: every kind over 2 and 4 ranks at 1 KiB, 64 KiB and 4 MiB.
inline std::vector<plan::LinkSample> model_link_samples(double gbs, double lat_us, double call_us) {
  std::vector<plan::LinkSample> s;
  for (const char* kind : {"all_reduce", "all_gather", "p2p"})
    for (int n : {2, 4})
      for (double bytes : {1024.0, 65536.0, 4194304.0}) {
        plan::LinkSample x{kind, n, bytes, 0};
        const plan::RingTerms r = plan::ring_terms(x);
        x.seconds = r.volume_bytes / (gbs * 1e9) + r.steps * lat_us * 1e-6 + r.calls * call_us * 1e-6;
        s.push_back(x);
      }
  return s;
}

}  // namespace trident::testing
