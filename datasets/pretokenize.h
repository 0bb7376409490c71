// GPT-2 pre-tokenization: splits text into the pieces BPE runs on, following
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// exactly as the JavaScript reference encoder's regex does, without a regex engine.
#pragma once

#include <string_view>
#include <vector>

namespace trident::data {

// The pieces are views into `text`, in order, and concatenate back to it.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace trident::data
