// The router's options and their rules: see router_options.h.
#include "core/router_options.h"

#include "core/config.h"

namespace trident {

RouterOptions router_options(const ModelConfig& m) {
  RouterOptions o;
  o.experts = m.experts;
  o.top_k = m.moe_top_k;
  o.norm_topk_prob = m.moe_norm_topk_prob;
  o.capacity_factor = m.moe_capacity_factor;
  o.drop_by_position = m.moe_token_drop_policy == "position";
  o.score = m.moe_score_function;
  o.n_group = m.moe_router_groups;
  o.topk_group = m.moe_router_group_topk;
  o.routed_scaling_factor = m.moe_routed_scaling_factor;
  return o;
}

std::string router_options_error(const RouterOptions& o) {
  const auto n = [](int64_t v) { return std::to_string(v); };
  if (o.experts < 1) return "model.experts = " + n(o.experts) + ": expected at least 1";
  if (o.top_k < 1 || o.top_k > o.experts)
    return "model.moe_top_k (" + n(o.top_k) + ") must be at most model.experts (" + n(o.experts) + ")";
  if (o.score != "softmax" && o.score != "sigmoid")
    return "model.moe_score_function = \"" + o.score + "\": expected \"softmax\" or \"sigmoid\"";
  if (o.n_group < 1 || o.experts % o.n_group != 0)
    return "model.moe_router_groups (" + n(o.n_group) + ") must divide model.experts (" + n(o.experts) + ")";
  if (o.topk_group < 1 || o.topk_group > o.n_group)
    return "model.moe_router_group_topk (" + n(o.topk_group) + ") must be at most model.moe_router_groups (" + n(o.n_group) + ")";
  if (o.top_k > o.topk_group * (o.experts / o.n_group))
    return "model.moe_top_k (" + n(o.top_k) + ") exceeds the experts of model.moe_router_group_topk (" +
           n(o.topk_group) + ") groups of " + n(o.experts / o.n_group);
  if (o.softmax_after_topk && o.score != "softmax")
    return "a softmax after top-k needs model.moe_score_function = \"softmax\"";
  if (!(o.routed_scaling_factor > 0)) return "model.moe_routed_scaling_factor must be > 0";
  return "";
}

}  // namespace trident
