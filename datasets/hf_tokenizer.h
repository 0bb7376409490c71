// Hugging Face byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2 and the like),
// loaded from a `tokenizer.json`, giving the ids of the `tokenizers` library's
// encode(text, add_special_tokens=False). What is read and what is refused:
// datasets/README.md, "Hugging Face tokenizers".
#pragma once

#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "datasets/hf_pretokenize.h"
#include "datasets/tokenizer.h"
#include "core/json_fwd.h"

namespace trident::data {

class HfTokenizer : public Tokenizer {
 public:
  // Parses the text of a tokenizer.json; `source` names it in errors. Throws
  // DataError naming the component (model, normalizer, pre-tokenizer, option,
  // added token) that Trident does not read.
  HfTokenizer(const std::string& json_text, const std::string& source);
  // Reads dir/tokenizer.json.
  static std::unique_ptr<HfTokenizer> from_dir(const std::string& dir);

  std::vector<uint32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  uint32_t vocab_size() const override { return static_cast<uint32_t>(id_to_bytes_.size()); }
  // "hf:" and the 16 hex digits of the FNV-1a 64 hash of tokenizer.json's bytes.
  std::string name() const override { return name_; }
  // The special added token <|endoftext|> (GPT-2, Qwen2) or <|end_of_text|> (Llama 3).
  std::optional<uint32_t> end_of_text() const override { return eot_; }

  std::optional<SplitPattern> split_pattern() const { return pattern_; }
  // The pre-tokenizer's pieces of `text`, each in the byte alphabet (as tokenizers'
  // pre_tokenizer.pre_tokenize_str shows them); added tokens are not cut out here.
  std::vector<std::string> pre_tokenize(const std::string& text) const;

 private:
  struct AddedToken {
    std::string content;
    uint32_t id;
    bool normalized;
  };
  struct Merge {
    uint32_t rank;
    uint32_t id;  // the merged symbol
  };

  void read_model(const json::Value& model, const std::string& source);
  void read_added_tokens(const json::Value& doc, const std::string& source);
  // Ids of one pre-token (raw bytes) by BPE.
  std::vector<uint32_t> bpe(std::string_view piece) const;
  // Applies the merges to a word of symbol ids (NOTE [BPE by heap]).
  void merge_word(std::vector<uint32_t>& word) const;
  // The pre-tokenizer's pieces (views into text).
  std::vector<std::string_view> pieces_of(std::string_view text) const;
  // Appends the ids of a stretch of text holding no added token.
  void encode_plain(std::string_view text, std::vector<uint32_t>& ids) const;
  // Splits text at the added tokens with normalized == `normalized` (leftmost-longest).
  void split_added(std::string_view text, bool normalized, std::vector<uint32_t>& ids) const;

  std::string name_;
  std::optional<SplitPattern> pattern_;  // none: ByteLevel without a regex, each stretch one pre-token
  std::unordered_map<std::string, uint32_t> vocab_;  // byte-mapped symbol -> id
  std::unordered_map<uint64_t, Merge> merges_;       // (left id << 32 | right id) -> merge
  std::array<int64_t, 256> byte_id_{};               // id of each byte's symbol, -1 if absent
  std::string byte_symbol_[256];                     // byte -> its symbol (UTF-8)
  std::optional<uint32_t> unk_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::vector<AddedToken> added_;
  std::vector<uint32_t> added_by_first_[2][256];  // [normalized][first byte] -> indices into added_
  std::vector<std::string> id_to_bytes_;  // id -> raw bytes ("" for an unused id)
  std::vector<bool> id_used_;
  std::optional<uint32_t> eot_;

  static constexpr size_t kMaxCache = 1 << 16;
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache_;
  mutable std::mutex cache_mutex_;
};

}  // namespace trident::data
