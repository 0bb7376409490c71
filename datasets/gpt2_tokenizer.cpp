// GPT-2 BPE: byte-to-unicode mapping, merge ranks, merge loop, and decoding.
// NOTE [JS agreement]: the merge loop follows the JS reference's quirks on purpose:
// ranks are looked up by the key "first,second"; among pairs of equal (lowest)
// rank the rightmost wins; the loop stops when the chosen pair has no rank.
#include "datasets/gpt2_tokenizer.h"

#include <cassert>
#include <fstream>
#include <limits>
#include <sstream>

#include "datasets/errors.h"
#include "datasets/json_vocab.h"
#include "datasets/pretokenize.h"
#include "datasets/unicode.h"

namespace trident::data {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("cannot open " + path + " (GPT-2 vocabulary; run scripts/setup_data.sh?)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split_ws(const std::string& line) {
  std::vector<std::string> parts;
  std::istringstream ss(line);
  for (std::string p; ss >> p;) parts.push_back(p);
  return parts;
}

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& dir) {
  byte_level_symbols(byte_to_symbol_);
  std::unordered_map<std::string, uint8_t> symbol_to_byte;
  for (int b = 0; b < 256; ++b) symbol_to_byte[byte_to_symbol_[b]] = static_cast<uint8_t>(b);

  const std::string enc_path = dir + "/encoder.json";
  auto entries = parse_json_vocab(read_file(enc_path), enc_path);
  id_to_bytes_.assign(entries.size(), std::string());
  std::vector<bool> seen(entries.size(), false);
  for (auto& [symbol, id] : entries) {
    if (id >= entries.size() || seen[id]) {
      throw DataError(enc_path + ": id " + std::to_string(id) + " of \"" + symbol + "\" is out of range or repeated (expected ids 0.." +
                      std::to_string(entries.size() - 1) + ", each once)");
    }
    seen[id] = true;
    // Map the symbol's code points back to raw bytes; "<|endoftext|>" is plain ASCII
    // whose characters are all printable, so it maps back to itself.
    std::string bytes;
    for (size_t pos = 0, len = 0; pos < symbol.size(); pos += len) {
      decode_utf8(symbol, pos, len);
      const auto it = symbol_to_byte.find(symbol.substr(pos, len));
      if (it == symbol_to_byte.end()) throw DataError(enc_path + ": symbol \"" + symbol + "\" has a character outside the byte map");
      bytes += static_cast<char>(it->second);
    }
    id_to_bytes_[id] = std::move(bytes);
    if (symbol == "<|endoftext|>") eot_ = id;
    encoder_.emplace(std::move(symbol), id);
  }

  // vocab.bpe: a version line, one merge "a b" per line, and a final empty line;
  // like the reference we drop the first and last lines.
  const std::string bpe_path = dir + "/vocab.bpe";
  std::vector<std::string> lines;
  std::istringstream in(read_file(bpe_path));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  if (lines.empty()) throw DataError(bpe_path + ": empty merges file");
  lines.push_back("");  // getline drops the text after the last '\n', which is the dropped last line
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    const auto parts = split_ws(lines[i]);
    if (parts.size() != 2) throw DataError(bpe_path + ":" + std::to_string(i + 1) + ": expected two symbols, got '" + lines[i] + "'");
    ranks_[parts[0] + "," + parts[1]] = static_cast<uint32_t>(i - 1);
  }
}

std::vector<uint32_t> Gpt2Tokenizer::bpe(const std::string& mapped) const {
  std::vector<std::string> word;
  for (size_t pos = 0, len = 0; pos < mapped.size(); pos += len) {
    decode_utf8(mapped, pos, len);
    word.push_back(mapped.substr(pos, len));
  }
  constexpr uint64_t kNoRank = std::numeric_limits<uint64_t>::max();
  while (word.size() > 1) {
    // The lowest-ranked adjacent pair; ties go to the rightmost (see NOTE above).
    uint64_t best = kNoRank;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = ranks_.find(word[i] + "," + word[i + 1]);
      const uint64_t rank = it == ranks_.end() ? kNoRank : it->second;
      if (rank <= best) best = rank, best_at = i;
    }
    if (best == kNoRank) break;
    const std::string first = word[best_at], second = word[best_at + 1];
    std::vector<std::string> merged;
    merged.reserve(word.size());
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(word[i++]);
      }
    }
    word.swap(merged);
  }
  std::vector<uint32_t> ids;
  ids.reserve(word.size());
  for (const auto& symbol : word) {
    const auto it = encoder_.find(symbol);
    // Every single byte is in the vocabulary and every merge result is too.
    if (it == encoder_.end()) throw DataError("gpt2 tokenizer: BPE produced \"" + symbol + "\", which is not in encoder.json");
    ids.push_back(it->second);
  }
  return ids;
}

std::vector<uint32_t> Gpt2Tokenizer::encode(const std::string& text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3);
  std::string mapped;
  for (const std::string_view piece : gpt2_pretokenize(text)) {
    mapped.clear();
    for (const char c : piece) mapped += byte_to_symbol_[static_cast<unsigned char>(c)];
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (const auto it = cache_.find(mapped); it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    std::vector<uint32_t> piece_ids = bpe(mapped);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCache) cache_.clear();
    cache_.emplace(mapped, std::move(piece_ids));
  }
  return ids;
}

std::string Gpt2Tokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string text;
  for (const uint32_t id : ids) {
    if (id >= id_to_bytes_.size()) {
      throw DataError("gpt2 tokenizer: token id " + std::to_string(id) + " out of range (vocab " + std::to_string(id_to_bytes_.size()) + ")");
    }
    text += id_to_bytes_[id];
  }
  return text;
}

}  // namespace trident::data
