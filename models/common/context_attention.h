// Causal attention over a sequence split by context parallelism (NOTE
// [context split] in core/context_split.h): each rank's queries, keys and
// values are its two chunks, and attention sees the whole sequence by one of
// parallel.cp_comm's three exchanges (parallel/context_parallel.h). Equal,
// up to rounding, to causal_attention (attention.h) over the whole sequence,
// sliced to the rank's chunks; tested against it, outputs and dq/dk/dv
// (tests/torch_unit/test_context_attention.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include "parallel/context_parallel.h"

namespace trident {

// q (b, heads, 2c, d), k and v (b, kv heads, 2c, d): this rank's chunks of
// one (tp rank's) attention, rotary embeddings already applied at their real
// positions. Returns (b, heads, 2c, d) in q's dtype.
at::Tensor context_attention(const CpContext& cp, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// The ring (parallel.cp_comm = "p2p") with a chosen step kernel (NOTE [ring
// step kernels] in context_attention.cpp): context_attention takes kFused on
// the CPU and kExplicit elsewhere; tests run both.
enum class RingKernel { kFused = 0, kExplicit = 1 };
at::Tensor ring_attention(const CpContext& cp, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          RingKernel kernel);

}  // namespace trident
