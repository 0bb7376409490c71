// Hand-written matchers for the known Hugging Face split patterns over UTF-8 code
// points. NOTE [Onig alternation]: Oniguruma tries alternatives in order and takes
// the first that matches (not the longest); greedy quantifiers backtrack, which is
// where the "whitespace run less its last character" rules below come from.
#include "datasets/hf_pretokenize.h"

#include <cassert>
#include <cstdint>

#include "datasets/unicode.h"

namespace trident::data {
namespace {

constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class Kind { kLetter, kNumber, kSpace, kOther };

Kind classify(uint32_t cp) {
  if (is_letter(cp)) return Kind::kLetter;
  if (is_number(cp)) return Kind::kNumber;
  if (is_onig_space(cp)) return Kind::kSpace;
  return Kind::kOther;  // includes bytes of malformed UTF-8
}

struct Scanner {
  std::string_view s;
  Kind kind_at(size_t pos, size_t& len) const { return classify(decode_utf8(s, pos, len)); }
  Kind kind_at(size_t pos) const {
    size_t len = 0;
    return kind_at(pos, len);
  }
  // End of the run of `kind` starting at pos, at most `max` code points.
  size_t run_end(size_t pos, Kind kind, size_t max = SIZE_MAX) const {
    size_t len = 0;
    for (size_t n = 0; n < max && pos < s.size() && kind_at(pos, len) == kind; ++n) pos += len;
    return pos;
  }
  // Start of the code point that ends at `end` (> 0).
  size_t last_start(size_t end) const {
    size_t p = end - 1;
    while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80 && end - p < 4) --p;
    size_t len = 0;
    decode_utf8(s, p, len);
    return p + len == end ? p : end - 1;  // a stray continuation byte is a code point of its own
  }
};

// 's 't 're 've 'm 'll 'd at pos: its byte length, or 0. Case-insensitive
// matching follows Unicode case folding, where U+017F (long s) folds to 's'.
size_t contraction_length(std::string_view s, size_t pos, bool ignore_case) {
  if (s[pos] != '\'' || pos + 1 >= s.size()) return 0;
  auto low = [&](char c) { return ignore_case && c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  const char c = low(s[pos + 1]);
  if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
  if (ignore_case && s.substr(pos + 1, 2) == "\xC5\xBF") return 3;
  if (pos + 2 < s.size()) {
    const char c2 = low(s[pos + 2]);
    if ((c == 'r' && c2 == 'e') || (c == 'v' && c2 == 'e') || (c == 'l' && c2 == 'l')) return 3;
  }
  return 0;
}

// "\s+(?!\S)|\s+" at pos, a white-space code point: the run, less its last code
// point when a non-space follows; when that leaves nothing, the one code point.
size_t trailing_space_end(const Scanner& sc, size_t pos) {
  const size_t end = sc.run_end(pos, Kind::kSpace);
  if (end == sc.s.size()) return end;
  const size_t last = sc.last_start(end);
  return last > pos ? last : end;
}

size_t gpt2_piece_end(const Scanner& sc, size_t pos) {
  if (size_t n = contraction_length(sc.s, pos, false)) return pos + n;
  // " ?X+" for X in letter, number, other.
  size_t body = pos;
  Kind kind = sc.kind_at(pos);
  if (sc.s[pos] == ' ' && pos + 1 < sc.s.size() && sc.kind_at(pos + 1) != Kind::kSpace) {
    body = pos + 1, kind = sc.kind_at(pos + 1);
  }
  if (kind != Kind::kSpace) return sc.run_end(body, kind);
  return trailing_space_end(sc, pos);
}

bool is_cr_lf(char c) { return c == '\r' || c == '\n'; }

size_t llama3_piece_end(const Scanner& sc, size_t pos, size_t max_digits) {
  const std::string_view s = sc.s;
  if (size_t n = contraction_length(s, pos, true)) return pos + n;
  size_t len = 0;
  const Kind first = sc.kind_at(pos, len);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (first == Kind::kLetter) return sc.run_end(pos, Kind::kLetter);
  if (first != Kind::kNumber && !is_cr_lf(s[pos]) && pos + len < s.size() && sc.kind_at(pos + len) == Kind::kLetter) {
    return sc.run_end(pos + len, Kind::kLetter);
  }
  // \p{N}{1,3}  (Qwen2: \p{N})
  if (first == Kind::kNumber) return sc.run_end(pos, Kind::kNumber, max_digits);
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  size_t body = pos;
  if (s[pos] == ' ' && pos + 1 < s.size() && sc.kind_at(pos + 1) == Kind::kOther) body = pos + 1;
  if (sc.kind_at(body) == Kind::kOther) {
    size_t end = sc.run_end(body, Kind::kOther);
    while (end < s.size() && is_cr_lf(s[end])) ++end;
    return end;
  }
  assert(first == Kind::kSpace);
  // "\s*[\r\n]+": the white-space run up to and including its last CR or LF
  // (CR and LF are single bytes, so a byte scan finds them).
  const size_t run = sc.run_end(pos, Kind::kSpace);
  for (size_t i = run; i > pos; --i) {
    if (is_cr_lf(s[i - 1])) return i;
  }
  return trailing_space_end(sc, pos);
}

}  // namespace

bool is_onig_space(uint32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::optional<SplitPattern> recognise_split_pattern(const std::string& regex) {
  for (const SplitPattern p : {SplitPattern::kGpt2, SplitPattern::kLlama3, SplitPattern::kQwen2}) {
    if (regex == split_pattern_regex(p)) return p;
  }
  return std::nullopt;
}

const char* split_pattern_regex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2: return kGpt2Regex;
    case SplitPattern::kLlama3: return kLlama3Regex;
    case SplitPattern::kQwen2: return kQwen2Regex;
  }
  return "";
}

std::vector<std::string_view> hf_pretokenize(std::string_view text, SplitPattern pattern) {
  std::vector<std::string_view> pieces;
  const Scanner sc{text};
  for (size_t pos = 0; pos < text.size();) {
    size_t end = 0;
    switch (pattern) {
      case SplitPattern::kGpt2: end = gpt2_piece_end(sc, pos); break;
      case SplitPattern::kLlama3: end = llama3_piece_end(sc, pos, 3); break;
      case SplitPattern::kQwen2: end = llama3_piece_end(sc, pos, 1); break;
    }
    assert(end > pos);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return pieces;
}

}  // namespace trident::data
