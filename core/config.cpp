// The config's schema and text: one table (fields()) lists every key with its
// member, type, allowed values and meaning; TOML parsing, --set overrides,
// per-key checks, to_toml, operator== and config_keys() all read it, so they
// cannot drift apart. The rules across keys are in config_checks.cpp, the
// host and device memory checks in config_resources.cpp; what each key
// means is documented once, in configs/README.md's tables.
#include "core/config.h"
#include "core/config_rules.h"
#include "core/model_checks.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/json.h"

namespace trident {

namespace config_rules {

[[noreturn]] void fail(const Config& c, const std::string& msg) { throw ConfigError(c.source + ": " + msg); }

std::string n(int64_t v) { return std::to_string(v); }

// Shortest decimal text that reads back as exactly `v`, always a TOML float.
std::string format_double(double v) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  // 60 reads better as 60.0 than as 6e+01.
  if (s.find("e+") != std::string::npos && v == static_cast<double>(static_cast<int64_t>(v)) &&
      std::abs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.1f", v);
    s = buf;
  }
  if (s == "-nan") s = "nan";
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

}  // namespace config_rules

namespace {

using config_rules::fail;
using config_rules::format_double;
using config_rules::n;

enum class Kind { Int, Double, Bool, String, IntList, WeightedPaths };

template <class T>
constexpr Kind kind_of();
template <>
constexpr Kind kind_of<int64_t>() { return Kind::Int; }
template <>
constexpr Kind kind_of<double>() { return Kind::Double; }
template <>
constexpr Kind kind_of<bool>() { return Kind::Bool; }
template <>
constexpr Kind kind_of<std::string>() { return Kind::String; }
template <>
constexpr Kind kind_of<std::vector<int64_t>>() { return Kind::IntList; }
template <>
constexpr Kind kind_of<std::vector<WeightedPath>>() { return Kind::WeightedPaths; }

constexpr double kInf = std::numeric_limits<double>::infinity();

// Allowed values of one key beyond its type. Numeric bounds apply to integers,
// numbers, each element of an integer array and each weight of a weighted-path list.
struct Rule {
  double lo = -kInf;
  double hi = kInf;
  bool lo_open = false;
  bool hi_open = false;
  bool minus_one_ok = false;         // parallel.dp: -1 means "world / (tp * pp)"; an array: "auto" is [-1]
  std::vector<std::string> choices;  // strings: the allowed values; empty = any
  std::string described;             // the expectation, when a check outside the table makes it (see kind_rule)
};

Rule any() { return {}; }
Rule at_least(double lo) {
  Rule r;
  r.lo = lo;
  return r;
}
Rule positive() {
  Rule r = at_least(0);
  r.lo_open = true;
  return r;
}
Rule unit_open() {  // [0, 1)
  Rule r = at_least(0);
  r.hi = 1;
  r.hi_open = true;
  return r;
}
Rule between(double lo, double hi) {  // [lo, hi]
  Rule r = at_least(lo);
  r.hi = hi;
  return r;
}
Rule above_at_most(double lo, double hi) {  // (lo, hi]
  Rule r = between(lo, hi);
  r.lo_open = true;
  return r;
}

// NOTE [timeout bounds] parallel.timeout_s becomes std::chrono::milliseconds
// (trainer.cpp) that c10d and Gloo add to a steady_clock time point in
// nanoseconds: 1e6 s (11.6 days, the launcher's --rdzv-timeout bound too) is
// 1e15 ns, far from int64's 9.2e18, where 1e300 or inf overflow into Gloo's
// "timeout.count() >= 0. Invalid timeout". Below 1 s the store's group
// creation (which the same timeout bounds) times out on a loaded host, and
// 1e-9 s truncates to 0 ms: socket warnings, then a backtrace.
constexpr double kMinTimeoutS = 1, kMaxTimeoutS = 1e6;
// An integer >= 1, or -1 (auto); for an array, integers >= 1 or the string
// "auto" (stored as [-1]).
Rule auto_or_at_least_1() {
  Rule r = at_least(1);
  r.minus_one_ok = true;
  return r;
}
Rule one_of(std::vector<std::string> choices) {
  Rule r;
  r.choices = std::move(choices);
  return r;
}
// schedule.kind and model.arch: the layers above own the kinds and the families,
// which the foundation cannot see; check_config_tables() is handed them (NOTE [config tables]).
Rule kind_rule() {
  Rule r;
  r.described = "a generator's kind (schedules/generators.h: schedule_kinds()), \"zb-auto\" or \"file\"";
  return r;
}
Rule family_rule() {
  Rule r;
  r.described = "a model family (models/families.h: model_families())";
  return r;
}

struct Field {
  const char* section;
  const char* key;
  Kind kind;
  void* (*ref)(Config&);  // address of this key's member inside a Config
  Rule rule;
  const char* doc;

