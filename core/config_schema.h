// The config's schema types, shared by the files that hold its tables (core/
// only): a Field is one key (section, name, type, the member it sets, its own
// rule, its meaning); each section's table sits in the file with the rules
// about its keys (config_model.cpp, config_parallel.cpp, config_training.cpp,
// config_data.cpp, config_run.cpp), and config.cpp reads every table in
// section order for parsing, --set overrides, to_toml, operator== and
// config_keys() (the docs and --help), so they cannot drift apart.
#pragma once

#include <cassert>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/config_rules.h"
#include "core/json.h"

namespace trident::config_rules {

using json::quote;  // every rule quotes the values it names

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

inline constexpr double kInf = std::numeric_limits<double>::infinity();

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

inline Rule any() { return {}; }
inline Rule at_least(double lo) {
  Rule r;
  r.lo = lo;
  return r;
}
inline Rule positive() {
  Rule r = at_least(0);
  r.lo_open = true;
  return r;
}
inline Rule unit_open() {  // [0, 1)
  Rule r = at_least(0);
  r.hi = 1;
  r.hi_open = true;
  return r;
}
inline Rule between(double lo, double hi) {  // [lo, hi]
  Rule r = at_least(lo);
  r.hi = hi;
  return r;
}
inline Rule above_at_most(double lo, double hi) {  // (lo, hi]
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
inline constexpr double kMinTimeoutS = 1, kMaxTimeoutS = 1e6;
// An integer >= 1, or -1 (auto); for an array, integers >= 1 or the string
// "auto" (stored as [-1]).
inline Rule auto_or_at_least_1() {
  Rule r = at_least(1);
  r.minus_one_ok = true;
  return r;
}
inline Rule one_of(std::vector<std::string> choices) {
  Rule r;
  r.choices = std::move(choices);
  return r;
}
// schedule.kind and model.arch: the layers above own the kinds and the families,
// which the foundation cannot see; check_config_tables() is handed them (NOTE [config tables]).
inline Rule kind_rule() {
  Rule r;
  r.described = "a generator's kind (schedules/generators.h: schedule_kinds()), \"zb-auto\" or \"file\"";
  return r;
}
inline Rule family_rule() {
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

// Each section's keys, in the order to_toml writes them, and the rules across
// them (each checked after every key's own rule).
std::vector<Field> model_fields();
std::vector<Field> parallel_fields();
std::vector<Field> schedule_fields();
std::vector<Field> training_fields();
std::vector<Field> data_fields();
std::vector<Field> checkpoint_fields();
std::vector<Field> logging_fields();

}  // namespace trident::config_rules
