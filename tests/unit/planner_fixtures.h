// What the planner's unit tests build their hand-computed cases from.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "core/config.h"
#include "models/families.h"
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

// The features of m's family (model.arch), as `trident plan` hands them in (NOTE [model features]).
inline ModelFeatures features_of(const ModelConfig& m) {
  for (const ModelFamilyRules& f : model_families())
    if (f.name == m.arch) return f.features;
  throw std::logic_error("no model family " + m.arch);
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
  pr.features = features_of(m);
  pr.precision = "fp32";
  pr.cluster = unit_cluster();
  pr.global_batch = global_batch;
  return pr;
}

// The ring model's terms written out by hand for each kind and rank count (Patarasuk and Yuan
// 2009; NCCL's ring), not computed by plan::ring_terms, which is under test: an all-reduce moves
// 2 (n-1)/n of the message over each link in 2 (n-1) steps, an all-gather (n-1)/n of the gathered
// whole in n-1 steps, both one collective call; a point-to-point message the whole in one step.
struct RingCase {
  const char* kind;
  int ranks;
  double volume_per_byte, steps, calls;
};
inline const std::vector<RingCase>& ring_cases() {
  static const std::vector<RingCase> c = {
      {"all_reduce", 2, 1.0, 2, 1},  {"all_reduce", 4, 1.5, 6, 1},   {"all_reduce", 8, 1.75, 14, 1},
      {"all_gather", 2, 0.5, 1, 1},  {"all_gather", 4, 0.75, 3, 1},  {"all_gather", 8, 0.875, 7, 1},
      {"p2p", 2, 1.0, 1, 0},         {"p2p", 4, 1.0, 1, 0},
  };
  return c;
}

// Link timings from `gbs`, `lat_us` per ring step and `call_us` per collective call by the
// hand-written terms above: every case at 1 KiB, 64 KiB and 4 MiB.
inline std::vector<plan::LinkSample> model_link_samples(double gbs, double lat_us, double call_us) {
  std::vector<plan::LinkSample> s;
  for (const RingCase& c : ring_cases())
    for (double bytes : {1024.0, 65536.0, 4194304.0})
      s.push_back({c.kind, c.ranks, bytes,
                   c.volume_per_byte * bytes / (gbs * 1e9) + c.steps * lat_us * 1e-6 + c.calls * call_us * 1e-6});
  return s;
}

}  // namespace trident::testing
