// UTF-8 decoding and Unicode class lookup by binary search over generated ranges.
#include "datasets/unicode.h"

#include <algorithm>
#include <cassert>

namespace trident::data {
namespace {

struct CodePointRange {
  uint32_t first;
  uint32_t last;
};

#include "datasets/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], uint32_t cp) {
  // First range whose end is >= cp; cp is inside iff that range starts at or before it.
  const auto* it = std::lower_bound(std::begin(ranges), std::end(ranges), cp,
                                    [](const CodePointRange& r, uint32_t v) { return r.last < v; });
  return it != std::end(ranges) && it->first <= cp;
}

}  // namespace

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

uint32_t decode_utf8(std::string_view s, size_t pos, size_t& len) {
  assert(pos < s.size());
  const auto b0 = static_cast<unsigned char>(s[pos]);
  len = 1;
  if (b0 < 0x80) return b0;
  size_t need;
  uint32_t cp;
  uint32_t min_cp;  // smallest code point allowed for this length (rejects overlong forms)
  if ((b0 & 0xE0) == 0xC0) {
    need = 1, cp = b0 & 0x1F, min_cp = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    need = 2, cp = b0 & 0x0F, min_cp = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    need = 3, cp = b0 & 0x07, min_cp = 0x10000;
  } else {
    return kInvalidCodePoint;
  }
  if (pos + need >= s.size()) return kInvalidCodePoint;  // truncated at the end
  for (size_t k = 1; k <= need; ++k) {
    const auto b = static_cast<unsigned char>(s[pos + k]);
    if ((b & 0xC0) != 0x80) return kInvalidCodePoint;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kInvalidCodePoint;
  len = need + 1;
  return cp;
}

void byte_level_symbols(std::string (&out)[256]) {
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    out[b].clear();
    append_utf8(printable(b) ? static_cast<uint32_t>(b) : next++, out[b]);
  }
}

bool is_letter(uint32_t cp) { return cp != kInvalidCodePoint && in_ranges(kLetterRanges, cp); }
bool is_number(uint32_t cp) { return cp != kInvalidCodePoint && in_ranges(kNumberRanges, cp); }
bool is_space(uint32_t cp) { return cp != kInvalidCodePoint && in_ranges(kSpaceRanges, cp); }

}  // namespace trident::data
