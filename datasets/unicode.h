// UTF-8 decoding and the Unicode classes (letter, number, white space) the GPT-2
// pre-tokenizer needs, matching JavaScript's /\p{L}/u, /\p{N}/u and /\s/u.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trident::data {

// Decodes the code point starting at s[pos]. Sets `len` to its byte length.
// Malformed or truncated sequences (and encoded surrogates) decode as a single
// byte with code point kInvalidCodePoint, so every byte string stays splittable.
constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;
uint32_t decode_utf8(std::string_view s, size_t pos, size_t& len);

// Appends the UTF-8 encoding of code point cp (cp < 0x110000) to out.
void append_utf8(uint32_t cp, std::string& out);

// GPT-2's reversible byte -> code point map (byte-level BPE, also Hugging Face's
// ByteLevel): printable Latin-1 bytes map to themselves, the other 68 bytes to
// 256, 257, ... in byte order. out[b] is the UTF-8 of byte b's symbol.
void byte_level_symbols(std::string (&out)[256]);

bool is_letter(uint32_t cp);  // JS \p{L}
bool is_number(uint32_t cp);  // JS \p{N}
bool is_space(uint32_t cp);   // JS \s (u flag)

}  // namespace trident::data
