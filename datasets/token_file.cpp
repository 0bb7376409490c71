// Token file writer and the mmap-backed reader (see NOTE [token file format]).
#include "datasets/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "datasets/errors.h"
#include "datasets/tokenizer.h"
#include "core/errors.h"
#include "core/escape.h"

namespace trident::data {
namespace {

constexpr char kMagic[8] = {'T', 'R', 'I', 'D', 'T', 'O', 'K', '\0'};
constexpr size_t kNameBytes = 32;

template <typename T>
void put(unsigned char* header, size_t offset, T value) {
  std::memcpy(header + offset, &value, sizeof(T));
}
template <typename T>
T get(const unsigned char* header, size_t offset) {
  T value;
  std::memcpy(&value, header + offset, sizeof(T));
  return value;
}

// Whether a header's tokenizer name is one make_tokenizer's tokenizers write:
// byte, gpt2, or hf:<16 hex digits of the tokenizer.json's hash>.
bool known_tokenizer_name(const std::string& name) {
  if (name == "byte" || name == "gpt2") return true;
  return name.size() == 19 && name.rfind("hf:", 0) == 0 &&
         name.find_first_not_of("0123456789abcdef", 3) == std::string::npos;
}

}  // namespace

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, uint64_t doc_count,
                      const std::string& tokenizer, uint32_t vocab_size, uint32_t end_of_text) {
  if (tokenizer.empty() || tokenizer.size() >= kNameBytes) {
    throw DataError(path + ": tokenizer name '" + tokenizer + "' must have 1 to 31 characters");
  }
  const uint32_t dtype = vocab_size <= 65536 ? 2 : 4;
  unsigned char header[kTokenFileHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof(kMagic));
  put<uint32_t>(header, 8, kTokenFileVersion);
  put<uint32_t>(header, 12, dtype);
  put<uint64_t>(header, 16, tokens.size());
  put<uint64_t>(header, 24, doc_count);
  put<uint32_t>(header, 32, vocab_size);
  put<uint32_t>(header, 36, end_of_text);
  std::memcpy(header + 40, tokenizer.data(), tokenizer.size());

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw DataError("cannot create token file " + path + ": " + std::strerror(errno));
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  std::vector<uint16_t> narrow;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      throw DataError(path + ": token " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                      " is >= vocab size " + std::to_string(vocab_size));
    }
  }
  if (dtype == 2) {
    narrow.assign(tokens.begin(), tokens.end());
    out.write(reinterpret_cast<const char*>(narrow.data()), static_cast<std::streamsize>(narrow.size() * 2));
  } else {
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 4));
  }
  out.close();
  if (!out) throw DataError("error writing token file " + path);
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError("cannot open token file " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError("cannot stat token file " + path + ": " + std::strerror(err));
  }
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < kTokenFileHeaderBytes) {
    ::close(fd);
    throw DataError("token file " + path + " is truncated: " + std::to_string(file_bytes) + " bytes, shorter than the " +
                    std::to_string(kTokenFileHeaderBytes) + "-byte header");
  }
  map_ = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw DataError("cannot mmap token file " + path + ": " + std::strerror(map_err));
  }
  map_bytes_ = file_bytes;
  try {
    const auto* h = static_cast<const unsigned char*>(map_);
    if (std::memcmp(h, kMagic, sizeof(kMagic)) != 0) {
      throw DataError("token file " + path + " has a wrong magic (not a trident token file; expected \"TRIDTOK\")");
    }
    info_.version = get<uint32_t>(h, 8);
    if (info_.version != kTokenFileVersion) {
      throw DataError("token file " + path + " has version " + std::to_string(info_.version) + " (expected " +
                      std::to_string(kTokenFileVersion) + ")");
    }
    info_.dtype_bytes = get<uint32_t>(h, 12);
    if (info_.dtype_bytes != 2 && info_.dtype_bytes != 4) {
      throw DataError("token file " + path + " has " + std::to_string(info_.dtype_bytes) +
                      " bytes per token (expected 2 or 4)");
    }
    info_.token_count = get<uint64_t>(h, 16);
    info_.doc_count = get<uint64_t>(h, 24);
    info_.vocab_size = get<uint32_t>(h, 32);
    info_.end_of_text = get<uint32_t>(h, 36);
    const char* name = reinterpret_cast<const char*>(h + 40);
    info_.tokenizer.assign(name, strnlen(name, kNameBytes));
    if (info_.tokenizer.empty() || escaped_bytes(info_.tokenizer) != info_.tokenizer) {
      throw DataError("token file " + path + ": the header's tokenizer name \"" + escaped_bytes(info_.tokenizer) +
                      "\" is not a name (empty, or bytes other than printable ASCII): the header is corrupt");
    }
    // Compare by division so a corrupt huge count cannot overflow.
    const uint64_t payload = file_bytes - kTokenFileHeaderBytes;
    if (payload % info_.dtype_bytes != 0 || payload / info_.dtype_bytes != info_.token_count) {
      const uint64_t expected = kTokenFileHeaderBytes + info_.token_count * info_.dtype_bytes;
      throw DataError("token file " + path + " is truncated or corrupt: header says " +
                      std::to_string(info_.token_count) + " tokens (" + std::to_string(expected) +
                      " bytes) but the file has " + std::to_string(file_bytes) + " bytes");
    }
    const TokenView v = view();
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] >= info_.vocab_size) {
        throw DataError("token file " + path + " has token id " + std::to_string(v[i]) + " at index " +
                        std::to_string(i) + ", not below its vocab size " + std::to_string(info_.vocab_size));
      }
    }
  } catch (...) {
    release();
    throw;
  }
}