  std::string name() const { return std::string(section) + "." + key; }
  template <class T>
  T& get(Config& c) const {
    assert(kind == kind_of<T>());
    return *static_cast<T*>(ref(c));
  }
  template <class T>
  const T& get(const Config& c) const {
    // ref() only computes an address; nothing is written through it here.
    return get<T>(const_cast<Config&>(c));
  }
};

// The member's type picks the Kind, so a table entry cannot disagree with the struct.
#define TRIDENT_FIELD(sec, key, rule, doc)                                                       \
  Field {                                                                                        \
    #sec, #key, kind_of<std::remove_reference_t<decltype(std::declval<Config&>().sec.key)>>(), \
        [](Config& c) -> void* { return &c.sec.key; }, rule, doc                                 \
  }

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      TRIDENT_FIELD(model, arch, family_rule(), "model family"),
      TRIDENT_FIELD(model, layers, at_least(1), "transformer blocks"),
      TRIDENT_FIELD(model, hidden, at_least(1), "model width"),
      TRIDENT_FIELD(model, heads, at_least(1), "attention heads"),
      TRIDENT_FIELD(model, ffn_hidden, at_least(0), "MLP width; 0 means 4 * hidden (gpt only: llama needs it set)"),
      TRIDENT_FIELD(model, kv_heads, at_least(0),
                    "key/value heads, dividing heads (grouped-query attention; 1 = multi-query); 0 = heads (llama)"),
      TRIDENT_FIELD(model, seq_len, at_least(1), "tokens per sample"),
      TRIDENT_FIELD(model, vocab_size, at_least(1), "tokenizer vocabulary before padding"),
      TRIDENT_FIELD(model, vocab_pad_multiple, at_least(1),
                    "padded vocabulary is a multiple of this * tp"),
      TRIDENT_FIELD(model, dropout, unit_open(), "dropout probability (0 keeps runs exact)"),
      TRIDENT_FIELD(model, init_std, positive(), "standard deviation of the normal init"),
      TRIDENT_FIELD(model, layernorm_eps, positive(), "LayerNorm (gpt) or RMSNorm (llama) epsilon"),
      TRIDENT_FIELD(model, init_from, any(),
                    "Hugging Face directory to start from (GPT-2 or Llama, see `trident export`); empty = random init"),
      TRIDENT_FIELD(model, tie_embeddings, any(), "the LM head shares the word embedding (gpt: must be true)"),
      TRIDENT_FIELD(model, rope_theta, positive(), "rotary position embedding base (llama)"),
      TRIDENT_FIELD(model, rope_scaling, one_of({"none", "llama3"}),
                    "rotary frequency scaling: none, or Llama 3.1's (the rope_* factors below; llama)"),
      TRIDENT_FIELD(model, rope_factor, positive(), "llama3 rope scaling: factor"),
      TRIDENT_FIELD(model, rope_low_freq_factor, positive(), "llama3 rope scaling: low_freq_factor"),
      TRIDENT_FIELD(model, rope_high_freq_factor, positive(), "llama3 rope scaling: high_freq_factor"),
      TRIDENT_FIELD(model, rope_original_max_position, at_least(1),
                    "llama3 rope scaling: original_max_position_embeddings"),

