// Cluster description (pure): what the planner knows of the machines a job
// runs on, read from configs/clusters/*.toml with every key checked.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"

namespace trident::plan {

// All bandwidths are per device and per direction, in GB/s (1e9 bytes/s);
// latencies in microseconds; rates in TFLOP/s (1e12 FLOP/s).
struct Cluster {
  std::string name = "unnamed";     // [cluster] name
  int nodes = 1;                    // [cluster] nodes
  int devices_per_node = 1;         // [cluster] devices_per_node
  double device_memory_gib = 80.0;  // [cluster] device_memory_gib, usable memory per device
  double compute_slots_per_node = 0;  // [cluster] devices' worth of compute a node has (0: devices_per_node)
  double peak_tflops_bf16 = 0.0;    // [compute] dense peak in bf16 (0 = no bf16 figure given)
  double peak_tflops_fp32 = 0.0;    // [compute] dense peak in fp32 (0 = no fp32 figure given)
  double gemm_efficiency = 1.0;     // [compute] fraction of the peak the best-shaped large GEMMs reach
  double attention_efficiency = 0.0;  // [compute] fraction of the peak a fused attention kernel reaches on
                                      // the FLOPs it executes (0: gemm_efficiency)
  double memory_bandwidth_gbs = 1000.0;  // [compute] device memory bandwidth (the optimizer step is bound by it)
  double gemm_fixed_us = 0.0;            // [compute] time of one GEMM call beyond its roofline
  double action_overhead_us = 0.0;       // [compute] host overhead per pipeline action (F, B, I or W of one chunk)
  // [compute] host time of one transformer layer's forward and backward beyond its FLOPs (the
  // per-operator dispatch that dominates small layers), per model family; 0 = none.
  double gpt_layer_forward_us = 0.0, gpt_layer_backward_us = 0.0;
  double llama_layer_forward_us = 0.0, llama_layer_backward_us = 0.0;
  double intra_bandwidth_gbs = 1.0;      // [intra_node] per device, one direction
  double intra_latency_us = 0.0;         // [intra_node] per message (a point-to-point transfer, a ring step)
  double intra_collective_us = 0.0;      // [intra_node] per collective call beyond its ring steps
  double intra_pipeline_latency_us = 0.0;  // [intra_node] per pipeline transfer while ranks compute (0: latency_us)
  double inter_bandwidth_gbs = 1.0;      // [inter_node] per device, one direction
  double inter_latency_us = 0.0;         // [inter_node] per message
  double inter_collective_us = 0.0;      // [inter_node] per collective call
  double inter_pipeline_latency_us = 0.0;  // [inter_node] per pipeline transfer (0: latency_us)
  std::string source = "<defaults>";     // file it came from (for messages)

  int devices() const { return nodes * devices_per_node; }
  // How much slower each rank computes when `ranks` of one job share a node: ranks per compute slot
  // beyond one (a CPU host whose ranks outnumber its cores), else 1. `slots` > 0 stands in for
  // compute_slots_per_node (a model profile's own measure of the machine).
  double compute_sharing(int64_t ranks, double slots = 0) const;
  // Peak of "fp32" or "bf16"; throws PlanError when the file gives none for it.
  double peak_tflops(const std::string& precision) const;
  // {forward, backward} host seconds per layer of a model of these features: the gpt_layer_* keys for
  // GPT-2's block, the llama_layer_* keys for Llama's decoder (features.gated_mlp: llama and the MoE families).
  std::pair<double, double> layer_overhead_s(const ModelFeatures& f) const;
};

// Thrown for every caller error of the planner: a bad cluster file, a layout
// that does not fit the model or the cluster, a bad option.
class PlanError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses a cluster description; `name` stands in for the file in messages.
// Unknown sections and keys, wrong types and out-of-range values throw
// PlanError naming the file, the line, the key, the value and what was expected.
Cluster parse_cluster(const std::string& toml_text, const std::string& name);
Cluster load_cluster(const std::string& path);
// Applies "section.key=value" (a TOML value) on top of c, checked like the file.
void set_cluster_key(Cluster& c, const std::string& assignment);
// The description as TOML text (every key, with its one-line meaning);
// parse_cluster(to_toml(c)) equals c.
std::string to_toml(const Cluster& c);

}  // namespace trident::plan
