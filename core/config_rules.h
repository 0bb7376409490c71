// What the config's files share (core/ only): config.cpp (parsing and text),
// one file per section with its keys and the rules across them
// (config_model.cpp, config_parallel.cpp, config_training.cpp,
// config_data.cpp, config_run.cpp; core/config_schema.h) and
// config_resources.cpp (the rank's memory against the host and device).
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"

namespace trident::config_rules {

// Throws ConfigError "<c.source>: <msg>".
[[noreturn]] void fail(const Config& c, const std::string& msg);
std::string n(int64_t v);
// Shortest decimal text that reads back as exactly `v`, always a TOML float.
std::string format_double(double v);

// NOTE [size checks] Every size product (parameters, a micro-batch's logits,
// tokens) is computed in long double, which cannot overflow at any int64
// inputs, and refused when it would not fit int64 bytes: after check_config
// the model, the data and the schedule compute their sizes in int64 safely.
// check_host_resources() then compares a lower bound of a rank's memory with
// the host's, before anything is allocated or any rank is met.
using Big = long double;
constexpr Big kMaxBytes = 9.2e18L;  // int64's 9223372036854775807, rounded down
std::string big(Big v);             // 3 significant digits
// The model's parameters for a family of shape s, a lower bound (biases and
// norms left out).
Big model_params(const ModelConfig& m, const ModelFeatures& s);
// Of those, the routed experts' (every MoE layer's experts x 3 SwiGLU matrices): what parallel.ep splits.
Big expert_params(const ModelConfig& m);
// One layer's attention matrices (q, k, v, o; MLA's down and up projections and o): what
// model_params counts per layer, and the planner's cost model (planner/model_cost.cpp) too.
Big attention_params(const ModelConfig& m);
// The layers whose MLP is a mixture of experts (model.moe_first_dense on; 0 without experts).
int64_t moe_layers(const ModelConfig& m);

// check_config's rules across keys, each section's in its file (each key's own
// rule is checked first, in config.cpp); check_model_relations is
// check_model_config's part of them.
void check_relations(const Config& c, ConfigUse use);  // check_data for kRun only (NOTE [plan reads no data])
void check_model_relations(const Config& c);  // sizes (NOTE [size checks]), then shapes
void check_moe_keys(const Config& c, const ModelFeatures& shape);  // NOTE [MoE keys]
void check_schedule(const Config& c);
void check_training(const Config& c);
void check_data(const Config& c);
void check_checkpoint(const Config& c);
// The global batch splits into micro-batches on each of dp ranks.
void check_batch_split(const Config& c, int64_t dp);

}  // namespace trident::config_rules
