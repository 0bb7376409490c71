// MegatronSamples (core/data/megatron_samples.h) where megatron-core is not needed:
// the sampler's slicing of a step over data-parallel ranks, the size of a blend, and
// the errors. The indices themselves are checked against megatron-core by the
// reference test MegatronSamples (tests/reference/test_megatron_samples.py).
#include "core/data/megatron_samples.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/data/errors.h"
#include "core/data/megatron_cache.h"
#include "tests/error_of.h"

namespace fs = std::filesystem;
namespace td = trident::data;
using trident::testing::error_of;

namespace {

class MegatronSamplesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("trident-megatron-samples-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    td::MegatronWriter w((dir_ / "a").string(), 256);
    for (int d = 0; d < 20; ++d) w.add_document(std::vector<uint32_t>(static_cast<size_t>(10 + 7 * d), d));
    w.finish();
    ds_ = std::make_unique<td::MegatronDataset>((dir_ / "a").string());
  }
  void TearDown() override {
    ds_.reset();
    fs::remove_all(dir_);
  }
  fs::path dir_;
  std::unique_ptr<td::MegatronDataset> ds_;
};

TEST_F(MegatronSamplesTest, RanksTakeConsecutiveMicroBatchesOfEachMicroStep) {
  const td::MegatronSamples s({{ds_.get(), 1.0, 0, 20}}, false, 64, 8, 1234, "train");
  const int64_t G = 16, dp = 2, mbs = 2, m = G / dp / mbs;
  for (int64_t step = 0; step < 4; ++step) {
    const std::vector<int64_t> global = s.global_batch(step, G);
    ASSERT_EQ(global.size(), 16u);
    for (int64_t j = 0; j < G; ++j) EXPECT_EQ(global[static_cast<size_t>(j)], step * G + j);
    // Megatron's sampler: micro-step k is positions [k*dp*mbs, (k+1)*dp*mbs) of the
    // step, rank r taking the r-th mbs of them.
    for (int64_t k = 0; k < m; ++k)
      for (int64_t r = 0; r < dp; ++r) {
        const std::vector<int64_t> mb = s.micro_batch(step, G, r, dp, k, mbs);
        const auto first = static_cast<size_t>(k * dp * mbs + r * mbs);
        EXPECT_EQ(mb, std::vector<int64_t>(global.begin() + first, global.begin() + first + mbs)) << k << " " << r;
      }
  }
  std::vector<int64_t> a(9), b(9);
  s.copy_sample(3, a.data());
  s.copy_sample(3, b.data());
  EXPECT_EQ(a, b);
}

TEST_F(MegatronSamplesTest, EverySampleIsSeqLenPlusOneTokensOfTheDocuments) {
  const td::MegatronSamples s({{ds_.get(), 1.0, 0, 20}}, false, 50, 8, 7, "train");
  // Documents hold their own index as every token, so a sample's tokens say which
  // documents it crossed; the shuffled documents make the crossings non-monotone.
  std::set<int64_t> seen;
  bool descending = false;
  for (int64_t p = 0; p < 50; ++p) {
    std::vector<int64_t> t(9, -1);
    s.copy_sample(p, t.data());
    for (size_t i = 1; i < t.size(); ++i) descending |= t[i] < t[i - 1];
    for (int64_t v : t) {
      EXPECT_GE(v, 0);
      EXPECT_LT(v, 20);
      seen.insert(v);
    }
  }
  EXPECT_TRUE(descending) << "no sample crosses from a later document to an earlier one: documents not shuffled?";
  EXPECT_GT(seen.size(), 10u);
}

TEST_F(MegatronSamplesTest, ABlendHoldsTheCeilingOfEachShare) {
  const td::MegatronSamples s({{ds_.get(), 0.7, 0, 10}, {ds_.get(), 0.2, 10, 15}, {ds_.get(), 0.1, 15, 20}}, true,
                              33, 8, 1, "train");
  EXPECT_EQ(s.size(), static_cast<int64_t>(std::ceil(33 * 0.7) + std::ceil(33 * 0.2) + std::ceil(33 * 0.1)));
  // Each dataset was asked for its share plus the 0.5 % surplus.
  EXPECT_GE(s.indices(0).samples(), static_cast<int64_t>(std::ceil(std::ceil(33 * 0.7) * 1.005)));
  int64_t from_first = 0;
  for (int64_t p = 0; p < s.size(); ++p) from_first += s.locate(p).first == 0;
  EXPECT_EQ(from_first, 24);  // build_blending_indices hands dataset 0 its ceil(33 * 0.7) positions
}

TEST_F(MegatronSamplesTest, BadRequestsAreErrors) {
  const td::MegatronSamples s({{ds_.get(), 1.0, 0, 20}}, false, 32, 8, 1, "train");
  const int64_t size = s.size();
  EXPECT_EQ(error_of([&] { s.global_batch(size / 16, 16); }),
            "sample " + std::to_string(size / 16 * 16 + 15) + " of the train split: there are " +
                std::to_string(size) + " (Megatron's order builds as many as the run asks for)");
  EXPECT_EQ(error_of([&] { s.micro_batch(0, 10, 0, 4, 0, 1); }),
            "global batch size 10 must be a positive multiple of dp(4) x micro_batch_size(1) = 4");
  EXPECT_EQ(error_of([&] { td::MegatronSamples({{ds_.get(), 1.0, 3, 3}}, false, 8, 8, 1, "valid"); }),
            ds_->prefix() + " (valid split): sequences [3, 3) hold 0 tokens: Megatron's sample order needs at least 2");
  EXPECT_EQ(error_of([&] { td::build_gpt_indices({5, 5}, 0, 2, 4, 1, 1); }),
            "Megatron's sample order needs a sequence length of at least 2, got 1");
}

TEST_F(MegatronSamplesTest, NpyFilesAreReadOrRefusedNamingTheFile) {
  // numpy.save(arange(6, dtype=int32).reshape(3, 2)): a version 1.0 header padded to 128 bytes.
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }";
  header.resize(128 - 10 - 1, ' ');
  header += '\n';
  std::string file = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header;
  for (int32_t v = 0; v < 6; ++v) file.append(reinterpret_cast<const char*>(&v), 4);
  const std::string path = (dir_ / "a.npy").string();
  std::ofstream(path, std::ios::binary) << file;
  const td::NpyArray a = td::read_npy(path);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(a.values, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  std::ofstream(path, std::ios::binary) << file.substr(0, file.size() - 2);
  EXPECT_EQ(error_of([&] { td::read_npy(path); }), path + ": holds 22 bytes of data for 6 elements of <i4");
  EXPECT_EQ(error_of([&] { td::read_gpt_cache((dir_ / "none").string(), {}, {}); }),
            "data.cache_dir = \"" + (dir_ / "none").string() + "\" is not a directory");
}

TEST(NumpySum, PairwiseLikeNumpy) {
  // 0.1 summed ten times: numpy's 8 accumulators then the rest give 1.0 exactly here,
  // where a left-to-right sum gives 0.9999999999999999.
  const std::vector<double> tenths(10, 0.1);
  double left = 0;
  for (double x : tenths) left += x;
  EXPECT_NE(left, 1.0);
  EXPECT_EQ(td::numpy_sum(tenths), 1.0);
}

}  // namespace
