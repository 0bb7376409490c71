// Activation recomputation (gradient checkpointing) for libtorch's C++ API,
// which has no checkpoint utility (torch.utils.checkpoint is Python; 2.11's
// C++ API still has none).
//
// NOTE [recomputation]
// recompute(fn, x) returns fn(x) but keeps only x (and the CPU generator's state and, on CUDA,
// x's device's, so dropout masks come out the same) instead of everything fn's autograd graph
// would save. Its backward re-runs fn with grad enabled on a detached copy of x and
// back-propagates through that fresh graph with a nested (reentrant) torch::autograd::backward:
// the same ops on the same values, so every gradient is bit-identical to not recomputing, and
// parameter gradients reach their AccumulateGrad nodes (and the DP hooks on them) as usual. The
// re-forward runs inside the backward (on CUDA, the autograd engine's device thread), where the
// forward-time weight-gradient scope (NOTE [I/W split]) is not open: so the forward keeps the
// scope's queue and the backward re-opens it around the re-forward, and an I defers the
// recomputed layers' dW for a later W as without recomputation. Korthikanti et al. (2022)'s
// "selective" recomputes only the attention core, whose (batch, heads, seq, seq) scores dominate;
// Trident's SDPA (models/common/attention.h) keeps O(seq) per head, so that alone saves nothing
// (benchmarks/results/recompute_memory.txt): Trident's selective also recomputes the MLP's up projection
// and GELU from the block's normalised input, dropping the (batch, seq, ffn/tp) activation GELU's backward keeps.
#pragma once

#include <functional>
#include <string>

#include <ATen/ATen.h>

namespace trident {

enum class Recompute {
  kNone,       // keep every activation
  kFull,       // recompute each transformer block from its input
  kSelective,  // recompute the attention core and the MLP's up projection + GELU
};

// "none" | "full" | "selective"; throws on anything else.
Recompute parse_recompute(const std::string& name);

// fn(x), recomputed in the backward instead of stored (see the NOTE). fn must
// be a function of x and of parameters only (no other tensor needing grad).
// When grad mode is off it is simply fn(x).
at::Tensor recompute(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x);

}  // namespace trident
