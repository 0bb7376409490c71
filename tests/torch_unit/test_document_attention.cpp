// Attention inside packed documents (models/common/document_attention.h)
// against softmax(QKᵀ/√d + mask)V written out with the block-diagonal causal
// mask of the same documents: outputs and gradients in fp32, grouped heads, a
// given scale, rows of different layouts in one batch; a document equal to the
// same tokens attended alone; a one-document batch bit for bit the plain
// causal path; positions restarting at each document.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <limits>
#include <stdexcept>

#include "models/common/attention.h"
#include "models/common/document_attention.h"
#include "models/gpt/gpt.h"
#include "models/llama/llama.h"
#include "parallel/recompute.h"

namespace trident {
namespace {

struct Qkv {
  at::Tensor q, k, v;
};

Qkv random_qkv(int64_t b, int64_t heads, int64_t kv, int64_t s, int64_t seed = 3) {
  at::manual_seed(seed);
  Qkv t;
  t.q = at::randn({b, heads, s, 8}).requires_grad_(true);
  t.k = at::randn({b, kv, s, 8}).requires_grad_(true);
  t.v = at::randn({b, kv, s, 8}).requires_grad_(true);
  return t;
}

// The reference: every score written out, key j masked for query i unless
// j <= i and both lie in the same document of the row.
at::Tensor masked_reference(const Qkv& t, const DocumentLengths& docs, double scale) {
  const int64_t b = t.q.size(0), s = t.q.size(2), group = t.q.size(1) / t.k.size(1);
  at::Tensor doc = at::empty({b, s}, at::kLong);
  for (int64_t r = 0; r < b; ++r) {
    int64_t pos = 0, id = 0;
    for (int64_t len : docs[static_cast<size_t>(r)]) {
      doc[r].narrow(0, pos, len).fill_(id++);
      pos += len;
    }
  }
  const at::Tensor same = doc.unsqueeze(2).eq(doc.unsqueeze(1));                    // (b, s, s)
  const at::Tensor causal = at::ones({s, s}, at::kBool).tril().unsqueeze(0);         // (1, s, s)
  const at::Tensor allowed = at::logical_and(same, causal).unsqueeze(1);             // (b, 1, s, s)
  at::Tensor sc = at::matmul(t.q, repeat_kv_heads(t.k, group).transpose(-2, -1)) * scale;
  sc = sc.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  return at::matmul(at::softmax(sc, -1), repeat_kv_heads(t.v, group));
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).abs().max() / b.to(at::kDouble).abs().max()).item<double>();
}

std::vector<at::Tensor> grads(const at::Tensor& out, const Qkv& t) {
  at::manual_seed(11);
  const at::Tensor w = at::randn(out.sizes());
  return torch::autograd::grad({(out * w).sum()}, {t.q, t.k, t.v});
}

void expect_matches_reference(int64_t heads, int64_t kv, const DocumentLengths& docs, std::optional<double> scale) {
  const int64_t b = static_cast<int64_t>(docs.size()), s = 24;
  const Qkv t = random_qkv(b, heads, kv, s);
  const at::Tensor out = document_attention(t.q, t.k, t.v, docs, 0.0, scale);
  const at::Tensor ref = masked_reference(t, docs, scale.value_or(1.0 / std::sqrt(8.0)));
  EXPECT_LT(max_rel(out, ref), 1e-5);
  const auto g = grads(out, t), gr = grads(ref, t);
  for (size_t i = 0; i < 3; ++i) EXPECT_LT(max_rel(g[i], gr[i]), 1e-5) << "gradient " << i;
}

TEST(DocumentAttention, MatchesBlockDiagonalMaskOneLayout) {
  expect_matches_reference(4, 4, {{5, 11, 8}, {5, 11, 8}}, std::nullopt);
}

TEST(DocumentAttention, MatchesBlockDiagonalMaskMixedRows) {
  // Rows 0 and 3 are one document each, row 2 has documents of one token; the
  // grouped rows' order (0, 3, 1, 2) is not its own inverse, so a row put back
  // in the wrong place shows.
  expect_matches_reference(4, 4, {{24}, {7, 1, 16}, {1, 1, 20, 2}, {24}}, std::nullopt);
}

TEST(DocumentAttention, MatchesBlockDiagonalMaskGroupedHeadsAndScale) {
  expect_matches_reference(4, 2, {{10, 14}, {3, 21}}, 0.2);
}

