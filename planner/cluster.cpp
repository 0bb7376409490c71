#include "planner/cluster.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <toml++/toml.h>

#include "planner/toml_file.h"

namespace trident::plan {

namespace {

// One key of the file: where it lives, what it sets, its allowed range.
struct Key {
  const char* section;
  const char* key;
  enum { Text, Int, Real } kind;
  std::string Cluster::*text;
  int Cluster::*integer;
  double Cluster::*real;
  double lo;       // smallest allowed value
  bool lo_open;    // lo itself not allowed
  const char* doc;
};

constexpr double kBig = 1e300;

const std::vector<Key>& keys() {
  static const std::vector<Key> k = {
      {"cluster", "name", Key::Text, &Cluster::name, nullptr, nullptr, 0, false, "a name for the printed plans"},
      {"cluster", "nodes", Key::Int, nullptr, &Cluster::nodes, nullptr, 1, false, "nodes in the cluster"},
      {"cluster", "devices_per_node", Key::Int, nullptr, &Cluster::devices_per_node, nullptr, 1, false,
       "accelerators (or ranks) per node"},
      {"cluster", "device_memory_gib", Key::Real, nullptr, nullptr, &Cluster::device_memory_gib, 0, true,
       "usable memory per device, GiB"},
      {"cluster", "compute_slots_per_node", Key::Real, nullptr, nullptr, &Cluster::compute_slots_per_node, 0, false,
       "devices' worth of compute per node when all compute at once; more ranks than this share it (0: one per device)"},
      {"compute", "peak_tflops_bf16", Key::Real, nullptr, nullptr, &Cluster::peak_tflops_bf16, 0, false,
       "dense bf16 peak per device, TFLOP/s (0: not given)"},
      {"compute", "peak_tflops_fp32", Key::Real, nullptr, nullptr, &Cluster::peak_tflops_fp32, 0, false,
       "dense fp32 peak per device, TFLOP/s (0: not given)"},
      {"compute", "gemm_efficiency", Key::Real, nullptr, nullptr, &Cluster::gemm_efficiency, 0, true,
       "fraction of the peak the best-shaped large GEMMs reach (a matmul measurement), in (0, 1]"},
      {"compute", "attention_efficiency", Key::Real, nullptr, nullptr, &Cluster::attention_efficiency, 0, false,
       "fraction of the peak a fused attention kernel reaches on the FLOPs it executes, in (0, 1] (0: gemm_efficiency)"},
      {"compute", "memory_bandwidth_gbs", Key::Real, nullptr, nullptr, &Cluster::memory_bandwidth_gbs, 0, true,
       "device memory bandwidth, GB/s"},
      {"compute", "gemm_fixed_us", Key::Real, nullptr, nullptr, &Cluster::gemm_fixed_us, 0, false,
       "time of one GEMM call beyond its FLOPs or bytes (launch, prologue, last partial wave), microseconds"},
      {"compute", "action_overhead_us", Key::Real, nullptr, nullptr, &Cluster::action_overhead_us, 0, false,
       "host overhead per pipeline action, microseconds"},
      {"compute", "gpt_layer_forward_us", Key::Real, nullptr, nullptr, &Cluster::gpt_layer_forward_us, 0, false,
       "host time of a GPT layer's forward beyond its FLOPs, microseconds"},
      {"compute", "gpt_layer_backward_us", Key::Real, nullptr, nullptr, &Cluster::gpt_layer_backward_us, 0, false,
       "host time of a GPT layer's backward beyond its FLOPs, microseconds"},
      {"compute", "llama_layer_forward_us", Key::Real, nullptr, nullptr, &Cluster::llama_layer_forward_us, 0, false,
       "host time of a Llama layer's forward beyond its FLOPs, microseconds"},
      {"compute", "llama_layer_backward_us", Key::Real, nullptr, nullptr, &Cluster::llama_layer_backward_us, 0, false,
       "host time of a Llama layer's backward beyond its FLOPs, microseconds"},
      {"intra_node", "bandwidth_gbs", Key::Real, nullptr, nullptr, &Cluster::intra_bandwidth_gbs, 0, true,
       "per device, one direction, GB/s"},
      {"intra_node", "latency_us", Key::Real, nullptr, nullptr, &Cluster::intra_latency_us, 0, false,
       "per message (a point-to-point transfer or one ring step), microseconds"},
      {"intra_node", "collective_us", Key::Real, nullptr, nullptr, &Cluster::intra_collective_us, 0, false,
       "per collective call beyond its ring steps (the backend's own work), microseconds"},
      {"intra_node", "pipeline_latency_us", Key::Real, nullptr, nullptr, &Cluster::intra_pipeline_latency_us, 0, false,
       "per pipeline transfer as the executor sees it while the ranks compute, microseconds (0: latency_us)"},
      {"inter_node", "bandwidth_gbs", Key::Real, nullptr, nullptr, &Cluster::inter_bandwidth_gbs, 0, true,
       "per device, one direction, GB/s"},
      {"inter_node", "latency_us", Key::Real, nullptr, nullptr, &Cluster::inter_latency_us, 0, false,
       "per message (a point-to-point transfer or one ring step), microseconds"},
      {"inter_node", "collective_us", Key::Real, nullptr, nullptr, &Cluster::inter_collective_us, 0, false,
       "per collective call beyond its ring steps (the backend's own work), microseconds"},
      {"inter_node", "pipeline_latency_us", Key::Real, nullptr, nullptr, &Cluster::inter_pipeline_latency_us, 0, false,
       "per pipeline transfer as the executor sees it while the ranks compute, microseconds (0: latency_us)"},
  };
  return k;
}

std::string keys_of(const std::string& section) {
  std::string out;
  for (const Key& k : keys())
    if (section == k.section) out += (out.empty() ? "" : ", ") + std::string(k.key);
  return out;
}

std::string text_of(const toml::node& n) {
  if (n.is_string()) return "\"" + n.as_string()->get() + "\"";  // toml++ would print 'literal'
  std::ostringstream os;
  n.visit([&os](const auto& x) { os << x; });
  return os.str();
}

void assign(Cluster& c, const Key& k, const toml::node& n, const std::string& where) {
  const std::string full = std::string(k.section) + "." + k.key;
  const std::string at = where + ": " + full + " = " + text_of(n) + line_of(n);
  if (k.kind == Key::Text) {
    if (!n.is_string()) throw PlanError(at + ": expected a string");
    c.*(k.text) = n.as_string()->get();
    return;
  }
  double x = 0;
  if (n.is_integer()) {
    x = static_cast<double>(n.as_integer()->get());
  } else if (n.is_floating_point() && k.kind == Key::Real) {
    x = n.as_floating_point()->get();
  } else {
    throw PlanError(at + (k.kind == Key::Int ? ": expected an integer" : ": expected a number"));
  }
  const bool ok = std::isfinite(x) && (k.lo_open ? x > k.lo : x >= k.lo) && x < kBig;
  if (!ok) {
    std::ostringstream lo;
    lo << k.lo;
    throw PlanError(at + ": expected " + (k.kind == Key::Int ? "an integer" : "a number") +
                    (k.lo_open ? " > " : " >= ") + lo.str());
  }
  if (k.kind == Key::Int) {
    c.*(k.integer) = static_cast<int>(x);
  } else {
    c.*(k.real) = x;
  }
}

const Key* find_key(const std::string& section, const std::string& key) {
  for (const Key& k : keys())
    if (section == k.section && key == k.key) return &k;
  return nullptr;
}

void check(const Cluster& c, const std::string& where) {
  if (c.gemm_efficiency > 1.0)
    throw PlanError(where + ": compute.gemm_efficiency = " + std::to_string(c.gemm_efficiency) +
                    ": expected a fraction in (0, 1]");
  if (c.attention_efficiency > 1.0)
    throw PlanError(where + ": compute.attention_efficiency = " + std::to_string(c.attention_efficiency) +
                    ": expected a fraction in (0, 1] (or 0: gemm_efficiency)");
  if (c.peak_tflops_bf16 == 0 && c.peak_tflops_fp32 == 0)
    throw PlanError(where + ": [compute] gives neither peak_tflops_bf16 nor peak_tflops_fp32: expected at least one > 0");
}

}  // namespace

double Cluster::peak_tflops(const std::string& precision) const {
  const double p = precision == "bf16" ? peak_tflops_bf16 : precision == "fp32" ? peak_tflops_fp32 : -1;
  if (p < 0) throw PlanError("precision '" + precision + "': expected fp32 or bf16");
  if (p == 0)
    throw PlanError(source + ": no compute.peak_tflops_" + precision + " for a run in " + precision +
                    ": add it to the cluster file");
  return p;
}

double Cluster::compute_sharing(int64_t ranks, double slots) const {
  const double s = slots > 0 ? slots : compute_slots_per_node;
  if (s <= 0) return 1.0;
  const double on_node = static_cast<double>(std::min<int64_t>(ranks, devices_per_node));
  // A rank alone on its node computes at its own speed, even where the measured sharing says a node
  // holds less than one rank's worth (a profile whose two-rank pipeline ran more than twice slower,
  // on a machine loaded by other work, measured that load, not this rank's speed).
  if (on_node <= 1) return 1.0;
  return std::max(1.0, on_node / s);
}

std::pair<double, double> Cluster::layer_overhead_s(const ModelFeatures& f) const {
  if (!f.gated_mlp) return {gpt_layer_forward_us * 1e-6, gpt_layer_backward_us * 1e-6};
  return {llama_layer_forward_us * 1e-6, llama_layer_backward_us * 1e-6};
}

Cluster parse_cluster(const std::string& toml_text, const std::string& name) {
  const toml::table root = parse_toml(toml_text, name);
  Cluster c;
  c.source = name;
  for (const auto& [sk, node] : root) {
    const std::string section(sk.str());
    const toml::table* tbl = node.as_table();
    if (!tbl || keys_of(section).empty())
      throw PlanError(name + ": unknown " + (tbl ? "section [" + section + "]" : "top-level key " + section) + line_of(node) +
                      ": expected the sections [cluster], [compute], [intra_node], [inter_node]");
    for (const auto& [kk, value] : *tbl) {
      const std::string key(kk.str());
      const Key* k = find_key(section, key);
      if (!k)
        throw PlanError(name + ": unknown key " + section + "." + key + line_of(value) + ": keys of [" + section +
                        "] are " + keys_of(section));
      assign(c, *k, value, name);
    }
  }
  for (const char* required : {"nodes", "devices_per_node", "device_memory_gib"})
    if (!root["cluster"][required]) throw PlanError(name + ": missing cluster." + std::string(required));
  check(c, name);
  return c;
}

Cluster load_cluster(const std::string& path) {
  return parse_cluster(read_toml_file(path, "cluster"), path);
}

void set_cluster_key(Cluster& c, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  const size_t dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    throw PlanError("--cluster-set '" + assignment + "': expected section.key=value");
  const std::string section = assignment.substr(0, dot), key = assignment.substr(dot + 1, eq - dot - 1);
  const Key* k = find_key(section, key);
  if (!k) throw PlanError("--cluster-set '" + assignment + "': unknown key " + section + "." + key);
  toml::table t;
  try {
    t = toml::parse("v = " + assignment.substr(eq + 1));
  } catch (const toml::parse_error&) {
    throw PlanError("--cluster-set '" + assignment + "': the value is not a TOML value");
  }
  assign(c, *k, *t["v"].node(), "--cluster-set");
  check(c, "--cluster-set " + assignment);
}

std::string to_toml(const Cluster& c) {
  std::ostringstream os;
  os.precision(10);
  std::string section;
  for (const Key& k : keys()) {
    if (section != k.section) {
      section = k.section;
      os << (os.tellp() > 0 ? "\n" : "") << "[" << section << "]\n";
    }
    os << k.key << " = ";
    if (k.kind == Key::Text) os << '"' << c.*(k.text) << '"';
    if (k.kind == Key::Int) os << c.*(k.integer);
    if (k.kind == Key::Real) os << real_text(c.*(k.real));
    os << "  # " << k.doc << "\n";
  }
  return os.str();
}

}  // namespace trident::plan
