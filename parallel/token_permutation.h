// The MoE layer's local permutation (Megatron's permute/unpermute): the
// (token, slot) assignments sorted by expert so that each expert's rows are
// contiguous, and the way back, each row times its weight and summed per
// token. Local to one rank; what crosses ranks is the token dispatcher's
// (parallel/token_dispatcher.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace trident {

// NOTE [MoE permutation]
// The T x K (token, slot) assignments sorted by expert, stably (within an
// expert, in token order): row j of the sorted rows is token `token[j]`'s
// assignment `order[j]` (flat index t*K + k). counts[e] rows go to expert e,
// contiguously, so each expert's rows are one GEMM. unpermute scatters the
// expert outputs back, each times its weight, summed per token (index_add in
// the sorted order: the same order, hence the same bits, in every layout).
struct Permutation {
  at::Tensor order;   // (rows) int64: flat index t*K + k of each sorted row
  at::Tensor token;   // (rows) int64: the token of each sorted row
  at::Tensor counts;  // (E) int64: rows per expert
};
// experts (T, K) int64 in [0, E). `keep` (T, K) bool, when defined: only the kept assignments are
// sorted (NOTE [expert capacity] in models/common/router.h); the others contribute nothing to
// unpermute. Keeping some costs one host read of the kept rows' count.
Permutation sort_by_expert(const at::Tensor& experts, int64_t num_experts, const at::Tensor& keep = at::Tensor());
// x (T, H) -> (rows, H): each sorted row's token.
at::Tensor permute(const at::Tensor& x, const Permutation& p);
// rows (rows, H), weights (T, K) -> (tokens, H): Σ_k weight · row.
at::Tensor unpermute(const at::Tensor& rows, const at::Tensor& weights, const Permutation& p, int64_t tokens);

// Assignments per expert of `flat` ids in [0, num_experts), without bincount's host read on CUDA.
at::Tensor expert_counts(const at::Tensor& flat, int64_t num_experts);

}  // namespace trident
