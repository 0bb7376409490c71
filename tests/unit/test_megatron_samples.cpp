// MegatronSamples (datasets/megatron_samples.h) where megatron-core is not needed:
// the sampler's slicing of a step over data-parallel ranks, the size of a blend, and
// the errors. The indices themselves are checked against megatron-core by the
// reference test MegatronSamples (tests/reference/test_megatron_samples.py).
#include "datasets/megatron_samples.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/config.h"
#include "datasets/errors.h"
#include "datasets/megatron_cache.h"
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

TEST_F(MegatronSamplesTest, CacheWrittenWhereNoneMatchesAndReadBack) {
  // data.split "90,8,2" over 20 sequences: train is [0, 18).
  const fs::path cache = dir_ / "cache";
  fs::create_directories(cache);
  const td::MegatronCache c{cache.string(), true, "90,8,2", trident::kNullTokenizerIdentifiers};
  const td::MegatronSamples built({{ds_.get(), 1.0, 0, 18}}, false, 64, 8, 1234, "train", c);
  EXPECT_EQ(built.cached(), 0u);
  EXPECT_EQ(built.written(), 1u);
  const td::GptIndices& g = built.indices(0);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(cache)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 4u) << "temp files left behind?";
  const std::string base = names[0].substr(0, names[0].size() - std::string("-description.txt").size());
  EXPECT_EQ(base.size(), 32 + std::string("-GPTDataset-train").size()) << names[0];
  EXPECT_EQ(names, (std::vector<std::string>{base + "-description.txt", base + "-document_index.npy",
                                             base + "-sample_index.npy", base + "-shuffle_index.npy"}));
  EXPECT_EQ(base.substr(0, 32), td::md5_hex(trident::read_file((cache / names[0]).string())));
  // Round trip through read_npy: the indices built, in megatron-core's dtypes and shapes.
  const auto npy = [&](const std::string& what) { return td::read_npy((cache / (base + "-" + what)).string()); };
  const td::NpyArray doc = npy("document_index.npy"), smp = npy("sample_index.npy"), shf = npy("shuffle_index.npy");
  EXPECT_EQ(doc.shape, (std::vector<int64_t>{static_cast<int64_t>(g.document_index.size())}));
  EXPECT_EQ(doc.values, std::vector<int64_t>(g.document_index.begin(), g.document_index.end()));
  EXPECT_EQ(smp.shape, (std::vector<int64_t>{g.samples() + 1, 2}));
  EXPECT_EQ(smp.values, g.sample_index);
  EXPECT_EQ(shf.shape, (std::vector<int64_t>{g.samples()}));
  EXPECT_EQ(shf.values, g.shuffle_index);
  for (const auto& [file, descr] : {std::pair{"document_index.npy", "'<i4'"}, std::pair{"sample_index.npy", "'<i4'"},
                                    std::pair{"shuffle_index.npy", "'<u4'"}}) {
    const std::string bytes = trident::read_file((cache / (base + "-" + file)).string());
    EXPECT_EQ(bytes.substr(0, 10), std::string("\x93NUMPY\x01\x00\x76\x00", 10)) << file;  // 128-byte header
    EXPECT_EQ(bytes.find(std::string("{'descr': ") + descr + ", 'fortran_order': False"), 10u) << file;
  }
  // A second run finds it and writes nothing; a run of another seed writes its own.
  const td::MegatronSamples again({{ds_.get(), 1.0, 0, 18}}, false, 64, 8, 1234, "train", c);
  EXPECT_EQ(again.cached(), 1u);
  EXPECT_EQ(again.written(), 0u);
  EXPECT_EQ(again.indices(0).shuffle_index, g.shuffle_index);
  EXPECT_EQ(again.indices(0).sample_index, g.sample_index);
  const td::MegatronSamples other({{ds_.get(), 1.0, 0, 18}}, false, 64, 8, 7, "train", c);
  EXPECT_EQ(other.cached(), 0u);
  EXPECT_EQ(other.written(), 1u);
  // write = false (a rank other than 0) reads but never writes.
  const td::MegatronSamples reader({{ds_.get(), 1.0, 0, 18}}, false, 64, 8, 99, "train",
                                   {cache.string(), false, "90,8,2", trident::kNullTokenizerIdentifiers});
  EXPECT_EQ(reader.written(), 0u);
  EXPECT_EQ(std::distance(fs::directory_iterator(cache), fs::directory_iterator()), 8);
}

