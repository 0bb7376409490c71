// The config's text: the schema (fields(), every section's table in order; each
// table sits with the rules about its keys, core/config_schema.h) read for TOML
// parsing, --set overrides, per-key checks, to_toml, operator== and
// config_keys(), so they cannot drift apart; check_config() runs each key's own
// rule, then each section's rules across keys. The host and device memory
// checks are in config_resources.cpp; what each key means is documented once,
// in configs/README.md's tables.
#include "core/config.h"
#include "core/config_rules.h"
#include "core/config_schema.h"
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

void check_relations(const Config& c, ConfigUse use) {
  check_model_relations(c);  // sizes first: before any product below is formed in int64
  check_schedule(c);
  check_training(c);
  if (use == ConfigUse::kRun) check_data(c);  // NOTE [plan reads no data]
  check_checkpoint(c);
}

}  // namespace config_rules

void config_fail(const Config& c, const std::string& msg) { config_rules::fail(c, msg); }

std::string config_number(double v) { return config_rules::format_double(v); }

namespace {

using config_rules::fail;
using config_rules::format_double;
using config_rules::n;

using namespace config_rules;  // the schema types (core/config_schema.h)

const std::vector<Field>& fields() {
  static const std::vector<Field> table = [] {
    std::vector<Field> all;
    for (auto part : {model_fields, parallel_fields, schedule_fields, training_fields, data_fields,
                      checkpoint_fields, logging_fields}) {
      for (Field& f : part()) all.push_back(std::move(f));
    }
    return all;
  }();
  return table;
}

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
      c.given.insert(f->name());
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
  c.given.insert(f->name());  // NOTE [given keys]: a refused value throws before anything reads it
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

Config parse_config(const std::string& toml_text, const std::string& name, const std::vector<std::string>& overrides,
                    ConfigUse use) {
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
  check_config(c, use);
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides, ConfigUse use) {
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
  return parse_config(text.str(), path, overrides, use);
}

void check_config(const Config& c, ConfigUse use) {
  for (const Field& f : fields()) {
    if (!allowed(f, c)) bad_value(c.source, f, format_field(f, c), "");
  }
  config_rules::check_relations(c, use);
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
  const Config defaults;
  std::ostringstream os;
  os << "# Trident config: every key with its effective value (from " << c.source << ").\n";
  std::string section;
  for (const Field& f : fields()) {
    if (section != f.section) {
      section = f.section;
      os << "\n[" << section << "]\n";
    }
    std::string line = std::string(f.key) + " = " + format_field(f, c);
    // NOTE [given keys]: a key the model does not read, neither given nor changed, stays ungiven
    // when the text is read back (a dense model's model.moe_top_k would be refused).
    if (!c.gave(f.name()) && model_key_unread(c, f.name()) && format_field(f, defaults) == format_field(f, c))
      line = "# " + line;
    if (line.size() < 32) line.resize(32, ' ');
    os << line << "  # " << f.doc << (line[0] == '#' ? " (not read by this model)" : "") << "\n";
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
