// GPT-2's encoder.json: one flat object of string keys to non-negative
// integers (token ids).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trident::data {

// Parses `{"key": 123, ...}` in file order. Keys are returned as UTF-8 with
// escapes (including \uXXXX and surrogate pairs) resolved. Throws DataError
// naming `source` and the byte offset of the first syntax problem, or the key
// whose value is not a token id.
std::vector<std::pair<std::string, uint32_t>> parse_json_vocab(const std::string& json, const std::string& source);

}  // namespace trident::data