      TRIDENT_FIELD(parallel, tp, at_least(1), "tensor-parallel size"),
      TRIDENT_FIELD(parallel, pp, at_least(1), "pipeline-parallel size (stages)"),
      TRIDENT_FIELD(parallel, dp, auto_or_at_least_1(),
                    "data-parallel size; -1 = world size / (tp * pp)"),
      TRIDENT_FIELD(parallel, sequence_parallel, any(),
                    "shard LayerNorm/dropout regions along the sequence over tp"),
      TRIDENT_FIELD(parallel, pipeline_layers, auto_or_at_least_1(),
                    "layers per model chunk (pp * chunks entries); empty = uniform; \"auto\" = balanced by a profiling pass"),
      TRIDENT_FIELD(parallel, pipeline_layout, any(),
                    "Megatron's --pipeline-model-parallel-layout: E embedding, t transformer layer, L loss, a bar "
                    "ends a stage (pp * chunks stages, model order); empty = none"),
      TRIDENT_FIELD(parallel, account_for_embedding_in_pipeline_split, any(),
                    "the even split counts the embedding as one layer (Megatron's option of that name)"),
      TRIDENT_FIELD(parallel, account_for_loss_in_pipeline_split, any(),
                    "the even split counts the loss (final norm, head, loss) as one layer (Megatron's option)"),
      TRIDENT_FIELD(parallel, pipeline_dtype, one_of({"auto", "fp32", "bf16"}),
                    "dtype of the activations and gradients sent between pipeline stages; auto = training.precision "
                    "(Megatron's pipeline_dtype); bf16 needs training.precision = bf16"),
      TRIDENT_FIELD(parallel, backend, one_of({"auto", "gloo", "nccl", "nccl-rules"}),
                    "collective backend; auto = nccl on cuda, gloo on cpu; nccl-rules = test backend: Gloo on cpu "
                    "with NCCL's point-to-point rules"),
      TRIDENT_FIELD(parallel, timeout_s, between(kMinTimeoutS, kMaxTimeoutS),
                    "timeout of every collective, in seconds (NOTE [timeout bounds])"),
      TRIDENT_FIELD(parallel, dp_bucket_mb, above_at_most(0, 1048576), "size of a data-parallel gradient bucket, in MiB"),
      TRIDENT_FIELD(parallel, overlap_grad_reduce, any(),
                    "all-reduce each gradient bucket over dp during the backward, once it is final"),
      TRIDENT_FIELD(parallel, overlap_param_gather, any(),
                    "zero = 1: all-gather the updated parameter shards while the next step's forward runs, each "
                    "bucket finished before the first forward that reads it (Megatron's overlap_param_gather)"),
      TRIDENT_FIELD(parallel, zero, between(0, 1),
                    "0: every dp rank keeps all optimizer state; 1: ZeRO-1, state sharded over dp"),

      TRIDENT_FIELD(schedule, kind, kind_rule(), "pipeline schedule"),
      TRIDENT_FIELD(schedule, chunks, at_least(0),
                    "chunks (virtual stages) per pipeline rank; 0 or absent = what the kind needs (2 for the V "
                    "kinds zb-v, v-half, v-min and dualpipev, else 1)"),
      TRIDENT_FIELD(schedule, file, any(), "schedule text file when kind = \"file\""),
      TRIDENT_FIELD(schedule, memory_limit, at_least(0),
                    "kind = \"zb-auto\": micro-batches of activations in flight per rank at most (pp: ZB-1p, "
                    "2 x pp: ZB-2p); 0 with every other kind"),
      TRIDENT_FIELD(schedule, zb_auto_costs, one_of({"unit", "measured"}),
                    "kind = \"zb-auto\": the costs its list is searched for: unit (F, B, W = 1, 2, 1) or measured "
                    "(each stage's F, I, W and the links timed over two ZB-H1 passes before the first step)"),

