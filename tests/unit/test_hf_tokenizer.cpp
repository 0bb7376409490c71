// Hugging Face tokenizer.json (--tokenizer hf): small fixed cases and every refusal.
// The split expectations were produced by `tokenizers` 0.23.3
// (pre_tokenizers.Split(Regex(...), behavior="isolated").pre_tokenize_str), not by our
// code; tests/reference/test_hf_tokenizer.py compares whole tokenizers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "datasets/errors.h"
#include "datasets/hf_pretokenize.h"
#include "datasets/hf_tokenizer.h"
#include "datasets/token_file.h"
#include "datasets/tokenizer.h"
#include "core/errors.h"
#include "datasets/unicode.h"
#include "core/json.h"
#include "tests/error_of.h"

namespace td = trident::data;
namespace json = trident::json;

namespace {

std::vector<std::string> split(const std::string& text, td::SplitPattern p) {
  std::vector<std::string> out;
  for (const auto piece : td::hf_pretokenize(text, p)) out.emplace_back(piece);
  return out;
}

// A byte-level BPE tokenizer.json: the 256 byte symbols as ids 0..255, then the
// symbols `extra` (ids 256...), the merges `merges`, and added tokens.
json::Value base_doc(const std::vector<std::string>& extra, const std::vector<std::pair<std::string, std::string>>& merges) {
  std::string symbols[256];
  td::byte_level_symbols(symbols);
  json::Value vocab = json::Value::object();
  int64_t id = 0;
  for (const auto& s : symbols) vocab[s] = json::number(id++);
  for (const auto& s : extra) vocab[s] = json::number(id++);
  json::Value merge_list = json::Value::array();
  for (const auto& [a, b] : merges) merge_list.push_back(json::Value::array({json::Value(a), json::Value(b)}));
  json::Value doc = json::parse(R"({"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null, "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false}})",
                                "base");
  json::Value model = json::at(doc, "model", "");
  model["vocab"] = vocab;
  model["merges"] = merge_list;
  doc["model"] = model;
  return doc;
}

json::Value added_token(int64_t id, const std::string& content, bool special) {
  json::Value t = json::parse(R"({"single_word": false, "lstrip": false, "rstrip": false})", "t");
  t["id"] = json::number(id);
  t["content"] = json::Value(content);
  t["normalized"] = json::Value(!special);
  t["special"] = json::Value(special);
  return t;
}

// hello: h e -> he, l l -> ll, he ll -> hell, hell o -> hello.
json::Value hello_doc() {
  return base_doc({"he", "ll", "hell", "hello"}, {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}});
}

std::string error_of(const json::Value& doc) {
  try {
    td::HfTokenizer tok(json::dump(doc), "t.json");
  } catch (const td::DataError& e) {
    return e.what();
  }
  return "(no error)";
}

json::Value with(json::Value doc, const std::string& part, const std::string& key, json::Value v) {
  json::Value sub = json::at(doc, part, "");
  sub[key] = std::move(v);
  doc[part] = sub;
  return doc;
}

}  // namespace

TEST(HfSplitPattern, RecognisesExactlyTheKnownRegexes) {
  for (const auto p : {td::SplitPattern::kGpt2, td::SplitPattern::kLlama3, td::SplitPattern::kQwen2}) {
    EXPECT_EQ(td::recognise_split_pattern(td::split_pattern_regex(p)), p);
  }
  EXPECT_FALSE(td::recognise_split_pattern(std::string(td::split_pattern_regex(td::SplitPattern::kLlama3)) + " "));
  EXPECT_FALSE(td::recognise_split_pattern(R"(\w+|\W+)"));
}

TEST(HfSplitPattern, Llama3MatchesTokenizers) {
  EXPECT_EQ(split("it'\xC5\xBF IT'S we'Re x\xE2\x84\xAA 12345 \t\nfoo  \n\n bar", td::SplitPattern::kLlama3),
            (std::vector<std::string>{"it", "'\xC5\xBF", " IT", "'S", " we", "'Re", " x\xE2\x84\xAA", " ", "123", "45", " \t\n",
                                      "foo", "  \n\n", " bar"}));
  EXPECT_EQ(split("1234567", td::SplitPattern::kLlama3), (std::vector<std::string>{"123", "456", "7"}));
  EXPECT_EQ(split("1234", td::SplitPattern::kQwen2), (std::vector<std::string>{"1", "2", "3", "4"}));
}

