// Context-parallel attention inside packed documents (NOTE [documents under
// context parallelism] in core/context_split.h): each rank's output rows and
// its dq, dk, dv equal one process's document_attention over the whole
// sequence (fp64) at its chunks' positions, within 1e-6 of the largest value,
// for every cp_comm kind, both ring step kernels, cp 2 and 4, under Gloo and
// NCCL's rules; with boundaries on chunk edges and inside chunks, documents
// spanning ranks, rows of different layouts in one batch. A batch of whole-
// sample documents is today's cp path bit for bit. The spans themselves are
// held to the pairs written out, and the per-rank work is printed.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/context_split.h"
#include "models/common/context_attention.h"
#include "models/common/document_attention.h"
#include "parallel/thread_group.h"
#include "context_test_util.h"

namespace trident {
namespace {

// fp32 inputs (b, heads, s, 8), a fixed output weighting, and one process's
// document_attention over the whole sequence and its gradients of sum(out * w),
// in fp64 from the same values: the answer every rank is held to.
Whole whole(const DocumentLengths& docs, int64_t s, int64_t heads, int64_t kv) {
  at::manual_seed(5);
  const auto b = static_cast<int64_t>(docs.size());
  Whole x;
  x.q = at::randn({b, heads, s, 8}), x.k = at::randn({b, kv, s, 8}), x.v = at::randn({b, kv, s, 8});
  x.w = at::randn({b, heads, s, 8});
  const at::Tensor q = x.q.to(at::kDouble).requires_grad_(), k = x.k.to(at::kDouble).requires_grad_(),
                   v = x.v.to(at::kDouble).requires_grad_();
  const at::Tensor out = document_attention(q, k, v, docs, 0.0);
  (out * x.w.to(at::kDouble)).sum().backward();
  x.out = out.detach(), x.dq = q.grad(), x.dk = k.grad(), x.dv = v.grad();
  return x;
}

void check(const DocumentLengths& docs, int cp, const std::string& comm, const std::string& backend = "gloo",
           std::optional<RingKernel> kernel = std::nullopt, int64_t heads = 4, int64_t kv = 2) {
  int64_t s = 0;
  for (int64_t len : docs[0]) s += len;
  const Whole x = whole(docs, s, heads, kv);
  const auto errors = run_thread_group("cp", cp, std::chrono::milliseconds(30000), [&](Group& g) {
    const RankRun r = run_rank(x, s, cp, g, comm, kernel, &docs);
    (r.out * r.mine(x.w)).sum().backward();
    EXPECT_TRUE(near(r.out, r.mine(x.out), "out", g.rank)) << comm << " cp " << cp;
    EXPECT_TRUE(near(r.q.grad(), r.mine(x.dq), "dq", g.rank)) << comm << " cp " << cp;
    EXPECT_TRUE(near(r.k.grad(), r.mine(x.dk), "dk", g.rank)) << comm << " cp " << cp;
    EXPECT_TRUE(near(r.v.grad(), r.mine(x.dv), "dv", g.rank)) << comm << " cp " << cp;
  }, backend);
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " " << comm;
}

// cp 2 (s 16, chunks of 4): row 0's boundary at 4 lies on a chunk edge and its
// second document spans chunks 1 and 2; the document at 3..13 of rows 1 and 2
// (alike: one run of rows) spans every chunk, so both ranks' blocks.
const DocumentLengths kCp2Docs{{4, 7, 5}, {3, 10, 3}, {3, 10, 3}};
// cp 4 (s 32, chunks of 4): boundaries on edges (4, 20) and inside chunks, a
// one-token document, an 18-token one over five chunks and four ranks, and a
// row that is one document beside the others.
const DocumentLengths kCp4Docs{{4, 9, 1, 18}, {20, 12}, {32}};

TEST(ContextDocuments, RingEqualsOneProcessCp2) {
  check(kCp2Docs, 2, "p2p");
  check(kCp2Docs, 2, "p2p", "gloo", RingKernel::kExplicit, 4, 4);
}
TEST(ContextDocuments, RingEqualsOneProcessCp4) {
  check(kCp4Docs, 4, "p2p", "gloo", RingKernel::kFused);
  check(kCp4Docs, 4, "p2p", "gloo", RingKernel::kExplicit);
}
TEST(ContextDocuments, AllGatherEqualsOneProcess) {
  check(kCp2Docs, 2, "all_gather");
  check(kCp4Docs, 4, "all_gather");
}
TEST(ContextDocuments, UlyssesEqualsOneProcess) {
  check(kCp2Docs, 2, "a2a");
  check(kCp4Docs, 4, "a2a", "gloo", std::nullopt, 4, 4);
}
// NCCL's rules: every rank issues the ring's transfers, in order, whatever
// pieces its steps compute. In {3, 10, 2, 5, 2, 8, 2} at cp 4 rank 0's
// second step meets no document of its queries while the others' do;
// documents of one chunk each leave every step but the first with none.
TEST(ContextDocuments, EveryKindUnderNcclRules) {
  check(kCp4Docs, 4, "p2p", "nccl-rules");
  check({{3, 10, 2, 5, 2, 8, 2}}, 4, "p2p", "nccl-rules");
  check({{4, 4, 4, 4, 4, 4, 4, 4}}, 4, "p2p", "nccl-rules");
  check({{4, 4, 4, 4, 4, 4, 4, 4}}, 4, "all_gather", "nccl-rules");
  check(kCp2Docs, 2, "all_gather", "nccl-rules");
  check(kCp2Docs, 2, "a2a", "nccl-rules");
}

// Rows that are one document each: the plain cp path, so the output and the
// gradients equal a call without documents bit for bit.
TEST(ContextDocuments, OneDocumentPerRowIsThePlainPathBitForBit) {
  const int cp = 2;
  const int64_t s = 16;
  const DocumentLengths docs{{s}, {s}};
  const Whole x = whole(docs, s, 4, 2);
  for (const std::string comm : {"p2p", "all_gather", "a2a"}) {
    const auto errors = run_thread_group("cp", cp, std::chrono::milliseconds(30000), [&](Group& g) {
      const RankRun with = run_rank(x, s, cp, g, comm, std::nullopt, &docs);
      (with.out * with.mine(x.w)).sum().backward();
      const RankRun without = run_rank(x, s, cp, g, comm, std::nullopt, nullptr);
      (without.out * without.mine(x.w)).sum().backward();
      EXPECT_TRUE(at::equal(with.out, without.out)) << comm;
      EXPECT_TRUE(at::equal(with.q.grad(), without.q.grad())) << comm;
      EXPECT_TRUE(at::equal(with.k.grad(), without.k.grad())) << comm;
      EXPECT_TRUE(at::equal(with.v.grad(), without.v.grad())) << comm;
    });
    for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " " << comm;
  }
}

TEST(ContextDocuments, DocumentsThatDoNotFitAreRefused) {
  const auto errors = run_thread_group("cp", 2, std::chrono::milliseconds(30000), [&](Group& g) {
    const CpContext ctx{&g, CpComm::kP2p};
    const at::Tensor q = at::randn({1, 2, 8, 8});
    EXPECT_THROW(context_attention(ctx, q, q, q, DocumentLengths{{4, 4}}), std::invalid_argument);  // not 16
    EXPECT_THROW(context_attention(ctx, q, q, q, DocumentLengths{{8, 8}, {8, 8}}), std::invalid_argument);
    EXPECT_THROW(context_attention(ctx, q, q, q, DocumentLengths{{16, 0}}), std::invalid_argument);
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

using Pairs = std::set<std::pair<int64_t, int64_t>>;  // (query, key) global positions

// The pairs rank r's queries attend to in rank j's block, written out: same
// document, key at or before the query.
Pairs expected_pairs(const std::vector<int64_t>& lengths, int64_t cp, int64_t r, int64_t j) {
  std::vector<int64_t> doc;
  for (size_t d = 0; d < lengths.size(); ++d) doc.insert(doc.end(), static_cast<size_t>(lengths[d]), static_cast<int64_t>(d));
  const auto s = static_cast<int64_t>(doc.size());
  Pairs out;
  for (int64_t q : context_positions(s, cp, r))
    for (int64_t k : context_positions(s, cp, j))
      if (k <= q && doc[static_cast<size_t>(k)] == doc[static_cast<size_t>(q)]) out.insert({q, k});
  return out;
}

// The pairs document_spans lists, at global positions (each pair once).
Pairs span_pairs(const std::vector<int64_t>& lengths, int64_t cp, int64_t r, int64_t j, bool* twice) {
  int64_t s = 0;
  for (int64_t len : lengths) s += len;
  const std::vector<int64_t> qpos = context_positions(s, cp, r), kpos = context_positions(s, cp, j);
  Pairs out;
  for (const DocumentSpan& p : document_spans(lengths, cp, r, j))
    for (int64_t a = 0; a < p.q_len; ++a)
      for (int64_t b = 0; b < (p.causal ? a + 1 : p.k_len); ++b)
        *twice |= !out.insert({qpos[static_cast<size_t>(p.q_begin + a)], kpos[static_cast<size_t>(p.k_begin + b)]}).second;
  return out;
}

TEST(ContextDocuments, SpansAreTheSameDocumentCausalPairs) {
  at::manual_seed(2);
  for (const int64_t cp : {2, 4}) {
    const int64_t s = 16 * cp;
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<int64_t> lengths;  // random cuts: 1 to 12 tokens per document
      for (int64_t t = 0; t < s;) {
        const int64_t len = std::min<int64_t>(s - t, 1 + at::randint(12, {1}).item<int64_t>());
        lengths.push_back(len);
        t += len;
      }
      for (int64_t r = 0; r < cp; ++r)
        for (int64_t j = 0; j < cp; ++j) {
          bool twice = false;
          EXPECT_EQ(span_pairs(lengths, cp, r, j, &twice), expected_pairs(lengths, cp, r, j))
              << "cp " << cp << " rank " << r << " block " << j << " trial " << trial;
          EXPECT_FALSE(twice) << "a pair listed twice: cp " << cp << " rank " << r << " block " << j;
        }
    }
  }
}

// NOTE [documents under context parallelism]: the attended (q, k) pairs per
// rank, the work the split gives each. Printed for one document, uneven
// documents, and a long document followed by short ones; together they are
// the sample's same-document causal pairs, and no rank's exceeds its share of
// the undivided sample (documents only take pairs away).
TEST(ContextDocuments, PerRankWorkOfUnevenDocuments) {
  const int64_t cp = 4, s = 256;
  const DocumentLengths samples{{256}, {7, 60, 13, 100, 2, 41, 33}, {192, 8, 8, 8, 8, 8, 8, 8, 8}};
  for (const std::vector<int64_t>& lengths : samples) {
    std::vector<int64_t> work(static_cast<size_t>(cp), 0);
    int64_t total = 0;
    for (int64_t r = 0; r < cp; ++r)
      for (int64_t j = 0; j < cp; ++j)
        for (const DocumentSpan& p : document_spans(lengths, cp, r, j))
          work[static_cast<size_t>(r)] += p.causal ? p.q_len * (p.q_len + 1) / 2 : p.q_len * p.k_len;
    for (int64_t w : work) total += w;
    int64_t pairs = 0;
    for (int64_t len : lengths) pairs += len * (len + 1) / 2;
    EXPECT_EQ(total, pairs);
    std::printf("%zu documents in %lld tokens, cp %lld: attended pairs per rank", lengths.size(),
                static_cast<long long>(s), static_cast<long long>(cp));
    for (int64_t w : work) std::printf(" %lld", static_cast<long long>(w));
    std::printf(" (max / mean %.3f)\n", static_cast<double>(*std::max_element(work.begin(), work.end())) * cp / total);
    for (int64_t w : work) EXPECT_LE(w * cp, s * (s + 1) / 2);
  }
}

}  // namespace
}  // namespace trident