TEST_F(MegatronSamplesTest, AWriteCutShortLeavesNoCacheToRead) {
  // The shuffle index cannot be put in place (a folder holds its name): the write stops
  // with a one-line error naming the file, before the description, so no reader takes
  // the two arrays written for a cache, and no temp file stays.
  const fs::path cache = dir_ / "cache";
  td::GptCacheKey key{ds_->prefix(), "train", 64, 8, 1234, 0, 18, 20};
  const td::MegatronCache c{cache.string(), true, "90,8,2", trident::kNullTokenizerIdentifiers};
  const std::string base =
      (cache / (td::md5_hex(td::gpt_cache_description(key, {c.split, c.tokenizer})) + "-GPTDataset-train")).string();
  fs::create_directories(base + "-shuffle_index.npy/full");
  const std::string e = error_of([&] { td::MegatronSamples({{ds_.get(), 1.0, 0, 18}}, false, 64, 8, 1234, "train", c); });
  EXPECT_NE(e.find("cannot rename into place " + base + "-shuffle_index.npy"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  std::vector<std::string> names;
  for (const auto& f : fs::directory_iterator(cache)) names.push_back(f.path().filename().string());
  std::sort(names.begin(), names.end());
  const std::string stem = fs::path(base).filename().string();
  EXPECT_EQ(names, (std::vector<std::string>{stem + "-document_index.npy", stem + "-sample_index.npy",
                                             stem + "-shuffle_index.npy"}));
  const td::MegatronSamples reader({{ds_.get(), 1.0, 0, 18}}, false, 64, 8, 1234, "train",
                                   {cache.string(), false, c.split, c.tokenizer});
  EXPECT_EQ(reader.cached(), 0u);
}

TEST_F(MegatronSamplesTest, WritersOfOneCacheAtOnceNeverCollide) {
  // Two processes (two runs sharing data.cache_dir) write the same cache over and over at
  // once: each has its own temp files, so neither's rename finds the other's temp gone
  // or half written, and what stays is whole.
  const fs::path cache = dir_ / "cache";
  fs::create_directories(cache);
  std::vector<int32_t> sizes;
  for (uint64_t s = 0; s < ds_->sequence_count(); ++s) sizes.push_back(ds_->sequence_length(s));
  const td::GptCacheKey key{ds_->prefix(), "train", 64, 8, 1234, 0, 18, 20};
  const td::GptIndices g = td::build_gpt_indices(sizes, 0, 18, 64, 8, 1234);
  const td::GptCacheText text{"90,8,2", trident::kNullTokenizerIdentifiers};
  std::vector<pid_t> writers;
  for (int w = 0; w < 2; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        for (int i = 0; i < 200; ++i) td::write_gpt_cache(cache.string(), key, text, g);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "writer %d: %s\n", w, e.what());
        rc = 1;
      }
      std::_Exit(rc);
    }
    writers.push_back(pid);
  }
  for (pid_t pid : writers) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer failed (see its message above)";
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(cache), fs::directory_iterator()), 4);
  const auto read = td::read_gpt_cache(cache.string(), key, sizes);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->shuffle_index, g.shuffle_index);
  EXPECT_EQ(read->sample_index, g.sample_index);
}

TEST(MegatronSamplesCache, DescriptionIsMegatronCoresByteForByte) {
  // What megatron-core 0.16 wrote for this GPTDataset (NullTokenizer), and its md5.
  const std::string want = R"({
    "class": "GPTDataset",
    "dataset_path": "/tmp/mc_probe/ds0/corpus",
    "num_samples": 192,
    "index_split": "train",
    "random_seed": 1234,
    "sequence_length": 32,
    "split": "90,8,2",
    "split_matrix": [
        [
            0,
            0.9
        ],
        [
            0.9,
            0.98
        ],
        [
            0.98,
            1.0
        ]
    ],
    "tokenizer": {
        "class": "megatron.core.tokenizers.text.libraries.null_tokenizer.NullTokenizer"
    }
})";
  td::GptCacheKey key;
  key.dataset_path = "/tmp/mc_probe/ds0/corpus";
  key.index_split = "train";
  key.num_samples = 192;
  key.sequence_length = 32;
  key.random_seed = 1234;
  const std::string d = td::gpt_cache_description(key, {"90,8,2", trident::kNullTokenizerIdentifiers});
  EXPECT_EQ(d, want);
  EXPECT_EQ(td::md5_hex(d), "0b4842c71fc66b1d29df2bdabd267e24");
  // A split without a share is null, and a later split's first book-end is a float.
  const std::string no_valid = td::gpt_cache_description(key, {"0,1,0", "{\"class\": \"T\", \"paths\": [\"\xc3\xa9\"]}"});
  EXPECT_NE(no_valid.find("\"split_matrix\": [\n        null,\n        [\n            0.0,\n            1.0\n        ],\n"
                          "        null\n    ]"),
            std::string::npos)
      << no_valid;
  EXPECT_NE(no_valid.find("\"paths\": [\n            \"\\u00e9\"\n        ]"), std::string::npos) << no_valid;
}

TEST(MegatronSamplesCache, BadTokenizerIsOneLineNamingTheKey) {
  td::GptCacheKey key;
  key.index_split = "train";
  for (const std::string bad : {"[1, 2]", "{\"class\": ", "NullTokenizer"}) {
    const std::string e = error_of([&] { td::gpt_cache_description(key, {"90,8,2", bad}); });
    EXPECT_EQ(e.rfind("data.cache_tokenizer = ", 0), 0u) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_EQ(td::cache_tokenizer_problem("[1, 2]"),
            "expected a JSON object, the tokenizer's unique_identifiers as megatron-core's description.txt holds them, "
            "e.g. {\"class\": \"megatron.core.tokenizers.text.libraries.null_tokenizer.NullTokenizer\"}");
  EXPECT_EQ(td::cache_tokenizer_problem(trident::kNullTokenizerIdentifiers), "");
}

TEST(MegatronSamplesCache, PythonReprAndMd5) {
  const std::vector<std::pair<double, std::string>> cases = {
      {0.9, "0.9"}, {1.0, "1.0"}, {0.0, "0.0"}, {0.1 + 0.2, "0.30000000000000004"}, {1e-05, "1e-05"},
      {0.0001, "0.0001"}, {1e16, "1e+16"}, {1234567890123456.0, "1234567890123456.0"}, {-2.5e-7, "-2.5e-07"},
      {9.99999000001e-07, "9.99999000001e-07"}, {123.456, "123.456"}, {1.5e300, "1.5e+300"}};
  for (const auto& [v, want] : cases) EXPECT_EQ(td::python_float_repr(v), want) << want;
  EXPECT_EQ(td::md5_hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(td::md5_hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(td::md5_hex(std::string(1000, 'x')), "398533d48111e9f664b1f64cb10c4b63");  // Python's hashlib
  EXPECT_EQ(td::md5_hex(std::string(119, 'y')), "b2ea3db8221fa9ae01ee0adf42970ba0");
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