TEST(DocumentAttention, DocumentEqualsItsTokensAlone) {
  const Qkv t = random_qkv(1, 2, 2, 20);
  const at::Tensor out = document_attention(t.q, t.k, t.v, {{6, 9, 5}}, 0.0);
  const at::Tensor alone = causal_attention(t.q.narrow(2, 6, 9).contiguous(), t.k.narrow(2, 6, 9).contiguous(),
                                            t.v.narrow(2, 6, 9).contiguous(), 0.0);
  EXPECT_LT(max_rel(out.narrow(2, 6, 9), alone), 1e-6);
}

TEST(DocumentAttention, OneDocumentIsThePlainCausalPathBitForBit) {
  const Qkv t = random_qkv(2, 4, 2, 16);
  EXPECT_TRUE(at::equal(document_attention(t.q, t.k, t.v, {{16}, {16}}, 0.0), causal_attention(t.q, t.k, t.v, 0.0)));
}

TEST(DocumentAttention, RefusesDocumentsThatDoNotDescribeTheRows) {
  const Qkv t = random_qkv(2, 2, 2, 8);
  EXPECT_THROW(document_attention(t.q, t.k, t.v, {{8}}, 0.0), std::invalid_argument);
  EXPECT_THROW(document_attention(t.q, t.k, t.v, {{8}, {4, 3}}, 0.0), std::invalid_argument);
  EXPECT_THROW(document_attention(t.q, t.k, t.v, {{8}, {8, 0}}, 0.0), std::invalid_argument);
}

TEST(DocumentPositions, RestartAtEachDocument) {
  const at::Tensor pos = document_positions({{3, 2}, {5}});
  const at::Tensor want = at::tensor({0, 1, 2, 0, 1, 0, 1, 2, 3, 4}, at::kLong).view({2, 5});
  EXPECT_TRUE(at::equal(pos, want));
  EXPECT_THROW(document_positions({{3, 2}, {4}}), std::invalid_argument);
}

// A model over a packed micro-batch: the mean loss and every parameter's
// gradient equal those of each document run alone (its own positions from 0,
// nothing seen of the others), weighted by its tokens; also with selective
// and full recomputation, whose backwards replay attention with the same documents.
// (Rotary positions restarted or not give the same scores inside a document,
// q·k depending on the positions' difference only: there this test sees the
// attention's boundaries; GPT's learned positions it sees restart too.)
using MakeStage = std::function<std::unique_ptr<Stage>(Recompute)>;

ModelConfig packed_gpt() {
  ModelConfig m;
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.ffn_hidden = 64;
  m.seq_len = 16;
  m.vocab_size = 50;
  return m;
}

ModelConfig packed_llama(const std::string& arch) {
  ModelConfig m = packed_gpt();
  m.arch = arch;
  m.kv_heads = 2;
  m.ffn_hidden = 48;
  m.tie_embeddings = false;
  if (arch == "deepseek_v3") {  // latent attention, its YaRN tables of the rotary part; a dense layer
    m.q_lora_rank = 24, m.kv_lora_rank = 16, m.qk_nope_head_dim = 12, m.qk_rope_head_dim = 8, m.v_head_dim = 12;
    m.kv_heads = m.heads;
    m.experts = 4, m.moe_top_k = 2, m.moe_first_dense = 1, m.moe_ffn_hidden = 16, m.moe_shared_ffn_hidden = 16;
    m.rope_scaling = "yarn";
    m.rope_factor = 4, m.rope_original_max_position = 4, m.rope_beta_fast = 32, m.rope_beta_slow = 1;
  } else if (arch == "llama") {  // YaRN's tables, gathered at each document's positions
    m.rope_scaling = "yarn";
    m.rope_factor = 4, m.rope_original_max_position = 4, m.rope_beta_fast = 32, m.rope_beta_slow = 1;
  } else {  // experts route each token alone: no balancing loss, no capacity
    m.experts = 4;
    m.moe_top_k = 2;
  }
  return m;
}

MakeStage gpt_stage() {
  return [](Recompute mode) {
    const ModelConfig cfg = packed_gpt();
    auto st = std::make_unique<GptStage>(cfg, ChunkSpec{0, cfg.layers, true, true}, TpContext{}, 5);
    st->set_recompute(mode);
    return std::unique_ptr<Stage>(std::move(st));
  };
}

