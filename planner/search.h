// The layout search (pure): every tp, cp (up to SearchOptions::max_cp), pp
// (uniform and balanced uneven splits), dp, schedule kind and chunks,
// micro-batch size, recomputation, sequence parallelism and ZeRO for a GPU
// count, each evaluated with the step model; what does not fit is dropped
// with its reason counted.
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
  int max_cp = 1;                 // context-parallel sizes 1, 2, 4, ... up to this (the ring, cp_comm = p2p)
  bool moe_tp = false;            // a mixture of experts at tp > 1 too (NOTE [planned experts])
};

struct SearchResult {
  std::vector<Estimate> best;              // fastest first
  int64_t evaluated = 0;                   // layouts simulated
  int64_t fitting = 0;                     // of them, those within device memory
  std::map<std::string, int64_t> dropped;  // reason -> layouts dropped for it
};

// Throws PlanError when no layout at all fits (naming the reasons) or the options are bad.
SearchResult search(const Problem& pr, const SearchOptions& o);

// The longest sequence some layout of o.gpus devices trains within device
// memory: the model's seq_len doubled while a layout fits (at most `doublings`
// times), with the search's best layout at that length. Throws PlanError when
// none fits at the model's own seq_len.
struct LongestSequence {
  int64_t seq_len = 0;
  SearchResult at_longest;
  int64_t first_too_long = 0;  // the next length tried, which no layout fits (0: the doublings ran out)
};
LongestSequence longest_sequence(const Problem& pr, const SearchOptions& o, int doublings = 20);

}  // namespace trident::plan