      TRIDENT_FIELD(training, steps, at_least(1), "optimizer steps"),
      TRIDENT_FIELD(training, micro_batch_size, at_least(1), "samples per micro-batch"),
      TRIDENT_FIELD(training, global_batch_size, at_least(1), "samples per step over all DP ranks"),
      TRIDENT_FIELD(training, seed, at_least(0), "seeds the initial weights and the data order"),
      TRIDENT_FIELD(training, lr, positive(), "peak learning rate"),
      TRIDENT_FIELD(training, min_lr, at_least(0), "floor of the cosine decay"),
      TRIDENT_FIELD(training, warmup_steps, at_least(0), "linear warm-up steps"),
      TRIDENT_FIELD(training, weight_decay, at_least(0), "AdamW decay (not on biases and norms)"),
      TRIDENT_FIELD(training, beta1, unit_open(), "AdamW beta1"),
      TRIDENT_FIELD(training, beta2, unit_open(), "AdamW beta2"),
      TRIDENT_FIELD(training, eps, positive(), "AdamW epsilon"),
      TRIDENT_FIELD(training, grad_clip, at_least(0), "clip by global gradient norm; 0 disables"),
      TRIDENT_FIELD(training, eval_interval, at_least(0), "evaluate every N steps; 0 disables"),
      TRIDENT_FIELD(training, eval_batches, at_least(1), "validation global batches per evaluation"),
      TRIDENT_FIELD(training, threads, between(1, 1024),
                    "intra-op threads per rank (at most the host's cores: checked when training starts)"),
      TRIDENT_FIELD(training, peak_tflops, at_least(0),
                    "device peak for MFU; 0 = measure a matmul at start-up (cuda: in the compute dtype)"),
      TRIDENT_FIELD(training, device, one_of({"cpu", "cuda"}), "device every rank computes on; cuda = CUDA device LOCAL_RANK (a CUDA build)"),
      TRIDENT_FIELD(training, exit_after_steps, at_least(0),
                    "stop cleanly after this step with a checkpoint (the LR schedule still follows steps); 0 = off"),
      TRIDENT_FIELD(training, precision, one_of({"fp32", "bf16"}),
                    "bf16: bf16 weights and compute, fp32 master weights and gradients"),
      TRIDENT_FIELD(training, recompute, one_of({"none", "full", "selective"}),
                    "activation recomputation: every block, or the attention core and the MLP up projection + GELU"),

      TRIDENT_FIELD(data, source, one_of({"synthetic", "file"}), "where training tokens come from"),
      TRIDENT_FIELD(data, path, any(), "token file prefix written by `trident data prepare`"),
      TRIDENT_FIELD(data, format, one_of({"trident", "megatron"}),
                    "the files at data.path: \"trident\" PREFIX.train.bin and PREFIX.val.bin; "
                    "\"megatron\" Megatron-LM's PREFIX.bin + PREFIX.idx (uint16 or int32 tokens), cut by data.split"),
      TRIDENT_FIELD(data, paths, positive(),
                    "a blend instead of data.path: [[weight, PREFIX], ...], datasets of data.format mixed by "
                    "weight as Megatron's BlendedDataset does (core/data/README.md)"),
      TRIDENT_FIELD(data, split, any(),
                    "megatron: train, valid, test shares cut by documents as Megatron does, e.g. \"969,30,1\"; "
                    "empty = every document trains"),
      TRIDENT_FIELD(data, order, one_of({"auto", "stream", "megatron"}),
                    "which samples each step reads: \"megatron\" Megatron's GPTDataset and BlendedDataset order "
                    "(shuffled documents, samples across document ends); \"stream\" fixed windows of the token "
                    "stream, shuffled per epoch; \"auto\" = megatron for data.format = \"megatron\", else stream"),
      TRIDENT_FIELD(data, cache_dir, any(),
                    "megatron order: a folder of megatron-core's GPTDataset index caches (its path_to_cache); a "
                    "cache built for the same dataset, split, samples, seq_len and seed is read, not built again, "
                    "and when there is none the indices built are written there as megatron-core writes them"),
      TRIDENT_FIELD(data, cache_tokenizer, any(),
                    "with data.cache_dir: the tokenizer's unique_identifiers (a JSON object) that the caches Trident "
                    "writes put in their description, whose md5 names them; megatron-core loads them only when its "
                    "tokenizer has these identifiers"),
      TRIDENT_FIELD(data, tokenizer, one_of({"byte", "gpt2", "hf"}), "tokenizer"),
      TRIDENT_FIELD(data, tokenizer_dir, any(),
                    "directory holding encoder.json and vocab.bpe (gpt2) or tokenizer.json (hf)"),
      TRIDENT_FIELD(data, synthetic_tokens, at_least(1), "tokens generated when source = \"synthetic\""),

