// The order in which a rank's action list issues its experts' all-to-alls,
// and the check that every rank of an expert-parallel group issues the same
// ones in the same order (DESIGN.md 20).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "schedules/action.h"

namespace trident::sched {

// NOTE [all-to-all order]
// NCCL matches collectives by their order alone: the k-th all-to-all a rank
// issues on a group meets the k-th of every other member, whatever each was
// meant to carry; issued in another order, the ranks exchange one layer's
// rows for another's (same shapes) or hang (different splits). An MoE layer
// issues its all-to-alls in its forward on the expert-parallel group and in
// its backward on that group's twin (NOTE [two expert groups] in
// parallel/expert_parallel.h), so a rank's order on each group is a function
// of its action list: per F (list order) the chunk's MoE layers first to last,
// per B or I the chunk's MoE layers last to first (W issues none: it computes
// weight gradients only). The members of an EP group must have equal
// sequences; a stage without MoE layers has none on either group.

struct ExpertCall {
  int mb = 0, chunk = 0, layer = 0;  // micro-batch, the rank's chunk, the model's layer index
  bool operator==(const ExpertCall& o) const { return mb == o.mb && chunk == o.chunk && layer == o.layer; }
};

// [0]: the forward group's calls in issue order, [1]: the backward group's.
// moe_layers[c]: the model layer indices of chunk c's MoE layers, ascending.
std::array<std::vector<ExpertCall>, 2> expert_calls(const ActionList& list,
                                                    const std::vector<std::vector<int>>& moe_layers);

// Throws ScheduleError unless every member's list issues the same calls in
// the same order on each group, naming the first member that differs from
// members[0] (its global rank), the group, the place in the sequence and
// each side's micro-batch and layer. `ranks[i]` is member i's global rank.
void check_expert_order(const std::vector<const ActionList*>& members, const std::vector<int>& ranks,
                        const std::vector<std::vector<int>>& moe_layers);

}  // namespace trident::sched
