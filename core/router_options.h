// What an MoE router is asked to do (models/common/router.h routes by it) and
// the one rule set that says whether it can: the config check
// (core/config_model.cpp, check_moe_keys) and the router both call
// router_options_error(). Pure: no libtorch.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

struct ModelConfig;  // core/config.h

struct RouterOptions {
  int64_t experts = 8;
  int64_t top_k = 2;
  std::string score = "softmax";  // "softmax" | "sigmoid"
  bool softmax_after_topk = false;
  bool norm_topk_prob = true;
  int64_t n_group = 1;     // groups of experts (1: no group limit)
  int64_t topk_group = 1;  // groups a token may choose from
  double routed_scaling_factor = 1.0;
  // NOTE [expert capacity] in models/common/router.h: > 0 caps each expert's assignments per call; 0 = none.
  double capacity_factor = 0.0;
  bool drop_by_position = false;  // past capacity drop the latest tokens, else the lowest weights
};

// The router of an MoE family's layers, from the model.moe_* keys.
RouterOptions router_options(const ModelConfig& m);

// Empty when the options can route; else one line naming the model.* key that
// cannot: experts below 1, top-k outside 1..experts, an unknown score function,
// groups that do not divide the experts, topk_group outside 1..n_group, top-k
// above the experts of topk_group groups, softmax after top-k without softmax
// scores, a scaling factor not above 0. A group of one expert routes (its
// score is its expert's: NOTE [MoE router] in models/common/router.h).
std::string router_options_error(const RouterOptions& o);

}  // namespace trident