TEST(HfSplitPattern, OnigSpaceHoldsNelNotBom) {
  // \s of Oniguruma: U+0085 is white space, U+FEFF is not (JavaScript's is the reverse).
  EXPECT_TRUE(td::is_onig_space(0x85));
  EXPECT_FALSE(td::is_onig_space(0xFEFF));
  EXPECT_EQ(split("a\xEF\xBB\xBF\xEF\xBB\xBF" "b x\xC2\x85\xC2\x85y", td::SplitPattern::kGpt2),
            (std::vector<std::string>{"a", "\xEF\xBB\xBF\xEF\xBB\xBF", "b", " x", "\xC2\x85", "\xC2\x85", "y"}));
}

TEST(HfTokenizer, MergesInBothFormsGiveTheSameIds) {
  const json::Value pairs = hello_doc();
  json::Value strings_model = json::at(pairs, "model", "");
  json::Value strings = json::Value::array();
  for (const auto& m : json::as_array(json::at(strings_model, "merges", ""), "")) {
    const auto& pair = json::as_array(m, "");
    strings.push_back(json::Value(json::as_string(pair[0], "") + " " + json::as_string(pair[1], "")));
  }
  const json::Value as_strings = with(pairs, "model", "merges", strings);
  const td::HfTokenizer a(json::dump(pairs), "pairs"), b(json::dump(as_strings), "strings");
  // "hello" merges fully (id 259); the pre-token " hello" keeps its space (byte 0x20,
  // id 32) apart because no merge joins it to "hello".
  const std::vector<uint32_t> want = {259, 32, 259, 33};  // hello, ' ', hello, '!'
  EXPECT_EQ(a.encode("hello hello!"), want);
  EXPECT_EQ(b.encode("hello hello!"), want);
  EXPECT_EQ(a.decode(want), "hello hello!");
  EXPECT_EQ(a.pre_tokenize("hello hello!"), (std::vector<std::string>{"hello", "\xC4\xA0hello", "!"}));
  EXPECT_EQ(a.vocab_size(), 260u);
  EXPECT_FALSE(a.end_of_text());
  EXPECT_NE(a.name(), b.name());  // the name hashes the file's bytes
  EXPECT_EQ(a.name().rfind("hf:", 0), 0u);
  EXPECT_EQ(a.name().size(), 19u);  // fits the token file header's 32 bytes
}

TEST(HfTokenizer, BpeMergesLowestRankThenLeftmost) {
  // "aaaa": a a -> aa (leftmost first, so aa aa), then aa aa -> aaaa; "aaa" is aa a.
  const td::HfTokenizer tok(json::dump(base_doc({"aa", "aaaa", "bc", "abc"}, {{"a", "a"}, {"aa", "aa"}, {"b", "c"}, {"a", "bc"}})), "t");
  EXPECT_EQ(tok.encode("aaa"), (std::vector<uint32_t>{256, 'a'}));
  EXPECT_EQ(tok.encode("aaaa"), (std::vector<uint32_t>{257}));
  EXPECT_EQ(tok.encode("aaaaaaa"), (std::vector<uint32_t>{257, 256, 'a'}));
  EXPECT_EQ(tok.encode("abc"), (std::vector<uint32_t>{259}));  // b c (rank 2) before a bc (rank 3)
  EXPECT_EQ(tok.encode(std::string(100000, 'a')), std::vector<uint32_t>(25000, 257));  // long pieces stay fast
}

TEST(HfTokenizer, IgnoreMergesTakesWholeVocabularyWords) {
  // "ab" is in the vocab but no merge makes it.
  json::Value doc = base_doc({"ab"}, {});
  EXPECT_EQ(td::HfTokenizer(json::dump(doc), "t").encode("ab"), (std::vector<uint32_t>{'a', 'b'}));
  doc = with(doc, "model", "ignore_merges", json::Value(true));
  EXPECT_EQ(td::HfTokenizer(json::dump(doc), "t").encode("ab"), (std::vector<uint32_t>{256}));
}

