// A parameter and its metadata from birth: global name, full shape and which
// slice of the full tensor this rank holds. Checkpoints, init, grad-norm and
// the optimizer all read this instead of guessing from tensor shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace trident {

struct ParamInfo {
  std::string name;                 // global name, e.g. "layers.3.attn.qkv.weight"
  std::vector<int64_t> full_shape;  // shape of the unsharded tensor
  int shard_dim = -1;               // dimension split over TP; -1 = replicated over TP
  int64_t shard_offset = 0;         // start of this rank's slice along shard_dim
  bool no_decay = false;            // biases and norms: no weight decay
  bool sequence_parallel_grad = false;  // replicated over TP but fed a sequence shard:
                                        // its grad is all-reduced over TP under SP
  bool tp_partial_grad = false;     // replicated over TP but fed this rank's heads (Qwen3's per-head
                                    // q/k norms): its grad is all-reduced over TP at any tp, as
                                    // Megatron reduces its qk-layernorm weights
  bool tied_copy = false;           // the LM head's copy of the word embedding: its grad is
                                    // summed with the embedding's; counted once in norms
  std::string init = "normal";      // "normal" | "zeros" | "ones"
  double init_std = 0.02;
  int64_t init_valid_rows = -1;     // rows >= this are zero at init (padded vocabulary)
  // A routed experts' stacked weight (E, ...): under expert parallelism this
  // rank holds experts [expert_offset, expert_offset + local dim 0) of dim 0,
  // and its gradient is reduced over the expert-data-parallel group
  // (NOTE [expert grid] in parallel/layout.h).
  bool expert = false;
  int64_t expert_offset = 0;
};

struct Param {
  at::Tensor tensor;  // leaf, requires_grad
  ParamInfo info;
};

// A parameter with copies in several virtual stages (a word embedding tied to
// the LM head): its global name and the stages holding a copy.
struct TiedGroup {
  std::string name;
  std::vector<int> stages;
};

// The full initial tensor of a parameter: a function of (seed, name) only.
at::Tensor init_full_tensor(int64_t seed, const ParamInfo& info);
// Where this rank's slice starts in the full tensor, per dimension: the TP
// offset along shard_dim, the expert offset along dim 0.
std::vector<int64_t> local_offset(const ParamInfo& info);
// This rank's slice (of `local_shape`) of a full tensor of info.full_shape:
// a view, narrowed along shard_dim (TP) and dim 0 (the experts under EP).
at::Tensor local_slice(const ParamInfo& info, const at::Tensor& full, const std::vector<int64_t>& local_shape);
// This rank's slice of init_full_tensor, as a fresh leaf requiring grad.
at::Tensor init_shard(int64_t seed, const ParamInfo& info, const std::vector<int64_t>& local_shape);

// 64-bit FNV-1a: stable across compilers and standard libraries (std::hash is not).
uint64_t stable_hash(const std::string& s, uint64_t seed);

}  // namespace trident
