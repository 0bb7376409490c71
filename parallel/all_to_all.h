// all_to_all_single as an autograd operation: the one collective both expert
// parallelism (the all-to-all token dispatcher's rows, parallel/expert_parallel.h)
// and context parallelism (Ulysses' heads, parallel/context_parallel.h) move
// tensors with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "parallel/process_groups.h"

namespace trident {

// x's rows in_splits[i] to group rank i; returns the out_splits[i] rows from each. Backward: the
// same with the splits swapped, over `back` (NOTE [two expert groups] in parallel/expert_parallel.h;
// default g). `what` names the call ("<forward|backward> " + what under nccl-rules).
at::Tensor all_to_all_rows(const Group& g, const at::Tensor& x, const std::vector<int64_t>& out_splits,
                           const std::vector<int64_t>& in_splits, const Group* back = nullptr,
                           const std::string& what = "");

}  // namespace trident
