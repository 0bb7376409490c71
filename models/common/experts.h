// The routed experts of an MoE layer and the shared expert's SwiGLU (Megatron's
// experts.py): the third of the layer's steps, after the router and the token
// dispatcher (models/common/moe_layer.h). Shapes: rows R (the permuted
// assignments), hidden H, experts E, expert width I.
#pragma once

#include <ATen/core/Tensor.h>

namespace trident {

// The routed experts as SwiGLU on rows sorted by expert (NOTE [MoE permutation] in
// parallel/token_permutation.h): for expert e's rows r, down_e(silu(gate_e r) ⊙ up_e r).
// rows (R, H), counts (E) int64 rows per expert; gate, up (E, I, H); down (E, H, I). One grouped
// GEMM per projection on CUDA when grouped_experts_fit (no host read), else one GEMM per expert
// over its contiguous rows (the counts read once on the host). Never a loop over tokens. Either
// way the weight gradients defer to a zero-bubble W (NOTE [grouped experts] in experts.cpp).
at::Tensor experts_swiglu(const at::Tensor& rows, const at::Tensor& counts, const at::Tensor& gate,
                          const at::Tensor& up, const at::Tensor& down);
// The grouped-GEMM path on any device libtorch has at::_grouped_mm for (the CPU too, where the
// tests compare it with the per-expert GEMMs): fp32, bf16 or fp16 rows and expert widths whose
// rows are 16-byte aligned (grouped_experts_fit), else std::invalid_argument.
bool grouped_experts_fit(const at::Tensor& rows, const at::Tensor& gate);
at::Tensor experts_swiglu_grouped(const at::Tensor& rows, const at::Tensor& counts, const at::Tensor& gate,
                                  const at::Tensor& up, const at::Tensor& down);

// A dense SwiGLU MLP (a shared expert): down(silu(gate x) ⊙ up x).
at::Tensor swiglu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down);

}  // namespace trident
