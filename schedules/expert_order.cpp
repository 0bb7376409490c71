// NOTE [all-to-all order] in expert_order.h.
#include "schedules/expert_order.h"

#include <stdexcept>

namespace trident::sched {

std::array<std::vector<ExpertCall>, 2> expert_calls(const ActionList& list,
                                                    const std::vector<std::vector<int>>& moe_layers) {
  std::array<std::vector<ExpertCall>, 2> out;
  for (const Action& a : list) {
    if (a.kind != ActionKind::F && !is_backward(a.kind)) continue;
    if (a.chunk >= moe_layers.size())
      throw ScheduleError("expert all-to-all order: " + to_token(a) + " names chunk " + std::to_string(a.chunk) +
                          " but the model has MoE layers for " + std::to_string(moe_layers.size()) + " chunks");
    const std::vector<int>& layers = moe_layers[a.chunk];
    if (a.kind == ActionKind::F) {
      for (int l : layers) out[0].push_back({a.mb, a.chunk, l});
    } else {
      for (auto it = layers.rbegin(); it != layers.rend(); ++it) out[1].push_back({a.mb, a.chunk, *it});
    }
  }
  return out;
}

void check_expert_order(const std::vector<const ActionList*>& members, const std::vector<int>& ranks,
                        const std::vector<std::vector<int>>& moe_layers) {
  if (members.size() != ranks.size() || members.empty())
    throw std::logic_error("check_expert_order: one global rank per member list, and at least one member");
  const auto first = expert_calls(*members[0], moe_layers);
  auto call = [](const std::vector<ExpertCall>& v, size_t k) {
    if (k >= v.size()) return std::string("nothing (its sequence ends there)");
    return "micro-batch " + std::to_string(v[k].mb) + " layer " + std::to_string(v[k].layer);
  };
  for (size_t i = 1; i < members.size(); ++i) {
    const auto mine = expert_calls(*members[i], moe_layers);
    for (int g = 0; g < 2; ++g) {
      const std::vector<ExpertCall>&a = first[g], &b = mine[g];
      size_t k = 0;
      while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
      if (k == a.size() && k == b.size()) continue;
      throw ScheduleError(
          "expert all-to-all order: rank " + std::to_string(ranks[i]) + " issues its " + (g ? "backward" : "forward") +
          " all-to-all number " + std::to_string(k) + " for " + call(b, k) + " where rank " +
          std::to_string(ranks[0]) + " of its expert-parallel group issues " + call(a, k) +
          ": NCCL would match the two (NOTE [all-to-all order] in schedules/expert_order.h)");
    }
  }
}

}  // namespace trident::sched