MakeStage llama_stage(const std::string& arch) {
  return [arch](Recompute mode) {
    const ModelConfig cfg = packed_llama(arch);
    auto st = std::make_unique<LlamaStage>(cfg, ChunkSpec{0, cfg.layers, true, true}, TpContext{}, 5);
    st->set_recompute(mode);
    return std::unique_ptr<Stage>(std::move(st));
  };
}

std::vector<at::Tensor> param_grads(Stage& stage) {
  std::vector<at::Tensor> g;
  for (Param& p : stage.params()) g.push_back(p.tensor.grad().clone());
  return g;
}

std::vector<at::Tensor> packed_grads(const MakeStage& make, Recompute mode, const at::Tensor& ids,
                                     const at::Tensor& targets, const DocumentLengths& docs, double& loss) {
  std::unique_ptr<Stage> stage = make(mode);
  // As the trainer: positions only where they restart.
  const at::Tensor pos = undivided(docs) ? at::Tensor() : document_positions(docs);
  stage->set_documents(std::make_shared<const Documents>(Documents{docs, pos}));
  const at::Tensor l = stage->forward(ids, targets);
  stage->set_documents(nullptr);  // as the executor does: the layers hold their own
  l.backward();
  loss = l.item<double>();
  return param_grads(*stage);
}

void expect_packed_equals_alone(const MakeStage& make) {
  const DocumentLengths docs{{5, 7, 4}, {16}, {1, 15}};
  at::manual_seed(21);
  const at::Tensor ids = at::randint(50, {3, 16}, at::kLong), targets = at::randint(50, {3, 16}, at::kLong);
  std::unique_ptr<Stage> alone = make(Recompute::kNone);
  double want = 0;
  for (size_t r = 0; r < docs.size(); ++r) {
    int64_t start = 0;
    for (int64_t len : docs[r]) {
      const auto row = static_cast<int64_t>(r);
      const at::Tensor l = alone->forward(ids[row].narrow(0, start, len).unsqueeze(0),
                                          targets[row].narrow(0, start, len).unsqueeze(0)) *
                           (static_cast<double>(len) / static_cast<double>(ids.numel()));
      l.backward();
      want += l.item<double>();
      start += len;
    }
  }
  const std::vector<at::Tensor> ref = param_grads(*alone);
  for (Recompute mode : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    double loss = 0;
    const std::vector<at::Tensor> got = packed_grads(make, mode, ids, targets, docs, loss);
    EXPECT_NEAR(loss, want, 1e-5 * want);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_LT(max_rel(got[i], ref[i]), 1e-5) << alone->params()[i].info.name;
  }
}

TEST(PackedDocuments, GptEqualsEachDocumentAlone) { expect_packed_equals_alone(gpt_stage()); }
TEST(PackedDocuments, LlamaYarnEqualsEachDocumentAlone) { expect_packed_equals_alone(llama_stage("llama")); }
TEST(PackedDocuments, Qwen3MoeEqualsEachDocumentAlone) { expect_packed_equals_alone(llama_stage("qwen3_moe")); }
TEST(PackedDocuments, DeepseekV3LatentAttentionEqualsEachDocumentAlone) {
  expect_packed_equals_alone(llama_stage("deepseek_v3"));
}

void expect_one_document_bit_for_bit(const MakeStage& make) {
  at::manual_seed(22);
  const at::Tensor ids = at::randint(50, {2, 16}, at::kLong);
  double packed = 0;
  const std::vector<at::Tensor> got = packed_grads(make, Recompute::kNone, ids, ids, {{16}, {16}}, packed);
  std::unique_ptr<Stage> plain = make(Recompute::kNone);
  const at::Tensor l = plain->forward(ids, ids);
  l.backward();
  EXPECT_EQ(packed, l.item<double>());
  const std::vector<at::Tensor> want = param_grads(*plain);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << plain->params()[i].info.name;
}

TEST(PackedDocuments, OneDocumentPerRowIsTheUndividedRunBitForBit) {
  expect_one_document_bit_for_bit(gpt_stage());
  expect_one_document_bit_for_bit(llama_stage("llama"));
  expect_one_document_bit_for_bit(llama_stage("deepseek_v3"));
}

}  // namespace
}  // namespace trident
