// Causal attention inside the documents of a packed sample (NOTE [packed
// documents]): a sample holds several documents end to end, and a token attends
// only to the tokens before it in its own document. Computed one document span
// at a time on the shared SDPA core (attention.h): exact, with memory linear in
// the longest document under the fused kernels and no (seq x seq) mask.
// Tested against softmax(QKᵀ/√d + block-diagonal causal mask)V written out
// (tests/torch_unit/test_document_attention.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace trident {

// NOTE [packed documents]
// A micro-batch's document structure is each row's document lengths, in
// sequence order, summing to the row's length (Megatron's cu_seqlens are
// their running sums). It is host data, read with the samples: which spans to
// compute is decided without reading a device tensor. A row that is one
// document is today's undivided sample, and rows that all are take the plain
// causal path, so such a run is bit for bit today's.
using DocumentLengths = std::vector<std::vector<int64_t>>;

// One micro-batch's documents as a stage reads them: the lengths (host) that
// attention keeps apart, and the positions restarting at each document
// (device, (b, s) int64; undefined: the stage's own 0, 1, ...), kept alive by
// each layer that computes with them until its backward ran. Megatron's
// reset_attention_mask and reset_position_ids are independent: undivided
// lengths with positions, or documents with undefined positions, are valid.
// `real` (device, (b, s) float, this rank's positions) is 0 on padding and 1 on
// every other token (NOTE [document counts] in datasets/step_batches.h), with
// `real_tokens` its sum; undefined when the micro-batch holds no padding. The
// balancing losses of an MoE layer count only real tokens (NOTE [MoE balancing
// losses] in models/common/moe_losses.h).
struct Documents {
  DocumentLengths lengths;
  at::Tensor positions;
  at::Tensor real;
  int64_t real_tokens = 0;
};
// How a stage hands one micro-batch's documents down its layers (null: undivided).
using DocumentsRef = std::shared_ptr<const Documents>;

// Whether every row is one document: the undivided sample, which
// document_attention computes on the plain causal path (bit for bit a run
// without documents).
bool undivided(const DocumentLengths& docs);

// q (b, heads, s, d), k and v (b, kv heads, s, d) with kv heads dividing heads,
// `docs` b rows of lengths summing to s. Returns (b, heads, s, d): each
// document's causal attention over its own keys. Throws std::invalid_argument
// when `docs` does not describe q's rows.
at::Tensor document_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const DocumentLengths& docs, double dropout_p, std::optional<double> scale = std::nullopt);

// Positions that restart at each document: (b, s) int64 on the host, row r
// counting 0, 1, ... within each of its documents (Megatron's
// reset_position_ids).
at::Tensor document_positions(const DocumentLengths& docs);

}  // namespace trident
