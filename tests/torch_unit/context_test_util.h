// What the context-parallel attention tests share (test_context_attention.cpp,
// test_context_documents.cpp): the whole sequence's inputs and fp64 answer,
// one rank's run over its chunks (NOTE [context split]), the 1e-6 bar.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "core/context_split.h"
#include "models/common/context_attention.h"
#include "models/common/document_attention.h"
#include "parallel/process_groups.h"

namespace trident {

// The inputs (b, heads, s, d), a fixed output weighting w, and the whole sequence's output and
// gradients of sum(out * w) in fp64: the answer each rank is held to.
struct Whole {
  at::Tensor q, k, v, w, out, dq, dk, dv;
};

// max |got - want| / max |want|.
inline double relative_error(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
}

// Within 1e-6 is fp32's rounding of the whole.
inline ::testing::AssertionResult near(const at::Tensor& got, const at::Tensor& want, const char* what, int rank) {
  const double err = relative_error(got, want);
  if (err <= 1e-6) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ", rank " << rank << ": relative max difference " << err;
}

// One rank's run of `comm` at cp over its context positions of x: the inputs it took (their
// gradients after the caller's backward), its output, and its slice of any whole tensor.
struct RankRun {
  at::Tensor pos, q, k, v, out;
  at::Tensor mine(const at::Tensor& t) const { return t.detach().index_select(2, pos).contiguous(); }
};

// kernel: the ring's step kernel (NOTE [ring step kernels]); context_attention's own choice when
// unset. docs: the packed documents, or null.
inline RankRun run_rank(const Whole& x, int64_t s, int cp, Group& g, const std::string& comm,
                        std::optional<RingKernel> kernel, const DocumentLengths* docs = nullptr) {
  const CpContext ctx{&g, parse_cp_comm(comm)};
  RankRun r;
  r.pos = at::tensor(context_positions(s, cp, g.rank), at::kLong);
  r.q = r.mine(x.q).requires_grad_(), r.k = r.mine(x.k).requires_grad_(), r.v = r.mine(x.v).requires_grad_();
  if (kernel) r.out = ring_attention(ctx, r.q, r.k, r.v, *kernel, docs);
  else r.out = docs ? context_attention(ctx, r.q, r.k, r.v, *docs) : context_attention(ctx, r.q, r.k, r.v);
  return r;
}

}  // namespace trident
