// The layout search (pure): every tp, pp (uniform and balanced uneven
// splits), dp, schedule kind and chunks, micro-batch size, recomputation,
// sequence parallelism and ZeRO for a GPU count, each evaluated with the step
// model; what does not fit is dropped with its reason counted.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/step.h"

namespace trident::plan {

struct SearchOptions {
  int gpus = 1;
  int top = 5;                    // how many of the best layouts to keep
  bool tp_across_nodes = false;   // allow tp larger than a node
  int max_micro_batch = 16;       // micro-batch sizes 1, 2, 4, ... up to this
};

struct SearchResult {
  std::vector<Estimate> best;              // fastest first
  int64_t evaluated = 0;                   // layouts simulated
  int64_t fitting = 0;                     // of them, those within device memory
  std::map<std::string, int64_t> dropped;  // reason -> layouts dropped for it
};

// Throws PlanError when no layout at all fits (naming the reasons) or the options are bad.
SearchResult search(const Problem& pr, const SearchOptions& o);

}  // namespace trident::plan
