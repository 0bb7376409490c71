// Activation recomputation (gradient checkpointing) for libtorch's C++ API,
// which has no checkpoint utility (torch.utils.checkpoint is Python; 2.11's
// C++ API still has none).
//
// NOTE [recomputation]
// recompute(fn, x) returns fn(x) but keeps only x (and the state of the
// CPU's generator and, on CUDA, of x's device's, so dropout masks come out
// the same) instead of everything fn's
// autograd graph would save. Its backward re-runs fn with grad enabled on a
// detached copy of x and back-propagates through that fresh graph with a
// nested (reentrant) torch::autograd::backward. The recomputed forward runs
// the same ops on the same values, so every gradient is bit-identical to not
// recomputing; parameter gradients reach their AccumulateGrad nodes (and the
// data-parallel hooks on them) as usual. The re-forward runs inside the
// backward, on the autograd engine's device thread on CUDA, where the
// caller's forward-time weight-gradient scope (NOTE [I/W split]) is not open:
// so the forward keeps the scope's queue and the backward re-opens it around
// the re-forward. The recomputed linear layers then record the same queue,
// and an I defers their dW for a later W action as it does without
// recomputation, on whatever thread the backward runs.
//
// Korthikanti et al. (2022)'s "selective" recomputes only the attention core,
// whose (batch, heads, seq, seq) scores dominate. Trident's attention runs
// through scaled_dot_product_attention (models/common/attention.h), whose
// fused kernels keep O(seq) per head instead, so recomputing the core alone
// saves nothing (measured on gpt-tiny: 2.22 MB without recomputation, 2.25 MB
// with). Trident's selective therefore also recomputes the MLP's up projection and GELU
// from the block's normalised input, dropping the (batch, seq, ffn/tp)
// activation that GELU's backward keeps, the largest of a block.
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