      TRIDENT_FIELD(checkpoint, dir, any(), "checkpoint directory (saved at the end of the run); empty disables"),
      TRIDENT_FIELD(checkpoint, interval, at_least(0), "also save every N steps; 0 = only at the end of the run"),
      TRIDENT_FIELD(checkpoint, keep, at_least(1), "complete checkpoints kept in dir; older ones are deleted"),
      TRIDENT_FIELD(checkpoint, resume, any(),
                    "continue from the latest checkpoint in dir, saved under any layout (none yet: start at step 0)"),
      TRIDENT_FIELD(checkpoint, async, any(),
                    "interval saves: copy the state to host memory, write and publish it on a background thread "
                    "while training goes on (at most one in flight); a run's last save is synchronous"),

      TRIDENT_FIELD(logging, dir, any(), "run directory: config.toml, metrics.jsonl, loss.svg, rank-R.json"),
      TRIDENT_FIELD(logging, log_interval, at_least(1),
                    "log every N steps (and the last and each evaluation step): a step line and a metrics.jsonl row"),
      TRIDENT_FIELD(logging, progress, any(), "progress bar when stdout is a terminal"),
      TRIDENT_FIELD(logging, trace, any(), "write trace.json and timeline.svg of step trace_step"),
      TRIDENT_FIELD(logging, trace_step, at_least(1), "the step logging.trace records"),
      TRIDENT_FIELD(logging, tensorboard, any(),
                    "also write each metrics.jsonl row to dir/events.out.tfevents.<time>.<host> for TensorBoard "
                    "(scalars tagged with its keys)"),
  };
  return table;
}
#undef TRIDENT_FIELD

const char* const kSections[] = {"model", "parallel", "schedule", "training",
                                 "data", "checkpoint", "logging"};

bool is_section(const std::string& s) {
  for (const char* name : kSections)
    if (s == name) return true;
  return false;
}

const Field* find_field(const std::string& section, const std::string& key) {
  for (const Field& f : fields())
    if (section == f.section && key == f.key) return &f;
  return nullptr;
}

std::string list_sections() {
  std::string out;
  for (const char* name : kSections) out += std::string(out.empty() ? "" : ", ") + "[" + name + "]";
  return out;
}

std::string list_keys(const std::string& section) {
  std::string out;
  for (const Field& f : fields())
    if (section == f.section) out += std::string(out.empty() ? "" : ", ") + f.key;
  return out;
}

// ---- value text -------------------------------------------------------------

// A TOML basic string: json::quote escapes all that TOML requires.
using json::quote;

std::string format_bound(double v) {
  return v == static_cast<double>(static_cast<int64_t>(v)) ? std::to_string(static_cast<int64_t>(v))
                                                           : format_double(v);
}

// The field's value in c as TOML text.
std::string format_field(const Field& f, const Config& c) {
  switch (f.kind) {
    case Kind::Int: return std::to_string(f.get<int64_t>(c));
    case Kind::Double: return format_double(f.get<double>(c));
    case Kind::Bool: return f.get<bool>(c) ? "true" : "false";
    case Kind::String: return quote(f.get<std::string>(c));
    case Kind::IntList: {
      if (f.rule.minus_one_ok && f.get<std::vector<int64_t>>(c) == std::vector<int64_t>{-1}) return quote("auto");
      std::string out = "[";
      for (int64_t v : f.get<std::vector<int64_t>>(c))
        out += (out.size() > 1 ? ", " : "") + std::to_string(v);
      return out + "]";
    }
    case Kind::WeightedPaths: {
      std::string out = "[";
      for (const WeightedPath& w : f.get<std::vector<WeightedPath>>(c))
        out += (out.size() > 1 ? ", [" : "[") + format_double(w.weight) + ", " + quote(w.path) + "]";
      return out + "]";
    }
  }
  return "?";
}

std::string node_text(const toml::node& n) {
  if (n.is_string()) return quote(n.as_string()->get());  // toml++ would print 'literal'
  std::ostringstream os;
  n.visit([&os](const auto& x) { os << x; });
  return os.str();
}

// ---- rules ------------------------------------------------------------------

std::string bounds_text(const Rule& r) {
  const bool has_lo = r.lo > -kInf, has_hi = r.hi < kInf;
  if (has_lo && has_hi) {
    return " in " + std::string(r.lo_open ? "(" : "[") + format_bound(r.lo) + ", " +
           format_bound(r.hi) + (r.hi_open ? ")" : "]");
  }
  if (has_lo) return std::string(r.lo_open ? " > " : " >= ") + format_bound(r.lo);
  if (has_hi) return std::string(r.hi_open ? " < " : " <= ") + format_bound(r.hi);
  return "";
}

