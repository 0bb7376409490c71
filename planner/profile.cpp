#include "planner/profile.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "planner/cluster.h"  // PlanError
#include "planner/toml_file.h"

namespace trident::plan {

namespace {

const char* const kModes[3] = {"none", "selective", "full"};

// The [[micro_batch]] keys: name, then where the value goes.
struct RowKey {
  std::string name;
  double* (*at)(MicroBatchProfile&);
};

const std::vector<RowKey>& row_keys() {
  static const std::vector<RowKey> k = [] {
    std::vector<RowKey> v = {
        {"layer_forward_ms", [](MicroBatchProfile& r) { return &r.layer_forward_ms; }},
        {"embedding_forward_ms", [](MicroBatchProfile& r) { return &r.embedding_forward_ms; }},
        {"head_forward_ms", [](MicroBatchProfile& r) { return &r.head_forward_ms; }},
        {"layer_backward_ms", [](MicroBatchProfile& r) { return &r.layer_backward_ms[0]; }},
        {"layer_backward_selective_ms", [](MicroBatchProfile& r) { return &r.layer_backward_ms[1]; }},
        {"layer_backward_full_ms", [](MicroBatchProfile& r) { return &r.layer_backward_ms[2]; }},
        {"embedding_backward_ms", [](MicroBatchProfile& r) { return &r.embedding_backward_ms[0]; }},
        {"embedding_backward_selective_ms", [](MicroBatchProfile& r) { return &r.embedding_backward_ms[1]; }},
        {"embedding_backward_full_ms", [](MicroBatchProfile& r) { return &r.embedding_backward_ms[2]; }},
        {"head_backward_ms", [](MicroBatchProfile& r) { return &r.head_backward_ms[0]; }},
        {"head_backward_selective_ms", [](MicroBatchProfile& r) { return &r.head_backward_ms[1]; }},
        {"head_backward_full_ms", [](MicroBatchProfile& r) { return &r.head_backward_ms[2]; }},
        {"step_overhead_ms", [](MicroBatchProfile& r) { return &r.step_overhead_ms; }},
        {"split_backward_ratio", [](MicroBatchProfile& r) { return &r.split_backward_ratio; }},
        {"weight_share", [](MicroBatchProfile& r) { return &r.weight_share; }},
        {"pipeline_slowdown", [](MicroBatchProfile& r) { return &r.pipeline_slowdown; }},
    };
    return v;
  }();
  return k;
}

const char* const kModelInts[] = {"layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len", "vocab_size"};

int64_t* model_int(Profile& p, const std::string& k) {
  if (k == "layers") return &p.layers;
  if (k == "hidden") return &p.hidden;
  if (k == "heads") return &p.heads;
  if (k == "kv_heads") return &p.kv_heads;
  if (k == "ffn_hidden") return &p.ffn_hidden;
  if (k == "seq_len") return &p.seq_len;
  if (k == "vocab_size") return &p.vocab_size;
  return nullptr;
}

}  // namespace

double MicroBatchProfile::forward_ms(int64_t layers) const {
  return embedding_forward_ms + head_forward_ms + static_cast<double>(layers) * layer_forward_ms;
}

double MicroBatchProfile::backward_ms(int recompute, int64_t layers) const {
  return embedding_backward_ms[recompute] + head_backward_ms[recompute] +
         static_cast<double>(layers) * layer_backward_ms[recompute];
}

sched::Costs stage_costs_from_profile(const Profile& p, int mbs, const std::string& recompute, int64_t layers,
                                      int stages) {
  if (stages < 1 || layers < stages || layers % stages != 0)
    throw PlanError(p.source + ": " + std::to_string(layers) + " layers do not split evenly over " +
                    std::to_string(stages) + " pipeline stages");
  const MicroBatchProfile& row = p.at(mbs);
  const int rc = recompute_index(recompute);
  const double per_stage = static_cast<double>(layers / stages);
  sched::Costs costs;
  for (int s = 0; s < stages; ++s) {
    double f = per_stage * row.layer_forward_ms, b = per_stage * row.layer_backward_ms[rc];
    if (s == 0) f += row.embedding_forward_ms, b += row.embedding_backward_ms[rc];
    if (s == stages - 1) f += row.head_forward_ms, b += row.head_backward_ms[rc];
    b *= row.split_backward_ratio;
    costs.stage_costs.push_back({f, b, b * row.weight_share});
  }
  return costs;
}

int recompute_index(const std::string& mode) {
  for (int i = 0; i < 3; ++i)
    if (mode == kModes[i]) return i;
  throw PlanError("recompute '" + mode + "': expected none, selective or full");
}

const MicroBatchProfile& Profile::at(int mbs) const {
  for (const MicroBatchProfile& r : rows)
    if (r.micro_batch == mbs) return r;
  std::string have;
  for (const MicroBatchProfile& r : rows) have += (have.empty() ? "" : ", ") + std::to_string(r.micro_batch);
  throw PlanError(source + " has no micro-batch size " + std::to_string(mbs) + " (it has " + have +
                  "): profile it with trident plan profile --mbs");
}

std::vector<int> Profile::micro_batches() const {
  std::vector<int> out;
  for (const MicroBatchProfile& r : rows) out.push_back(r.micro_batch);
  return out;
}

Profile parse_profile(const std::string& toml_text, const std::string& name) {
  const toml::table root = parse_toml(toml_text, name);
  Profile p;
  p.source = name;
  for (const auto& [k, node] : root) {
    const std::string key(k.str());
    if (key != "model" && key != "micro_batch")
      throw PlanError(name + ": unknown " + (node.is_table() ? "section [" + key + "]" : "top-level key " + key) +
                      line_of(node) + ": expected [model] and [[micro_batch]] tables");
  }
  const toml::table* model = root["model"].as_table();
  if (!model) throw PlanError(name + ": missing the [model] table");
  std::set<std::string> seen;
  for (const auto& [k, node] : *model) {
    const std::string key(k.str());
    const std::string at = name + ": model." + key + line_of(node);
    seen.insert(key);
    if (key == "arch" || key == "precision") {
      if (!node.is_string()) throw PlanError(at + ": expected a string");
      (key == "arch" ? p.arch : p.precision) = node.as_string()->get();
    } else if (key == "threads" || model_int(p, key)) {
      if (!node.is_integer() || node.as_integer()->get() < 1) throw PlanError(at + ": expected an integer >= 1");
      if (key == "threads")
        p.threads = static_cast<int>(node.as_integer()->get());
      else
        *model_int(p, key) = node.as_integer()->get();
    } else {
      throw PlanError(at + ": unknown key; [model] keys are arch, layers, hidden, heads, kv_heads, ffn_hidden, "
                           "seq_len, vocab_size, precision, threads");
    }
  }
  for (const char* required : {"arch", "precision", "threads"})
    if (!seen.count(required)) throw PlanError(name + ": missing model." + std::string(required));
  for (const char* required : kModelInts)
    if (!seen.count(required)) throw PlanError(name + ": missing model." + std::string(required));
  if (p.precision != "fp32" && p.precision != "bf16")
    throw PlanError(name + ": model.precision = \"" + p.precision + "\": expected fp32 or bf16");
  const toml::array* rows = root["micro_batch"].as_array();
  if (!rows || rows->empty()) throw PlanError(name + ": no [[micro_batch]] table: expected one per micro-batch size");
  for (const toml::node& rn : *rows) {
    const toml::table* t = rn.as_table();
    if (!t) throw PlanError(name + ": micro_batch" + line_of(rn) + ": expected [[micro_batch]] tables");
    MicroBatchProfile r;
    std::set<std::string> got;
    for (const auto& [k, node] : *t) {
      const std::string key(k.str());
      const std::string at = name + ": micro_batch." + key + line_of(node);
      got.insert(key);
      if (key == "size") {
        if (!node.is_integer() || node.as_integer()->get() < 1) throw PlanError(at + ": expected an integer >= 1");
        r.micro_batch = static_cast<int>(node.as_integer()->get());
        continue;
      }
      const auto it = std::find_if(row_keys().begin(), row_keys().end(), [&](const RowKey& rk) { return rk.name == key; });
      if (it == row_keys().end()) throw PlanError(at + ": unknown key of [[micro_batch]]");
      double x = node.is_integer() ? static_cast<double>(node.as_integer()->get())
                 : node.is_floating_point() ? node.as_floating_point()->get() : -1.0;
      if (key == "weight_share" && !(x > 0 && x < 1)) throw PlanError(at + ": expected a fraction in (0, 1)");
      if (key == "pipeline_slowdown" && !(x >= 1)) throw PlanError(at + ": expected a factor >= 1");
      if (!std::isfinite(x) || x < 0 || (x == 0 && key != "step_overhead_ms"))
        throw PlanError(at + (key == "split_backward_ratio" ? ": expected a ratio > 0" : ": expected a number of milliseconds > 0"));
      *it->at(r) = x;
    }
    if (!got.count("size")) throw PlanError(name + ": a [[micro_batch]]" + line_of(rn) + " has no size");
    for (const RowKey& rk : row_keys())
      if (!got.count(rk.name))
        throw PlanError(name + ": [[micro_batch]] size = " + std::to_string(r.micro_batch) + " has no " + rk.name);
    for (const MicroBatchProfile& o : p.rows)
      if (o.micro_batch == r.micro_batch)
        throw PlanError(name + ": micro-batch size " + std::to_string(r.micro_batch) + " given twice");
    p.rows.push_back(r);
  }
  std::sort(p.rows.begin(), p.rows.end(), [](const auto& a, const auto& b) { return a.micro_batch < b.micro_batch; });
  return p;
}

Profile load_profile(const std::string& path) {
  return parse_profile(read_toml_file(path, "profile"), path);
}

std::string to_toml(const Profile& p) {
  std::ostringstream os;
  os << "[model]  # what the costs were measured on\narch = \"" << p.arch << "\"\n";
  Profile copy = p;
  for (const char* k : kModelInts) os << k << " = " << *model_int(copy, k) << "\n";
  os << "precision = \"" << p.precision << "\"\nthreads = " << p.threads << "  # intra-op threads per rank\n";
  for (const MicroBatchProfile& r : p.rows) {
    MicroBatchProfile row = r;
    os << "\n[[micro_batch]]  # ms per micro-batch (step_overhead_ms: per step)\nsize = " << r.micro_batch << "\n";
    for (const RowKey& rk : row_keys()) os << rk.name << " = " << real_text(*rk.at(row)) << "\n";
  }
  return os.str();
}

void check_profile_matches(const Profile& p, const ModelConfig& m, const std::string& precision) {
  std::string diff;
  auto note = [&](const std::string& what, const std::string& theirs, const std::string& ours) {
    if (theirs != ours) diff += (diff.empty() ? "" : "; ") + what + " " + theirs + " there, " + ours + " here";
  };
  note("arch", p.arch, m.arch);
  note("hidden", std::to_string(p.hidden), std::to_string(m.hidden));
  note("heads", std::to_string(p.heads), std::to_string(m.heads));
  note("kv_heads", std::to_string(p.kv_heads), std::to_string(m.kv()));
  note("ffn_hidden", std::to_string(p.ffn_hidden), std::to_string(m.ffn()));
  note("seq_len", std::to_string(p.seq_len), std::to_string(m.seq_len));
  note("vocab_size", std::to_string(p.vocab_size), std::to_string(m.vocab_size));
  note("precision", p.precision, precision);
  if (!diff.empty()) throw PlanError(p.source + " was measured on another model: " + diff);
}

}  // namespace trident::plan
