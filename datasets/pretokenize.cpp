// Hand-written matcher for the GPT-2 pre-tokenizer pattern over UTF-8 code points.
#include "datasets/pretokenize.h"

#include <cassert>
#include <cstdint>

#include "datasets/unicode.h"

namespace trident::data {
namespace {

enum class Kind { kLetter, kNumber, kSpace, kOther };

Kind classify(uint32_t cp) {
  if (is_letter(cp)) return Kind::kLetter;
  if (is_number(cp)) return Kind::kNumber;
  if (is_space(cp)) return Kind::kSpace;
  return Kind::kOther;  // includes bytes of malformed UTF-8
}

// A cursor over code points: kind and byte length at a byte offset.
struct Scanner {
  std::string_view s;
  Kind kind_at(size_t pos, size_t& len) const { return classify(decode_utf8(s, pos, len)); }
  // End of the maximal run of `kind` starting at pos.
  size_t run_end(size_t pos, Kind kind) const {
    size_t len = 0;
    while (pos < s.size() && kind_at(pos, len) == kind) pos += len;
    return pos;
  }
};

// Length of a contraction ('s 't 're 've 'm 'll 'd) at pos, or 0. Case-sensitive, like the pattern.
size_t contraction_length(std::string_view s, size_t pos) {
  if (s[pos] != '\'' || pos + 1 >= s.size()) return 0;
  const char c = s[pos + 1];
  if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
  if (pos + 2 < s.size()) {
    const char c2 = s[pos + 2];
    if ((c == 'r' && c2 == 'e') || (c == 'v' && c2 == 'e') || (c == 'l' && c2 == 'l')) return 3;
  }
  return 0;
}

// End of the piece that starts at pos (pos < size). Alternatives are tried in the
// pattern's order; the first that matches wins (JS regexes are not longest-match).
size_t piece_end(const Scanner& sc, size_t pos) {
  if (size_t n = contraction_length(sc.s, pos)) return pos + n;
  size_t len = 0;
  const Kind first = sc.kind_at(pos, len);
  // " ?X+" for X in {letter, number, other}: an optional ASCII space, then a run of X.
  size_t body = pos;
  Kind body_kind = first;
  if (sc.s[pos] == ' ' && pos + 1 < sc.s.size()) {
    size_t next_len = 0;
    const Kind next = sc.kind_at(pos + 1, next_len);
    if (next != Kind::kSpace) body = pos + 1, body_kind = next;
  }
  if (body_kind != Kind::kSpace) return sc.run_end(body, body_kind);
  // Here the piece starts with white space. "\s+(?!\S)": the run, less its last
  // character when a non-space follows (that character then prefixes the next word);
  // if that leaves nothing, "\s+" takes the single character.
  assert(first == Kind::kSpace);
  const size_t end = sc.run_end(pos, Kind::kSpace);
  if (end == sc.s.size()) return end;
  size_t last = end - 1;  // start of the last white-space code point
  while (last > pos && (static_cast<unsigned char>(sc.s[last]) & 0xC0) == 0x80) --last;
  return last > pos ? last : end;
}

}  // namespace

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  const Scanner sc{text};
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = piece_end(sc, pos);
    assert(end > pos);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return pieces;
}

}  // namespace trident::data