std::string expectation(const Field& f) {
  const Rule& r = f.rule;
  if (!r.described.empty()) return r.described;
  switch (f.kind) {
    case Kind::Int:
      return r.minus_one_ok ? "-1 (auto) or an integer" + bounds_text(r) : "an integer" + bounds_text(r);
    case Kind::Double: return "a finite number" + bounds_text(r);
    case Kind::Bool: return "true or false";
    case Kind::String: {
      if (r.choices.empty()) return "a string";
      std::string out = "one of ";
      for (size_t i = 0; i < r.choices.size(); ++i) out += (i ? ", " : "") + quote(r.choices[i]);
      return out;
    }
    case Kind::IntList:
      return (r.minus_one_ok ? "\"auto\" or an array of integers" : "an array of integers") + bounds_text(r);
    case Kind::WeightedPaths: return "an array of [weight, prefix] pairs, each weight a finite number" + bounds_text(r);
  }
  return "?";
}

std::string type_name(Kind k) {
  switch (k) {
    case Kind::Int: return "integer";
    case Kind::Double: return "number";
    case Kind::Bool: return "boolean";
    case Kind::String: return "string";
    case Kind::IntList: return "array of integers";
    case Kind::WeightedPaths: return "array of [number, string] pairs";
  }
  return "?";
}

bool in_bounds(const Rule& r, double v) {
  // Every number is finite: inf passes "> 0" as NaN does not, and means nothing
  // as a learning rate, an epsilon or a timeout (NaN fails the bounds below too).
  if (!std::isfinite(v)) return false;
  const bool lo_ok = r.lo_open ? v > r.lo : v >= r.lo;
  const bool hi_ok = r.hi_open ? v < r.hi : v <= r.hi;
  return lo_ok && hi_ok;
}

bool allowed(const Field& f, const Config& c) {
  const Rule& r = f.rule;
  switch (f.kind) {
    case Kind::Int: {
      const int64_t v = f.get<int64_t>(c);
      return (r.minus_one_ok && v == -1) || in_bounds(r, static_cast<double>(v));
    }
    case Kind::Double: return in_bounds(r, f.get<double>(c));
    case Kind::Bool: return true;
    case Kind::String: {
      if (r.choices.empty()) return true;
      for (const auto& choice : r.choices)
        if (f.get<std::string>(c) == choice) return true;
      return false;
    }
    case Kind::IntList:
      if (r.minus_one_ok && f.get<std::vector<int64_t>>(c) == std::vector<int64_t>{-1}) return true;
      for (int64_t v : f.get<std::vector<int64_t>>(c))
        if (!in_bounds(r, static_cast<double>(v))) return false;
      return true;
    case Kind::WeightedPaths:
      for (const WeightedPath& w : f.get<std::vector<WeightedPath>>(c))
        if (!in_bounds(r, w.weight)) return false;
      return true;
  }
  return false;
}

// ---- setting keys -----------------------------------------------------------

// Stores n into f's member of c; false when n has the wrong type (an integer is
// accepted for a number, a float never for an integer).
bool assign(const Field& f, const toml::node& n, Config& c) {
  switch (f.kind) {
    case Kind::Int:
      if (!n.is_integer()) return false;
      f.get<int64_t>(c) = n.as_integer()->get();
      return true;
    case Kind::Double:
      if (n.is_floating_point()) {
        f.get<double>(c) = n.as_floating_point()->get();
      } else if (n.is_integer()) {
        f.get<double>(c) = static_cast<double>(n.as_integer()->get());
      } else {
        return false;
      }
      return true;
    case Kind::Bool:
      if (!n.is_boolean()) return false;
      f.get<bool>(c) = n.as_boolean()->get();
      return true;
    case Kind::String:
      if (!n.is_string()) return false;
      f.get<std::string>(c) = n.as_string()->get();
      return true;
    case Kind::IntList: {
      if (f.rule.minus_one_ok && n.is_string() && n.as_string()->get() == "auto") {
        f.get<std::vector<int64_t>>(c) = {-1};
        return true;
      }
      const toml::array* arr = n.as_array();
      if (!arr) return false;
      std::vector<int64_t> out;
      for (const toml::node& e : *arr) {
        if (!e.is_integer()) return false;
        out.push_back(e.as_integer()->get());
      }
      f.get<std::vector<int64_t>>(c) = std::move(out);
      return true;
    }
    case Kind::WeightedPaths: {  // [[0.7, "a"], [0.3, "b"]]: TOML arrays may mix types
      const toml::array* arr = n.as_array();
      if (!arr) return false;
      std::vector<WeightedPath> out;
      for (const toml::node& e : *arr) {
        const toml::array* pair = e.as_array();
        if (!pair || pair->size() != 2 || !(*pair)[1].is_string()) return false;
        const toml::node& w = (*pair)[0];
        if (!w.is_floating_point() && !w.is_integer()) return false;
        out.push_back({w.is_integer() ? static_cast<double>(w.as_integer()->get()) : w.as_floating_point()->get(),
                       (*pair)[1].as_string()->get()});
      }
      f.get<std::vector<WeightedPath>>(c) = std::move(out);
      return true;
    }
  }
  return false;
}

