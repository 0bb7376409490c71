// Causal attention over a sequence split by context parallelism (NOTE
// [context split] in core/context_split.h): each rank's queries, keys and
// values are its two chunks, and attention sees the whole sequence by one of
// parallel.cp_comm's three exchanges (parallel/context_parallel.h). Equal,
// up to rounding, to causal_attention (attention.h) over the whole sequence,
// sliced to the rank's chunks; tested against it, outputs and dq/dk/dv
// (tests/torch_unit/test_context_attention.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include "models/common/document_attention.h"
#include "parallel/context_parallel.h"

namespace trident {

// q (b, heads, 2c, d), k and v (b, kv heads, 2c, d): this rank's chunks of
// one (tp rank's) attention, rotary embeddings already applied at their real
// positions. Returns (b, heads, 2c, d) in q's dtype.
at::Tensor context_attention(const CpContext& cp, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// The same inside packed documents (NOTE [documents under context parallelism]
// in core/context_split.h): `docs` b rows of the whole sequences' document
// lengths (each summing to 2c·cp), every cp rank the same. Equal, up to
// rounding, to document_attention over the whole sequence sliced to the
// rank's chunks; rows that all are one document take the call above (bit for
// bit). Throws std::invalid_argument when `docs` does not describe q's rows.
at::Tensor context_attention(const CpContext& cp, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const DocumentLengths& docs);

// The ring (parallel.cp_comm = "p2p") with a chosen step kernel (NOTE [ring
// step kernels] in context_attention.cpp): context_attention takes kFused on
// the CPU and kExplicit elsewhere; tests run both. `docs` as above, or null.
enum class RingKernel { kFused = 0, kExplicit = 1 };
at::Tensor ring_attention(const CpContext& cp, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          RingKernel kernel, const DocumentLengths* docs = nullptr);

}  // namespace trident
