// Megatron indexed datasets (datasets/megatron_dataset.h): a dataset
// written here byte by byte as NOTE [Megatron index format] says, read back;
// every corruption named. tests/reference/test_megatron_data.py checks files
// written by megatron-core itself.
#include "datasets/megatron_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "datasets/errors.h"
#include "tests/error_of.h"

namespace fs = std::filesystem;
using trident::data::MegatronDataset;
using trident::testing::error_of;

namespace {

template <typename T>
void put(std::string& s, T v) {
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  s.append(b, sizeof v);
}

struct Files {
  std::string idx, bin;
};

// What IndexedDatasetBuilder writes for these documents (each one sequence).
template <typename Tok>
Files build(const std::vector<std::vector<Tok>>& docs, uint8_t code) {
  Files f;
  f.idx.append("MMIDIDX\0\0", 9);
  put<uint64_t>(f.idx, 1);
  put<uint8_t>(f.idx, code);
  put<uint64_t>(f.idx, docs.size());
  put<uint64_t>(f.idx, docs.size() + 1);
  for (const auto& d : docs) put<int32_t>(f.idx, static_cast<int32_t>(d.size()));
  int64_t ptr = 0;
  for (const auto& d : docs) {
    put<int64_t>(f.idx, ptr);
    ptr += static_cast<int64_t>(d.size() * sizeof(Tok));
  }
  for (size_t i = 0; i <= docs.size(); ++i) put<int64_t>(f.idx, static_cast<int64_t>(i));
  for (const auto& d : docs)
    for (Tok t : d) put<Tok>(f.bin, t);
  return f;
}

class MegatronDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("trident-megatron-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    prefix_ = (dir_ / "ds").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const Files& f) {
    std::ofstream(prefix_ + ".idx", std::ios::binary | std::ios::trunc) << f.idx;
    std::ofstream(prefix_ + ".bin", std::ios::binary | std::ios::trunc) << f.bin;
  }
  std::string error(const Files& f) {
    write(f);
    return error_of([&] { MegatronDataset ds(prefix_); });
  }
  fs::path dir_;
  std::string prefix_;
};

const std::vector<std::vector<uint16_t>> kDocs = {{5, 6, 7}, {}, {65535, 0}, {1}};

}  // namespace

TEST_F(MegatronDatasetTest, ReadsUint16) {
  write(build(kDocs, 8));
  MegatronDataset ds(prefix_);
  EXPECT_EQ(ds.dtype_code(), 8);
  EXPECT_EQ(ds.sequence_count(), 4u);
  EXPECT_EQ(ds.document_count(), 4u);
  EXPECT_EQ(ds.sequence(0), (std::vector<uint32_t>{5, 6, 7}));
  EXPECT_TRUE(ds.sequence(1).empty());
  EXPECT_EQ(ds.sequence(2), (std::vector<uint32_t>{65535, 0}));
  const auto t = ds.tokens();
  ASSERT_EQ(t.size(), 6u);
  const std::vector<uint32_t> all = {5, 6, 7, 65535, 0, 1};
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(t[i], all[i]);
  EXPECT_NE(error_of([&] { ds.check_vocab(1000); }).find("token id 65535 at index 3, not below model.vocab_size = 1000"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { ds.check_vocab(65536); }), "<no error>");
}

TEST_F(MegatronDatasetTest, ReadsInt32) {
  write(build<int32_t>({{70000, 1}, {2}}, 4));
  MegatronDataset ds(prefix_);
  EXPECT_EQ(ds.sequence(0), (std::vector<uint32_t>{70000, 1}));
  EXPECT_EQ(ds.tokens()[2], 2u);
}

TEST_F(MegatronDatasetTest, CorruptFilesAreNamedErrors) {
  const Files good = build(kDocs, 8);
  const std::string idx = prefix_ + ".idx", bin = prefix_ + ".bin";
  auto with = [&](auto edit) {
    Files f = good;
    edit(f);
    return error(f);
  };
  auto expect_has = [](const std::string& err, const std::string& part) {
    EXPECT_NE(err.find(part), std::string::npos) << "error: " << err << "\nexpected to contain: " << part;
  };
  expect_has(with([](Files& f) { f.idx.resize(20); }), "Megatron index " + idx + " is truncated: 20 bytes");
  expect_has(with([](Files& f) { f.idx[0] = 'X'; }), idx + " has a wrong magic");
  expect_has(with([](Files& f) { f.idx[9] = 2; }), idx + " has version 2 (expected 1)");
  expect_has(with([](Files& f) { f.idx[17] = 7; }), idx + " holds float32 tokens (dtype code 7)");
  expect_has(with([](Files& f) { f.idx[17] = 42; }), idx + " has an unknown dtype code 42");
  expect_has(with([](Files& f) { f.idx.resize(f.idx.size() - 8); }),
             idx + " is truncated or corrupt: its header says 4 sequences and 5 document indices");
  expect_has(with([](Files& f) { f.idx[18] = 100; }), "is truncated or corrupt: its header says 100 sequences");
  // Sequence 1's pointer (after 4 int32 lengths and pointer 0) off by 2 bytes.
  expect_has(with([](Files& f) { f.idx[34 + 16 + 8] = 8; }),
             idx + ": sequence 1 starts at byte 8 of the .bin, expected 6 (sequences must lie back to back)");
  // The first document index not 0.
  expect_has(with([](Files& f) { f.idx[34 + 48] = 1; }), idx + ": document index 0 is 1");
  // The last document index short of the sequence count.
  expect_has(with([](Files& f) { f.idx[f.idx.size() - 8] = 3; }), ": the last document index is 3, not the sequence count 4");
  expect_has(with([](Files& f) { f.bin.resize(f.bin.size() - 2); }),
             "Megatron data file " + bin + " has 10 bytes but " + idx + " describes 12 (6 uint16 tokens): truncated");
  write(good);
  fs::remove(bin);
  expect_has(error_of([&] { MegatronDataset ds(prefix_); }), "cannot open Megatron dataset file " + bin);
  expect_has(error_of([&] { MegatronDataset ds(prefix_ + "-missing"); }), "cannot open Megatron dataset file " + prefix_ + "-missing.idx");
  expect_has(error(build<int32_t>({{3, -4}}, 4)), "Megatron data file " + bin + " has token id -4 at index 1");
  expect_has(error(build<uint16_t>({{}}, 8)), bin + " holds no tokens");
}