TEST(HfTokenizer, AddedTokensSplitLeftmostLongestBeforeBpe) {
  json::Value doc = hello_doc();
  json::Value added = json::Value::array();
  added.push_back(added_token(260, "<|endoftext|>", true));
  added.push_back(added_token(261, "<|end", true));
  added.push_back(added_token(262, "hello world", false));
  doc["added_tokens"] = added;
  const td::HfTokenizer tok(json::dump(doc), "t");
  EXPECT_EQ(tok.encode("hello<|endoftext|>hello world<|end"), (std::vector<uint32_t>{259, 260, 262, 261}));
  EXPECT_EQ(tok.end_of_text(), 260u);
  EXPECT_EQ(tok.vocab_size(), 263u);
  EXPECT_EQ(tok.decode({262, 260}), "hello world<|endoftext|>");
  EXPECT_THROW(tok.decode({263}), td::DataError);
}

TEST(HfTokenizer, LlamaStyleSequenceReadsItsPattern) {
  json::Value doc = hello_doc();
  json::Value split = json::parse(R"({"type": "Split", "behavior": "Isolated", "invert": false})", "split");
  json::Value pattern = json::Value::object();
  pattern["Regex"] = json::Value(td::split_pattern_regex(td::SplitPattern::kLlama3));
  split["pattern"] = pattern;
  json::Value pt = json::parse(R"({"type": "Sequence"})", "pt");
  pt["pretokenizers"] = json::Value::array({split, json::parse(R"({"type": "ByteLevel", "add_prefix_space": false,
      "trim_offsets": true, "use_regex": false})", "bl")});
  doc["pre_tokenizer"] = pt;
  const td::HfTokenizer tok(json::dump(doc), "t");
  EXPECT_EQ(tok.split_pattern(), td::SplitPattern::kLlama3);
  EXPECT_EQ(tok.encode("1234").size(), 4u);  // "123", "4": no merges, one id per byte
}

TEST(HfTokenizer, RefusalsNameWhatIsNotSupported) {
  const json::Value doc = hello_doc();
  EXPECT_NE(error_of(with(doc, "model", "type", json::Value("Unigram"))).find("Unigram"), std::string::npos);
  EXPECT_NE(error_of(with(doc, "model", "type", json::Value("WordPiece"))).find("WordPiece"), std::string::npos);
  json::Value nfc = doc;
  nfc["normalizer"] = json::parse(R"({"type": "NFC"})", "n");
  EXPECT_NE(error_of(nfc).find("normalizer NFC"), std::string::npos) << error_of(nfc);
  json::Value meta = doc;
  meta["pre_tokenizer"] = json::parse(R"({"type": "Metaspace", "replacement": "_"})", "m");
  EXPECT_NE(error_of(meta).find("Metaspace"), std::string::npos) << error_of(meta);
  json::Value regex = doc;
  regex["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\w+|\\W+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})", "r");
  EXPECT_NE(error_of(regex).find(R"("\\w+|\\W+")"), std::string::npos) << error_of(regex);
  EXPECT_NE(error_of(with(doc, "pre_tokenizer", "add_prefix_space", json::Value(true))).find("add_prefix_space"),
            std::string::npos);
  EXPECT_NE(error_of(with(doc, "model", "byte_fallback", json::Value(true))).find("byte_fallback"), std::string::npos);
  EXPECT_NE(error_of(with(doc, "model", "continuing_subword_prefix", json::Value("##"))).find("continuing_subword_prefix"),
            std::string::npos);
  EXPECT_NE(error_of(with(doc, "model", "dropout", json::number(0.1))).find("dropout"), std::string::npos);
  json::Value lstrip = doc;
  json::Value t = added_token(260, "<mask>", true);
  t["lstrip"] = json::Value(true);
  lstrip["added_tokens"] = json::Value::array({t});
  EXPECT_NE(error_of(lstrip).find("\"<mask>\": lstrip"), std::string::npos) << error_of(lstrip);
  json::Value truncation = doc;
  truncation["truncation"] = json::parse(R"({"max_length": 8})", "t");
  EXPECT_NE(error_of(truncation).find("truncation"), std::string::npos);
  EXPECT_NE(error_of(with(doc, "model", "merges", json::Value::array({json::Value("h e l")}))).find("merges[0]"),
            std::string::npos);
  EXPECT_NE(error_of(with(doc, "model", "merges", json::Value::array({json::Value("q z")}))).find("not in the vocab"),
            std::string::npos);
}

// A tokenizer.json that is valid JSON but no object is named as such (issue 30:
// `[]` was reported as a null pre_tokenizer).
TEST(HfTokenizer, ADocumentThatIsNoObjectIsNamed) {
  for (const auto& [text, kind] : std::vector<std::pair<std::string, std::string>>{
           {"[]", "an array"}, {"\"BPE\"", "a string"}, {"3", "a number"}, {"null", "null"}}) {
    std::string e = "(no error)";
    try {
      td::HfTokenizer tok(text, "t.json");
    } catch (const td::DataError& error) {
      e = error.what();
    }
    EXPECT_EQ(e, "t.json: the file holds " + kind +
                     ", not a JSON object (a Hugging Face tokenizer.json is one object with model and pre_tokenizer)");
  }
}

TEST(HfTokenizer, MissingByteWithoutUnkIsAnError) {
  json::Value doc = hello_doc();
  json::Value model = json::at(doc, "model", "");
  json::Value vocab = json::Value::object();
  for (const auto& [k, v] : json::as_object(json::at(model, "vocab", ""), "")) {
    if (k != "z") vocab[k] = v;
  }
  model["vocab"] = vocab;
  doc["model"] = model;
  const td::HfTokenizer tok(json::dump(doc), "t");
  EXPECT_THROW(tok.encode("jazz"), td::DataError);
}

TEST(HfTokenizer, FactoryNeedsAFolderWithTokenizerJson) {
  try {
    td::make_tokenizer("hf", "");
    FAIL() << "expected DataError";
  } catch (const td::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  const auto dir = std::filesystem::temp_directory_path() / "trident-test-hf-tokenizer";
  std::filesystem::create_directories(dir);
  EXPECT_THROW(td::make_tokenizer("hf", (dir / "absent").string()), td::DataError);
  std::ofstream(dir / "tokenizer.json") << json::dump(hello_doc());
  const auto tok = td::make_tokenizer("hf", dir.string());
  EXPECT_EQ(tok->encode("hello"), (std::vector<uint32_t>{259}));
  std::filesystem::remove_all(dir);
}

TEST(HfTokenizer, TokenFileNamesTheTokenizerJson) {
  const auto dir = std::filesystem::temp_directory_path() / "trident-test-hf-token-file";
  std::filesystem::create_directories(dir / "a");
  std::filesystem::create_directories(dir / "b");
  json::Value doc = hello_doc();
  doc["added_tokens"] = json::Value::array({added_token(260, "<|endoftext|>", true)});
  std::ofstream(dir / "a" / "tokenizer.json") << json::dump(doc);
  std::ofstream(dir / "b" / "tokenizer.json") << json::dump(doc) << "\n";  // other bytes, same vocabulary
  const auto tok = td::make_tokenizer("hf", (dir / "a").string());
  const std::string path = (dir / "t.bin").string();
  td::write_token_file(path, tok->encode("hello<|endoftext|>"), 1, tok->name(), tok->vocab_size(), *tok->end_of_text());
  const td::TokenFile f(path);
  EXPECT_EQ(f.info().tokenizer, tok->name());
  EXPECT_NO_THROW(td::check_tokenizer(f, "hf", (dir / "a").string()));
  EXPECT_NO_THROW(td::check_tokenizer(f, "hf", ""));
  auto message = [&](const std::string& name, const std::string& d) {
    return trident::testing::error_of<trident::ConfigError>([&] { td::check_tokenizer(f, name, d); });
  };
  EXPECT_NE(message("gpt2", "").find("expected data.tokenizer = \"hf\""), std::string::npos) << message("gpt2", "");
  EXPECT_NE(message("hf", (dir / "b").string()).find("expected the folder of the tokenizer.json that wrote it"),
            std::string::npos)
      << message("hf", (dir / "b").string());
  std::filesystem::remove_all(dir);
}
