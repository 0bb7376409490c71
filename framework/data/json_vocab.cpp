// Recursive-descent reader for a flat JSON object of string -> integer.
#include "framework/data/json_vocab.h"

#include <cctype>

#include "framework/data/errors.h"
#include "framework/data/unicode.h"

namespace trident::data {
namespace {

class Reader {
 public:
  Reader(const std::string& s, const std::string& source) : s_(s), source_(source) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(source_ + ": invalid JSON at byte " + std::to_string(pos_) + ": " + what);
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool at_end() {
    skip_space();
    return pos_ == s_.size();
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("bad hex digit in \\u escape");
    }
    return v;
  }

  // \uXXXX, joining a high/low surrogate pair into one code point.
  void unicode_escape(std::string& out) {
    uint32_t cp = hex4();
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (s_.compare(pos_, 2, "\\u") != 0) fail("high surrogate without a low surrogate");
      pos_ += 2;
      const uint32_t lo = hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate followed by a non-low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      fail("lone low surrogate");
    }
    append_utf8(cp, out);
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;  // raw UTF-8 passes through unchanged
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': unicode_escape(out); break;
        default: fail(std::string("unknown escape \\") + e);
      }
    }
  }

  uint32_t integer() {
    skip_space();
    const size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > UINT32_MAX) fail("integer too large");
    }
    if (pos_ == start) fail("expected a non-negative integer");
    return static_cast<uint32_t>(v);
  }

 private:
  const std::string& s_;
  const std::string& source_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<std::pair<std::string, uint32_t>> parse_json_vocab(const std::string& json, const std::string& source) {
  Reader r(json, source);
  std::vector<std::pair<std::string, uint32_t>> entries;
  r.expect('{');
  if (!r.peek('}')) {
    do {
      std::string key = r.string();
      r.expect(':');
      entries.emplace_back(std::move(key), r.integer());
    } while (r.peek(',') && (r.expect(','), true));
  }
  r.expect('}');
  if (!r.at_end()) r.fail("trailing characters after the object");
  return entries;
}

}  // namespace trident::data
