// Binary token files (`PREFIX.train.bin`, `PREFIX.val.bin`): format, writer, and
// a memory-mapped reader that validates everything at open.
//
// NOTE [token file format] (version 1, little-endian, 128-byte header):
//   offset  0  char[8]  magic "TRIDTOK\0"
//   offset  8  u32      version (1)
//   offset 12  u32      bytes per token: 2 (uint16, vocab <= 65536) or 4 (uint32)
//   offset 16  u64      token count
//   offset 24  u64      document count
//   offset 32  u32      vocab size of the tokenizer that wrote it
//   offset 36  u32      end-of-text id appended after each document, 0xFFFFFFFF if none
//   offset 40  char[32] tokenizer name, NUL-padded ("byte", "gpt2", or for a Hugging Face
//                       tokenizer.json "hf:" and 16 hex digits of the FNV-1a 64 hash of its bytes)
//   offset 72  zeros up to 128
//   offset 128 tokens
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trident::data {

constexpr uint32_t kTokenFileVersion = 1;
constexpr size_t kTokenFileHeaderBytes = 128;
constexpr uint32_t kNoEndOfText = 0xFFFFFFFFu;

struct TokenFileInfo {
  uint32_t version = kTokenFileVersion;
  uint32_t dtype_bytes = 2;
  uint64_t token_count = 0;
  uint64_t doc_count = 0;
  uint32_t vocab_size = 0;
  uint32_t end_of_text = kNoEndOfText;
  std::string tokenizer;
};

// A non-owning view of a token stream stored as uint16 or uint32. The storage
// (a TokenFile or a vector) must outlive the view.
class TokenView {
 public:
  TokenView() = default;
  TokenView(const void* data, size_t size, uint32_t dtype_bytes, std::string source)
      : data_(data), size_(size), dtype_bytes_(dtype_bytes), source_(std::move(source)) {}
  static TokenView of(const std::vector<uint32_t>& tokens, std::string source) {
    return TokenView(tokens.data(), tokens.size(), 4, std::move(source));
  }
  size_t size() const { return size_; }
  uint32_t operator[](size_t i) const {
    return dtype_bytes_ == 2 ? static_cast<const uint16_t*>(data_)[i] : static_cast<const uint32_t*>(data_)[i];
  }
  const std::string& source() const { return source_; }  // file name, for messages

 private:
  const void* data_ = nullptr;
  size_t size_ = 0;
  uint32_t dtype_bytes_ = 4;
  std::string source_;
};

// Writes a token file; dtype follows vocab_size. Throws DataError if the file
// cannot be written or a token is >= vocab_size.
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, uint64_t doc_count,
                      const std::string& tokenizer, uint32_t vocab_size, uint32_t end_of_text);

// A token file mapped read-only. Opening checks the header and every token id
// and throws DataError naming the file and the problem.
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;

  const std::string& path() const { return path_; }
  const TokenFileInfo& info() const { return info_; }
  size_t size() const { return info_.token_count; }
  uint32_t operator[](size_t i) const { return view()[i]; }
  TokenView view() const;

 private:
  void release();
  std::string path_;
  TokenFileInfo info_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
};

// Throws DataError unless the file was made with a vocab equal to model_vocab_size:
// "token file X was made by tokenizer gpt2 with vocab 50257 but model.vocab_size = 256".
void check_vocab(const TokenFile& file, int64_t model_vocab_size);

// data.tokenizer and data.tokenizer_dir against the tokenizer the file's header
// names. Throws ConfigError naming both unless the names agree and, when a
// directory is given, the tokenizer it holds has the file's vocab size and
// end-of-text id: e.g. 'data.tokenizer = "byte" but token file X was written by
// tokenizer "gpt2" (its header): expected data.tokenizer = "gpt2"'. A file written by
// a tokenizer.json (header hf:<hash>) needs data.tokenizer = "hf" and, with a
// directory, the very tokenizer.json (the same hash).
void check_tokenizer(const TokenFile& file, const std::string& tokenizer, const std::string& tokenizer_dir);

}  // namespace trident::data
