// StepBatches' document tensors (NOTE [document batch]): per micro-batch position_ids and
// loss_mask beside the inputs, cu_seqlens over the rows laid end to end, this cp rank's
// positions under context parallelism, and nothing at all with every flag off.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <vector>

#include "core/context_split.h"
#include "datasets/documents.h"
#include "datasets/step_batches.h"

namespace {

constexpr int64_t kSeq = 8, kEod = 9;

// Sample i: tokens with eods at fixed places, different per sample; masks 1 on odd tokens.
class Samples final : public trident::data::SampleSource {
 public:
  int64_t seq_len() const override { return kSeq; }
  std::vector<int64_t> global_batch(int64_t step, int64_t g) const override {
    std::vector<int64_t> ids;
    for (int64_t j = 0; j < g; ++j) ids.push_back(step * g + j);
    return ids;
  }
  std::vector<int64_t> micro_batch(int64_t step, int64_t g, int64_t rank, int64_t dp, int64_t k,
                                   int64_t mbs) const override {
    std::vector<int64_t> ids;
    for (int64_t j = 0; j < mbs; ++j) ids.push_back(step * g + rank * (g / dp) + k * mbs + j);
    return ids;
  }
  void copy_sample(int64_t i, int64_t* out) const override {
    for (int64_t k = 0; k <= kSeq; ++k) out[k] = (k + i) % 4 == 3 ? kEod : k + 10 * i;
  }
  bool has_loss_masks() const override { return true; }
  void copy_sample_loss_mask(int64_t i, uint8_t* out) const override {
    for (int64_t k = 0; k <= kSeq; ++k) out[k] = static_cast<uint8_t>((k + i) % 2);
  }
};

trident::BatchShape shape(trident::data::DocumentOptions o, int64_t cp = 1, int64_t cp_rank = 0) {
  trident::BatchShape s;
  s.global_batch = 4;
  s.micro_batch = 2;
  s.seq_len = kSeq;
  s.microbatches = 2;
  s.cp = cp;
  s.cp_rank = cp_rank;
  s.documents = o;
  return s;
}

std::vector<int64_t> longs(const at::Tensor& t) {
  const at::Tensor c = t.contiguous().to(at::kLong);
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

}  // namespace

TEST(StepBatchesDocuments, EachRowIsItsSampleAndBoundariesSpanTheRows) {
  const Samples ds;
  const trident::data::DocumentOptions o{true, true, true, true, kEod};
  trident::StepBatches b(ds, 0, shape(o), c10::Device(c10::kCPU));
  std::vector<int64_t> sample(kSeq + 1);
  std::vector<uint8_t> mask(kSeq + 1);
  for (int mb = 0; mb < 2; ++mb) {
    const trident::DocumentBatch d = b.documents(mb);
    ASSERT_EQ(d.position_ids.sizes(), (at::IntArrayRef{2, kSeq}));
    EXPECT_EQ(d.position_ids.scalar_type(), at::kLong);
    EXPECT_EQ(d.loss_mask.scalar_type(), at::kFloat);
    EXPECT_EQ(d.cu_seqlens.scalar_type(), at::kInt);
    std::vector<int64_t> cu{0};
    int64_t longest = 0;
    for (int64_t r = 0; r < 2; ++r) {
      const int64_t id = mb * 2 + r;
      ds.copy_sample(id, sample.data());
      ds.copy_sample_loss_mask(id, mask.data());
      const auto want = trident::data::sample_documents(sample.data(), mask.data(), kSeq, o);
      EXPECT_EQ(longs(d.position_ids[r]), want.position_ids) << "micro-batch " << mb << " row " << r;
      const std::vector<float> loss(d.loss_mask[r].data_ptr<float>(), d.loss_mask[r].data_ptr<float>() + kSeq);
      EXPECT_EQ(loss, want.loss_mask) << "micro-batch " << mb << " row " << r;
      for (size_t k = 1; k < want.cu_seqlens.size(); ++k) {
        cu.push_back(r * kSeq + want.cu_seqlens[k]);
        longest = std::max<int64_t>(longest, want.cu_seqlens[k] - want.cu_seqlens[k - 1]);
      }
    }
    EXPECT_EQ(longs(d.cu_seqlens), cu) << "micro-batch " << mb;
    EXPECT_EQ(d.max_seqlen, longest);
  }
}

TEST(StepBatchesDocuments, ContextRanksKeepTheirPositionsAndEveryBoundary) {
  const Samples ds;
  const trident::data::DocumentOptions o{true, true, true, false, kEod};
  trident::StepBatches whole(ds, 1, shape(o), c10::Device(c10::kCPU));
  for (int64_t rank = 0; rank < 2; ++rank) {
    trident::StepBatches mine(ds, 1, shape(o, 2, rank), c10::Device(c10::kCPU));
    const at::Tensor pos = at::tensor(trident::context_positions(kSeq, 2, rank), at::kLong);
    for (int mb = 0; mb < 2; ++mb) {
      const trident::DocumentBatch w = whole.documents(mb), m = mine.documents(mb);
      EXPECT_TRUE(at::equal(m.position_ids, w.position_ids.index_select(1, pos))) << rank;
      EXPECT_TRUE(at::equal(m.loss_mask, w.loss_mask.index_select(1, pos))) << rank;
      EXPECT_TRUE(at::equal(m.cu_seqlens, w.cu_seqlens)) << rank;
      EXPECT_TRUE(at::equal(mine(mb).first, whole(mb).first.index_select(1, pos))) << rank;
    }
  }
}

TEST(StepBatchesDocuments, NoneWithTheFlagsOff) {
  const Samples ds;
  trident::StepBatches off(ds, 0, shape({}), c10::Device(c10::kCPU));
  trident::StepBatches on(ds, 0, shape({false, false, true, false, kEod}), c10::Device(c10::kCPU));
  const trident::DocumentBatch d = off.documents(0);
  EXPECT_FALSE(d.position_ids.defined());
  EXPECT_FALSE(d.loss_mask.defined());
  EXPECT_FALSE(d.cu_seqlens.defined());
  for (int mb = 0; mb < 2; ++mb) {  // the tokens do not depend on the flags
    EXPECT_TRUE(at::equal(off(mb).first, on(mb).first));
    EXPECT_TRUE(at::equal(off(mb).second, on(mb).second));
  }
}

namespace {

// Two samples written out (E = the eod), for the counts of NOTE [document counts].
class Written final : public trident::data::SampleSource {
 public:
  static constexpr int64_t E = kEod;
  int64_t seq_len() const override { return kSeq; }
  std::vector<int64_t> global_batch(int64_t, int64_t) const override { return {0, 1}; }
  std::vector<int64_t> micro_batch(int64_t, int64_t, int64_t, int64_t, int64_t k, int64_t) const override { return {k}; }
  void copy_sample(int64_t i, int64_t* out) const override {
    const std::vector<int64_t> s = i == 0 ? std::vector<int64_t>{5, E, E, E, 6, 7, E, 8, 1}
                                          : std::vector<int64_t>{E, 1, 2, 3, 4, 5, 6, 7, 8};
    std::copy(s.begin(), s.end(), out);
  }
  bool has_loss_masks() const override { return true; }
  void copy_sample_loss_mask(int64_t i, uint8_t* out) const override {
    std::fill(out, out + kSeq + 1, uint8_t{1});
    if (i == 0) out[2] = 0;  // sample 0's eod at 3 is marked 1: an empty document, not padding
    if (i == 1) out[0] = 0;
  }
};

trident::BatchShape written_shape(int64_t cp, int64_t cp_rank) {
  trident::BatchShape s = shape({false, false, true, true, kEod}, cp, cp_rank);
  s.global_batch = 2, s.micro_batch = 1;
  return s;
}

}  // namespace

// Sample 0 holds [5 E] [E] [E] [6 7 E] [8]: the eod at 2, alone and marked 0 by the loss-mask
// file, is padding, the one at 3, marked 1, an empty document: four documents; sample 1 [E]
// [1 ... 7], its first eod marked 0: one of each. The eods' predictions and the label marked 0
// are masked: 8 - 4 and 8 - 1 labels count, split 2 + 3 and 2 + 4 between two cp ranks (chunks
// of 2: rank 0 keeps 0, 1, 6, 7).
TEST(StepBatchesDocuments, CountsDocumentsPaddingAndLossTokens) {
  const Written ds;
  trident::StepBatches whole(ds, 0, written_shape(1, 0), c10::Device(c10::kCPU));
  const trident::DocumentCounts n = whole.counts();
  EXPECT_EQ(n.documents, 5);
  EXPECT_EQ(n.padding, 2);
  EXPECT_EQ(n.loss_tokens, 11);
  for (int64_t rank = 0; rank < 2; ++rank) {
    trident::StepBatches mine(ds, 0, written_shape(2, rank), c10::Device(c10::kCPU));
    const trident::DocumentCounts m = mine.counts();
    EXPECT_EQ(m.loss_tokens, rank == 0 ? 5 : 6) << rank;
    EXPECT_EQ(m.documents, 5) << rank;  // whole samples on every cp rank
    EXPECT_EQ(m.padding, 2) << rank;
  }
}
