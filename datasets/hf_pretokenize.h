// The pre-tokenizer split patterns of Hugging Face byte-level BPE tokenizers,
// matched by code (there is no regex engine here) exactly as `tokenizers` matches
// them with Oniguruma: GPT-2's, Llama 3's, and Qwen2's (Llama 3's with single digits).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trident::data {

enum class SplitPattern {
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,   // the same with \p{N} in place of \p{N}{1,3}
};

// The pattern whose regex text is exactly `regex`, or nullopt for any other text.
std::optional<SplitPattern> recognise_split_pattern(const std::string& regex);
// The regex text of a pattern (what tokenizer.json holds).
const char* split_pattern_regex(SplitPattern pattern);

// Onig's \s for UTF-8 (Unicode White_Space): unlike JavaScript's \s it holds
// U+0085 and not U+FEFF.
bool is_onig_space(uint32_t cp);

// The matches of `pattern`, in order; they concatenate back to `text` (every
// code point is matched by one of each pattern's alternatives).
std::vector<std::string_view> hf_pretokenize(std::string_view text, SplitPattern pattern);

}  // namespace trident::data