[[noreturn]] void bad_value(const std::string& where, const Field& f, const std::string& value,
                            const std::string& suffix) {
  throw ConfigError(where + ": " + f.name() + " = " + value + ": expected " + expectation(f) + suffix);
}

void set_field(const Field& f, const toml::node& n, Config& c, const std::string& where,
               const std::string& suffix) {
  if (!assign(f, n, c)) bad_value(where, f, node_text(n), suffix);
  if (!allowed(f, c)) bad_value(where, f, format_field(f, c), suffix);
}

std::string line_of(const toml::node& n) {
  return " (line " + std::to_string(n.source().begin.line) + ")";
}

void read_sections(const toml::table& root, const std::string& name, Config& c) {
  for (const auto& [k, node] : root) {
    const std::string section(k.str());
    if (!is_section(section)) {
      throw ConfigError(name + ": unknown " + (node.is_table() ? "section [" + section + "]" : "top-level key " + section) +
                        line_of(node) + ": expected one of " + list_sections());
    }
    const toml::table* tbl = node.as_table();
    if (!tbl) throw ConfigError(name + ": " + section + " must be a table [" + section + "]" + line_of(node));
    for (const auto& [kk, value] : *tbl) {
      const std::string key(kk.str());
      const Field* f = find_field(section, key);
      if (!f) {
        throw ConfigError(name + ": unknown key " + section + "." + key + line_of(value) + ": keys of [" +
                          section + "] are " + list_keys(section));
      }
      set_field(*f, value, c, name, line_of(value));
    }
  }
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// `section.key=value`, the value read as TOML; a string key also takes bare text.
void apply_override(const std::string& ov, Config& c, const std::string& name) {
  const std::string where = name + ": --set " + ov;
  const auto eq = ov.find('=');
  const std::string path = trim(ov.substr(0, eq));
  const auto dot = path.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot == 0 || dot + 1 == path.size()) {
    throw ConfigError("--set " + ov + ": expected section.key=value, e.g. training.lr=3e-4");
  }
  const std::string section = path.substr(0, dot), key = path.substr(dot + 1);
  const Field* f = find_field(section, key);
  if (!f) {
    const std::string hint = is_section(section) ? "keys of [" + section + "] are " + list_keys(section)
                                                 : "sections are " + list_sections();
    throw ConfigError("--set " + ov + ": unknown key " + path + ": " + hint);
  }
  const std::string text = trim(ov.substr(eq + 1));
  toml::table parsed;
  bool ok = false;
  try {
    const std::string doc = "v = " + text;
    parsed = toml::parse(std::string_view(doc), std::string_view("--set"));
    ok = parsed.size() == 1;  // "1\nx = 2" must not smuggle in a second key
  } catch (const toml::parse_error&) {
  }
  if (f->kind == Kind::String && (!ok || !parsed.get("v")->is_string())) {
    f->get<std::string>(c) = text;  // bare string: --set schedule.kind=interleaved
    if (!allowed(*f, c)) bad_value(where, *f, quote(text), "");
    return;
  }
  if (f->kind == Kind::IntList && f->rule.minus_one_ok && text == "auto") {  // --set parallel.pipeline_layers=auto
    f->get<std::vector<int64_t>>(c) = {-1};
    return;
  }
  if (!ok) bad_value(where, *f, text, " (values are read as TOML)");
  set_field(*f, *parsed.get("v"), c, where, "");
}

}  // namespace

