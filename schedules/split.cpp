// Balanced split: best[k][i] = the smallest possible slowest-stage cost when
// the first k stages hold layers [0, i). Exact; layers and stages are small.
#include "schedules/split.h"

#include <cmath>
#include <limits>
#include <string>

#include "schedules/action.h"

namespace trident::sched {

namespace {

void check_inputs(const std::vector<double>& layer_costs, double embedding_cost, double head_cost) {
  for (size_t i = 0; i < layer_costs.size(); ++i)
    if (!(layer_costs[i] > 0) || !std::isfinite(layer_costs[i]))
      throw ScheduleError("layer " + std::to_string(i) + " cost " + std::to_string(layer_costs[i]) +
                          ", expected a finite cost > 0");
  if (!(embedding_cost >= 0) || !std::isfinite(embedding_cost) || !(head_cost >= 0) || !std::isfinite(head_cost))
    throw ScheduleError("embedding cost " + std::to_string(embedding_cost) + " and head cost " +
                        std::to_string(head_cost) + ", expected finite costs >= 0");
}

}  // namespace

std::vector<int> balanced_split(const std::vector<double>& layer_costs, double embedding_cost, double head_cost,
                                int virtual_stages) {
  check_inputs(layer_costs, embedding_cost, head_cost);
  const int L = static_cast<int>(layer_costs.size()), S = virtual_stages;
  if (S < 1 || L < S)
    throw ScheduleError("balanced split of " + std::to_string(L) + " layers over " + std::to_string(S) +
                        " virtual stages: expected at least one stage and one layer per stage");
  std::vector<double> pre(L + 1, 0.0);
  for (int i = 0; i < L; ++i) pre[i + 1] = pre[i] + layer_costs[i];
  auto stage_cost = [&](int k, int j, int i) {  // stage k (1-based) holding layers [j, i)
    return pre[i] - pre[j] + (k == 1 ? embedding_cost : 0.0) + (k == S && i == L ? head_cost : 0.0);
  };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> cut(S + 1, std::vector<int>(L + 1, 0));  // where stage k starts
  for (int i = 1; i <= L; ++i) best[1][i] = stage_cost(1, 0, i);
  for (int k = 2; k <= S; ++k)
    for (int i = k; i <= L; ++i)
      for (int j = k - 1; j < i; ++j) {  // strict '<': the first (smallest) j wins ties
        const double c = std::max(best[k - 1][j], stage_cost(k, j, i));
        if (c < best[k][i]) best[k][i] = c, cut[k][i] = j;
      }
  std::vector<int> layers(S);
  for (int k = S, i = L; k >= 1; --k) {
    const int j = k == 1 ? 0 : cut[k][i];
    layers[k - 1] = i - j;
    i = j;
  }
  return layers;
}

std::vector<double> split_stage_costs(const std::vector<double>& layer_costs, double embedding_cost, double head_cost,
                                      const std::vector<int>& layers_per_stage) {
  check_inputs(layer_costs, embedding_cost, head_cost);
  std::vector<double> out;
  size_t next = 0;
  for (size_t k = 0; k < layers_per_stage.size(); ++k) {
    if (layers_per_stage[k] < 0 || next + layers_per_stage[k] > layer_costs.size())
      throw ScheduleError("split gives stage " + std::to_string(k) + " " + std::to_string(layers_per_stage[k]) +
                          " layers, more than the " + std::to_string(layer_costs.size() - next) + " left");
    double c = k == 0 ? embedding_cost : 0.0;
    for (int i = 0; i < layers_per_stage[k]; ++i) c += layer_costs[next++];
    if (k + 1 == layers_per_stage.size()) c += head_cost;
    out.push_back(c);
  }
  if (next != layer_costs.size())
    throw ScheduleError("split covers " + std::to_string(next) + " of " + std::to_string(layer_costs.size()) + " layers");
  return out;
}

}  // namespace trident::sched