// MegatronWriter writes exactly the bytes build() lays out by the NOTE (what
// IndexedDatasetBuilder writes); tests/reference/test_megatron_data.py has
// megatron-core's IndexedDataset read them.
TEST_F(MegatronDatasetTest, WriterWritesTheIndexFormat) {
  {
    trident::data::MegatronWriter w(prefix_, 65536 - 37);  // 65499 < 65500: uint16
    EXPECT_EQ(w.dtype_code(), 8);
    for (const auto& d : std::vector<std::vector<uint32_t>>{{5, 6, 7}, {}, {65498, 0}, {1}}) w.add_document(d);
    w.finish();
    EXPECT_EQ(w.documents(), 4u);
    EXPECT_EQ(w.tokens(), 6u);
  }
  const std::vector<std::vector<uint16_t>> docs = {{5, 6, 7}, {}, {65498, 0}, {1}};
  const Files expect = build(docs, 8);
  std::ifstream idx(prefix_ + ".idx", std::ios::binary), bin(prefix_ + ".bin", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(idx), {}), expect.idx);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(bin), {}), expect.bin);
  MegatronDataset ds(prefix_);
  EXPECT_EQ(ds.sequence(2), (std::vector<uint32_t>{65498, 0}));

  {
    trident::data::MegatronWriter w(prefix_, 65500);  // Megatron's int32 from 65500 on
    EXPECT_EQ(w.dtype_code(), 4);
    w.add_document({70000 % 65500, 3});
    w.finish();
  }
  EXPECT_EQ(MegatronDataset(prefix_).sequence(0), (std::vector<uint32_t>{4500, 3}));
  trident::data::MegatronWriter w(prefix_, 256);
  EXPECT_NE(error_of([&] { w.add_document({1, 256}); }).find("token id 256 written to " + prefix_ +
                                                              ".bin is not below the vocab size 256"),
            std::string::npos);
}

// A split's stream is the concatenation of its sequences.
TEST_F(MegatronDatasetTest, SequenceRangeTokens) {
  write(build(kDocs, 8));
  MegatronDataset ds(prefix_);
  const auto t = ds.tokens(2, 4, "part");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0], 65535u);
  EXPECT_EQ(t[2], 1u);
  EXPECT_EQ(ds.tokens(1, 2, "empty").size(), 0u);
  EXPECT_NE(error_of([&] { ds.tokens(3, 5, "x"); }).find("out of range (it has 4)"), std::string::npos);
}

// NOTE [Megatron split], closed-form cases: Megatron's default, ties rounded to
// even as Python's round() does, a zero share absent, missing parts zero.
TEST(MegatronSplit, CutsAsMegatronDoes) {
  using trident::data::megatron_split;
  using trident::data::parse_split;
  using R = std::array<std::array<uint64_t, 2>, 3>;
  EXPECT_EQ(megatron_split(parse_split("969,30,1"), 1000), (R{{{0, 969}, {969, 999}, {999, 1000}}}));
  EXPECT_EQ(megatron_split(parse_split("969, 30, 1"), 10), (R{{{0, 10}, {10, 10}, {10, 10}}}));
  // 0.5 * 5 = 2.5 rounds to 2 (even), 0.5 * 3 = 1.5 to 2.
  EXPECT_EQ(megatron_split(parse_split("1,1"), 5), (R{{{0, 2}, {2, 5}, {0, 0}}}));
  EXPECT_EQ(megatron_split(parse_split("1,1"), 3), (R{{{0, 2}, {2, 3}, {0, 0}}}));
  EXPECT_EQ(megatron_split(parse_split("98,2"), 100), (R{{{0, 98}, {98, 100}, {0, 0}}}));
  EXPECT_EQ(megatron_split(parse_split("0,1,0"), 7), (R{{{0, 0}, {0, 7}, {0, 0}}}));
  const auto w = parse_split("969,30,1");
  EXPECT_DOUBLE_EQ(w[0], 0.969);
  EXPECT_DOUBLE_EQ(w[2], 0.001);
  for (const char* bad : {"", "a,b", "1,2,3,4", "0,0", "1,,2", "-1,2", "1e3"})
    EXPECT_NE(error_of([&] { parse_split(bad); }).find(std::string("data.split = \"") + bad + "\""), std::string::npos)
        << bad;
  EXPECT_NE(error_of([&] { parse_split("0,0"); }).find("the parts sum to 0"), std::string::npos);
}
