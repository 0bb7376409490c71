// Attention inside documents: see document_attention.h.
#include "models/common/document_attention.h"

#include <ATen/ATen.h>

#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

#include "models/common/attention.h"

namespace trident {

namespace {

void check_documents(const at::Tensor& q, const DocumentLengths& docs) {
  const int64_t b = q.size(0), s = q.size(2);
  if (static_cast<int64_t>(docs.size()) != b)
    throw std::invalid_argument("document_attention: " + std::to_string(docs.size()) + " rows of documents for " +
                                std::to_string(b) + " rows of queries");
  for (size_t r = 0; r < docs.size(); ++r) {
    int64_t total = 0;
    for (int64_t len : docs[r]) {
      if (len <= 0) throw std::invalid_argument("document_attention: row " + std::to_string(r) + " has an empty document");
      total += len;
    }
    if (total != s)
      throw std::invalid_argument("document_attention: row " + std::to_string(r) + "'s documents hold " +
                                  std::to_string(total) + " tokens, the sequence " + std::to_string(s));
  }
}

// Causal attention of rows that share one document layout: one SDPA call per document.
at::Tensor spans_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::vector<int64_t>& lengths, double dropout_p, std::optional<double> scale) {
  if (lengths.size() == 1) return causal_attention(q, k, v, dropout_p, scale);
  std::vector<at::Tensor> parts;
  parts.reserve(lengths.size());
  int64_t start = 0;
  for (int64_t len : lengths) {
    parts.push_back(causal_attention(q.narrow(2, start, len), k.narrow(2, start, len), v.narrow(2, start, len),
                                     dropout_p, scale));
    start += len;
  }
  return at::cat(parts, 2);
}

}  // namespace

bool undivided(const DocumentLengths& docs) {
  for (const std::vector<int64_t>& row : docs)
    if (row.size() != 1) return false;
  return true;
}

at::Tensor document_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const DocumentLengths& docs, double dropout_p, std::optional<double> scale) {
  check_documents(q, docs);
  if (undivided(docs)) return causal_attention(q, k, v, dropout_p, scale);  // today's path, bit for bit
  // Rows grouped by layout (in first-seen order), so rows alike share each call.
  std::map<std::vector<int64_t>, std::vector<int64_t>> groups;
  std::vector<const std::vector<int64_t>*> order;
  for (size_t r = 0; r < docs.size(); ++r) {
    auto [it, fresh] = groups.try_emplace(docs[r]);
    if (fresh) order.push_back(&it->first);
    it->second.push_back(static_cast<int64_t>(r));
  }
  if (order.size() == 1) return spans_attention(q, k, v, *order.front(), dropout_p, scale);
  std::vector<at::Tensor> outs;
  std::vector<int64_t> rows;  // rows in the order of `outs`' rows
  for (const std::vector<int64_t>* layout : order) {
    const std::vector<int64_t>& members = groups.at(*layout);
    const at::Tensor idx = at::tensor(members, at::kLong).to(q.device());
    outs.push_back(spans_attention(q.index_select(0, idx), k.index_select(0, idx), v.index_select(0, idx), *layout,
                                   dropout_p, scale));
    rows.insert(rows.end(), members.begin(), members.end());
  }
  std::vector<int64_t> where(rows.size());  // row r sits at where[r] of the concatenation
  for (size_t i = 0; i < rows.size(); ++i) where[static_cast<size_t>(rows[i])] = static_cast<int64_t>(i);
  return at::cat(outs, 0).index_select(0, at::tensor(where, at::kLong).to(q.device()));
}

at::Tensor document_positions(const DocumentLengths& docs) {
  const int64_t s = docs.empty() ? 0 : std::accumulate(docs[0].begin(), docs[0].end(), int64_t{0});
  at::Tensor pos = at::empty({static_cast<int64_t>(docs.size()), s}, at::kLong);
  auto acc = pos.accessor<int64_t, 2>();
  for (size_t r = 0; r < docs.size(); ++r) {
    if (std::accumulate(docs[r].begin(), docs[r].end(), int64_t{0}) != s)
      throw std::invalid_argument("document_positions: row " + std::to_string(r) + "'s documents hold another length than row 0's");
    int64_t t = 0;
    for (int64_t len : docs[r])
      for (int64_t i = 0; i < len; ++i) acc[static_cast<int64_t>(r)][t++] = i;
  }
  return pos;
}

}  // namespace trident