// ---- public API ---------------------------------------------------------------

Config parse_config(const std::string& toml_text, const std::string& name,
                    const std::vector<std::string>& overrides) {
  toml::table root;
  try {
    root = toml::parse(std::string_view(toml_text), std::string_view(name));
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    throw ConfigError(name + ":" + n(at.line) + ":" + n(at.column) + ": invalid TOML: " +
                      std::string(e.description()));
  }
  Config c;
  c.source = name;
  read_sections(root, name, c);
  for (const std::string& ov : overrides) apply_override(ov, c, name);
  check_config(c);
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path, ec)) {
    throw ConfigError("cannot open config file '" + path + "'");
  }
  std::ostringstream text;
  text << in.rdbuf();
  // An empty file (or only comments) would silently train every default: most
  // likely the wrong file, or one cut short.
  std::istringstream lines(text.str());
  bool sets_something = false;
  for (std::string line; !sets_something && std::getline(lines, line);) {
    const size_t first = line.find_first_not_of(" \t\r");
    sets_something = first != std::string::npos && line[first] != '#';
  }
  if (!sets_something)
    throw ConfigError(path + ": the config file is empty (or only comments): expected sections such as [model] and "
                      "[training] (see configs/gpt-tiny.toml); an empty file would train every default");
  return parse_config(text.str(), path, overrides);
}

void check_config(const Config& c) {
  for (const Field& f : fields()) {
    if (!allowed(f, c)) bad_value(c.source, f, format_field(f, c), "");
  }
  config_rules::check_relations(c);
}

void check_model_config(const Config& c, const std::vector<ModelFamilyRules>& families) {
  for (const Field& f : fields()) {
    if (std::string(f.section) == "model" && !allowed(f, c)) bad_value(c.source, f, format_field(f, c), "");
  }
  config_rules::check_model_relations(c);
  check_model_family(c, families);
}

std::string pipeline_dtype(const Config& c) {
  return c.parallel.pipeline_dtype == "auto" ? c.training.precision : c.parallel.pipeline_dtype;
}

int64_t num_microbatches(const Config& c) {
  const int64_t dp = c.parallel.dp;
  if (dp < 1) fail(c, "parallel.dp = " + n(dp) + " is unresolved: call resolve_world first");
  return c.training.global_batch_size / (c.training.micro_batch_size * dp);
}

std::string to_toml(const Config& c) {
  std::ostringstream os;
  os << "# Trident config: every key with its effective value (from " << c.source << ").\n";
  std::string section;
  for (const Field& f : fields()) {
    if (section != f.section) {
      section = f.section;
      os << "\n[" << section << "]\n";
    }
    std::string line = std::string(f.key) + " = " + format_field(f, c);
    if (line.size() < 32) line.resize(32, ' ');
    os << line << "  # " << f.doc << "\n";
  }
  return os.str();
}

std::string data_order(const Config& c) {
  if (c.data.order != "auto") return c.data.order;
  return c.data.format == "megatron" ? "megatron" : "stream";
}

bool operator==(const Config& a, const Config& b) {
  for (const Field& f : fields()) {
    bool same = false;
    switch (f.kind) {
      case Kind::Int: same = f.get<int64_t>(a) == f.get<int64_t>(b); break;
      case Kind::Double: same = f.get<double>(a) == f.get<double>(b); break;
      case Kind::Bool: same = f.get<bool>(a) == f.get<bool>(b); break;
      case Kind::String: same = f.get<std::string>(a) == f.get<std::string>(b); break;
      case Kind::IntList: same = f.get<std::vector<int64_t>>(a) == f.get<std::vector<int64_t>>(b); break;
      case Kind::WeightedPaths:
        same = f.get<std::vector<WeightedPath>>(a) == f.get<std::vector<WeightedPath>>(b);
        break;
    }
    if (!same) return false;
  }
  return true;
}

std::vector<ConfigKey> config_keys() {
  const Config defaults;
  std::vector<ConfigKey> out;
  for (const Field& f : fields())
    out.push_back({f.name(), type_name(f.kind), format_field(f, defaults), expectation(f), f.doc});
  return out;
}

}  // namespace trident