TokenFile::~TokenFile() { release(); }

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)), info_(std::move(other.info_)), map_(other.map_), map_bytes_(other.map_bytes_) {
  other.map_ = nullptr;
  other.map_bytes_ = 0;
}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    info_ = std::move(other.info_);
    map_ = other.map_;
    map_bytes_ = other.map_bytes_;
    other.map_ = nullptr;
    other.map_bytes_ = 0;
  }
  return *this;
}

void TokenFile::release() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

TokenView TokenFile::view() const {
  const auto* tokens = static_cast<const unsigned char*>(map_) + kTokenFileHeaderBytes;
  return TokenView(tokens, info_.token_count, info_.dtype_bytes, path_);
}

void check_vocab(const TokenFile& file, int64_t model_vocab_size) {
  if (static_cast<int64_t>(file.info().vocab_size) != model_vocab_size) {
    throw DataError("token file " + file.path() + " was made by tokenizer " + file.info().tokenizer + " with vocab " +
                    std::to_string(file.info().vocab_size) + " but model.vocab_size = " +
                    std::to_string(model_vocab_size));
  }
}

void check_tokenizer(const TokenFile& file, const std::string& tokenizer, const std::string& tokenizer_dir) {
  const TokenFileInfo& info = file.info();
  // Suggesting an unknown name as data.tokenizer would send the user after a tokenizer that does not exist.
  if (!known_tokenizer_name(info.tokenizer)) {
    throw DataError("token file " + file.path() + ": the header names tokenizer \"" + info.tokenizer +
                    "\", none Trident has (byte, gpt2 or hf:<16 hex digits>): the header is corrupt, or the file "
                    "was not written by `trident data prepare`");
  }
  // A Hugging Face tokenizer.json is recorded as hf:<hash of the file> (hf_tokenizer.h).
  const bool hf = info.tokenizer.rfind("hf:", 0) == 0;
  const std::string expected = hf ? "hf" : info.tokenizer;
  if (tokenizer != expected) {
    throw ConfigError("data.tokenizer = \"" + tokenizer + "\" but token file " + file.path() +
                      " was written by tokenizer \"" + info.tokenizer + "\" (its header): expected data.tokenizer = \"" +
                      expected + "\"");
  }
  if (tokenizer_dir.empty()) return;
  const auto tok = make_tokenizer(tokenizer, tokenizer_dir);  // DataError when the directory has no vocabulary
  if (hf && tok->name() != info.tokenizer) {
    throw ConfigError("data.tokenizer_dir = \"" + tokenizer_dir + "\" holds tokenizer " + tok->name() + " but token file " +
                      file.path() + " was written by " + info.tokenizer +
                      " (its header): expected the folder of the tokenizer.json that wrote it");
  }
  const uint32_t eot = tok->end_of_text().value_or(kNoEndOfText);
  if (tok->vocab_size() != info.vocab_size || eot != info.end_of_text) {
    throw ConfigError("data.tokenizer_dir = \"" + tokenizer_dir + "\" holds a " + tokenizer + " vocabulary of " +
                      std::to_string(tok->vocab_size()) + " tokens (end of text " + std::to_string(eot) +
                      ") but token file " + file.path() + " was written with vocab " + std::to_string(info.vocab_size) +
                      " (end of text " + std::to_string(info.end_of_text) +
                      "): expected the directory of the tokenizer that wrote it");
  }
}

}  // namespace trident::data
