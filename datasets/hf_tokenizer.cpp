// tokenizer.json reading (what is accepted, what is refused) and encoding:
// added tokens, then the pre-tokenizer's split, then byte-level BPE.
// NOTE [tokenizers agreement]: the steps follow `tokenizers` (0.2x):
//   1. added tokens with normalized = false are cut out of the text, leftmost-longest;
//   2. in what is left, those with normalized = true (there is no normalizer);
//   3. each remaining stretch is split by the pre-tokenizer's pattern and each piece
//      is mapped byte by byte to the GPT-2 byte alphabet;
//   4. BPE merges the lowest-ranked adjacent pair, the leftmost among equals, until
//      no pair has a rank (with ignore_merges, a piece that is a whole vocabulary
//      entry is that entry).
#include "datasets/hf_tokenizer.h"

#include <cstdio>
#include <fstream>
#include <functional>
#include <queue>
#include <sstream>

#include "datasets/errors.h"
#include "datasets/unicode.h"
#include "core/json.h"

namespace trident::data {
namespace {

constexpr int64_t kMaxId = 1 << 24;  // ids above this are a corrupt file, not a vocabulary

std::string fnv1a_hex(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

const std::string& type_of(const json::Value& v, const std::string& what) {
  return json::as_string(json::at(v, "type", what), what + " type");
}

bool flag(const json::Value& v, const std::string& key, bool dflt, const std::string& what) {
  const json::Value* f = json::find(v, key);
  return f == nullptr || f->is_null() ? dflt : json::as_bool(*f, what + " " + key);
}

// Null, absent, or (for strings) "" count as unset.
bool is_unset(const json::Value* v) {
  return v == nullptr || v->is_null() || (v->is_string() && json::as_string(*v, "").empty());
}

// A ByteLevel pre-tokenizer; returns its use_regex.
bool read_byte_level(const json::Value& pt, const std::string& what) {
  if (json::as_bool(json::at(pt, "add_prefix_space", what), what + " add_prefix_space")) {
    throw DataError(what + ": ByteLevel add_prefix_space = true is not supported (Trident reads it false)");
  }
  return flag(pt, "use_regex", true, what);
}

SplitPattern read_split(const json::Value& pt, const std::string& what) {
  const json::Value& pattern = json::at(pt, "pattern", what);
  const json::Value* regex = json::find(pattern, "Regex");
  if (regex == nullptr) {
    throw DataError(what + ": Split with a String pattern " + json::dump(pattern) +
                    " is not supported (Trident implements the Regex patterns of GPT-2, Llama 3 and Qwen2)");
  }
  const std::string& text = json::as_string(*regex, what + " pattern Regex");
  const auto known = recognise_split_pattern(text);
  if (!known) {
    throw DataError(what + ": Split pattern " + json::quote(text) +
                    " is not one Trident implements (GPT-2's, Llama 3's or Qwen2's, exactly)");
  }
  const std::string& behavior = json::as_string(json::at(pt, "behavior", what), what + " behavior");
  if (behavior != "Isolated") throw DataError(what + ": Split behavior " + behavior + " is not supported (expected Isolated)");
  if (flag(pt, "invert", false, what)) throw DataError(what + ": Split invert = true is not supported");
  return *known;
}

// The split pattern of a byte-level pre-tokenizer: ByteLevel (its own GPT-2 regex
// when use_regex), or Sequence[Split(pattern), ByteLevel(use_regex = false)].
std::optional<SplitPattern> read_pre_tokenizer(const json::Value* pt, const std::string& source) {
  const std::string what = source + ": pre_tokenizer";
  if (pt == nullptr || pt->is_null()) {
    throw DataError(what + " is null; Trident reads byte-level BPE tokenizers (a ByteLevel pre-tokenizer)");
  }
  std::vector<const json::Value*> steps;
  if (type_of(*pt, what) == "Sequence") {
    for (const auto& p : json::as_array(json::at(*pt, "pretokenizers", what), what + " pretokenizers"))
      steps.push_back(&p);
  } else {
    steps.push_back(pt);
  }
  std::optional<SplitPattern> split;
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string& type = type_of(*steps[i], what);
    const bool last = i + 1 == steps.size();
    if (type == "Split" && !split && !last) {
      split = read_split(*steps[i], what);
    } else if (type == "ByteLevel" && last) {
      const bool use_regex = read_byte_level(*steps[i], what);
      if (use_regex && split) throw DataError(what + ": ByteLevel use_regex = true after a Split is not supported");
      return use_regex ? std::optional(SplitPattern::kGpt2) : split;
    } else {
      throw DataError(what + " " + type +
                      (type == "Split" || type == "ByteLevel" ? " in this position" : "") +
                      " is not supported (Trident reads ByteLevel, or Sequence [Split, ByteLevel])");
    }
  }
  throw DataError(what + " has no ByteLevel step; Trident reads byte-level BPE tokenizers only");
}

void check_unsupported_parts(const json::Value& doc, const std::string& source) {
  const json::Value* normalizer = json::find(doc, "normalizer");
  if (normalizer != nullptr && !normalizer->is_null()) {
    throw DataError(source + ": normalizer " + type_of(*normalizer, source + ": normalizer") +
                    " is not supported (Trident applies no normalizer)");
  }
  for (const char* key : {"truncation", "padding"}) {
    const json::Value* v = json::find(doc, key);
    if (v != nullptr && !v->is_null()) throw DataError(source + ": " + key + " is set; Trident encodes without it (expected null)");
  }
  const json::Value* decoder = json::find(doc, "decoder");
  if (decoder != nullptr && !decoder->is_null() && type_of(*decoder, source + ": decoder") != "ByteLevel") {
    throw DataError(source + ": decoder " + type_of(*decoder, source + ": decoder") + " is not supported (expected ByteLevel)");
  }
}

// "an array", "a string", ...: what a JSON document is, for an error naming it.
std::string json_kind(const json::Value& v) {
  if (v.is_array()) return "an array";
  if (v.is_string()) return "a string";
  if (v.is_number()) return "a number";
  if (v.is_null()) return "null";
  return v.is_object() ? "an object" : "a boolean";
}

// One merge of tokenizer.json: "a b" (older files) or ["a", "b"] (newer ones).
std::pair<std::string, std::string> read_merge(const json::Value& m, const std::string& what) {
  if (m.is_array()) {
    const auto& parts = json::as_array(m, what);
    if (parts.size() != 2) throw DataError(what + ": expected a pair [\"a\", \"b\"], got " + json::dump(m));
    return {json::as_string(parts[0], what), json::as_string(parts[1], what)};
  }
  const std::string& line = json::as_string(m, what + " (a string \"a b\" or a pair [\"a\", \"b\"])");
  const size_t space = line.find(' ');
  if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
    throw DataError(what + ": expected two symbols separated by one space, got " + json::quote(line));
  }
  return {line.substr(0, space), line.substr(space + 1)};
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& json_text, const std::string& source) : name_("hf:" + fnv1a_hex(json_text)) {
  try {
    const json::Value doc = json::parse(json_text, source);
    if (!doc.is_object()) {
      // Asked for its members, `[]` would read as a tokenizer without a pre_tokenizer.
      throw DataError(source + ": the file holds " + json_kind(doc) +
                      ", not a JSON object (a Hugging Face tokenizer.json is one object with model and pre_tokenizer)");
    }
    check_unsupported_parts(doc, source);
    pattern_ = read_pre_tokenizer(json::find(doc, "pre_tokenizer"), source);
    read_model(json::at(doc, "model", source), source);
    read_added_tokens(doc, source);
  } catch (const json::JsonError& e) {
    throw DataError(e.what());
  }
}

std::unique_ptr<HfTokenizer> HfTokenizer::from_dir(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("cannot open " + path + " (--tokenizer hf reads a Hugging Face tokenizer.json in --tokenizer-dir)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::make_unique<HfTokenizer>(ss.str(), path);
}

void HfTokenizer::read_model(const json::Value& model, const std::string& source) {
  const std::string what = source + ": model";
  const std::string& type = type_of(model, what);
  if (type != "BPE") {
    throw DataError(what + " " + type + " is not supported (Trident reads byte-level BPE; " +
                    (type == "Unigram" ? "Unigram is SentencePiece's model)" : "expected type BPE)"));
  }
  const json::Value* dropout = json::find(model, "dropout");
  if (dropout != nullptr && !dropout->is_null() && json::as_double(*dropout, what + " dropout") != 0.0) {
    throw DataError(what + ": BPE dropout " + json::dump(*dropout) + " is not supported (expected null)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json::Value* v = json::find(model, key); !is_unset(v))
      throw DataError(what + ": " + key + " " + json::dump(*v) + " is not supported (expected null)");
  }
  if (flag(model, "byte_fallback", false, what)) throw DataError(what + ": byte_fallback = true is not supported");
  fuse_unk_ = flag(model, "fuse_unk", false, what);
  ignore_merges_ = flag(model, "ignore_merges", false, what);

  byte_level_symbols(byte_symbol_);
  std::unordered_map<std::string, uint8_t> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[byte_symbol_[b]] = static_cast<uint8_t>(b);
  for (const auto& [symbol, value] : json::as_object(json::at(model, "vocab", what), what + " vocab")) {
    const int64_t id = json::as_int(value, what + " vocab id of " + json::quote(symbol));
    if (id < 0 || id >= kMaxId) throw DataError(what + ": vocab id " + std::to_string(id) + " of " + json::quote(symbol) + " is out of range");
    if (static_cast<size_t>(id) >= id_to_bytes_.size()) id_to_bytes_.resize(id + 1), id_used_.resize(id + 1);
    if (id_used_[id] || !vocab_.emplace(symbol, static_cast<uint32_t>(id)).second) {
      throw DataError(what + ": vocab id " + std::to_string(id) + " or symbol " + json::quote(symbol) + " appears twice");
    }
    id_used_[id] = true;
    // Back to raw bytes; a character outside the byte alphabet stays as its UTF-8.
    std::string bytes;
    for (size_t pos = 0, len = 0; pos < symbol.size(); pos += len) {
      decode_utf8(symbol, pos, len);
      const auto it = byte_of.find(symbol.substr(pos, len));
      bytes += it == byte_of.end() ? symbol.substr(pos, len) : std::string(1, static_cast<char>(it->second));
    }
    id_to_bytes_[id] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(byte_symbol_[b]);
    byte_id_[b] = it == vocab_.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
  }
  if (const json::Value* unk = json::find(model, "unk_token"); !is_unset(unk)) {
    const auto it = vocab_.find(json::as_string(*unk, what + " unk_token"));
    if (it == vocab_.end()) throw DataError(what + ": unk_token " + json::dump(*unk) + " is not in the vocab");
    unk_ = it->second;
  }
  const auto& merges = json::as_array(json::at(model, "merges", what), what + " merges");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string mwhat = what + " merges[" + std::to_string(rank) + "]";
    const auto [a, b] = read_merge(merges[rank], mwhat);
    const auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end()) {
      throw DataError(mwhat + ": " + json::quote(a) + ", " + json::quote(b) + " or their merge is not in the vocab");
    }
    // A repeated pair keeps its last rank, as tokenizers' map does.
    merges_[(static_cast<uint64_t>(ia->second) << 32) | ib->second] = Merge{static_cast<uint32_t>(rank), iab->second};
  }
}

void HfTokenizer::read_added_tokens(const json::Value& doc, const std::string& source) {
  const json::Value* list = json::find(doc, "added_tokens");
  if (list == nullptr || list->is_null()) return;
  for (const auto& t : json::as_array(*list, source + ": added_tokens")) {
    const std::string what = source + ": added token";
    const std::string& content = json::as_string(json::at(t, "content", what), what + " content");
    const int64_t id = json::as_int(json::at(t, "id", what), what + " id");
    if (id < 0 || id >= kMaxId) throw DataError(what + " " + json::quote(content) + ": id " + std::to_string(id) + " is out of range");
    for (const char* key : {"single_word", "lstrip", "rstrip"}) {
      if (flag(t, key, false, what)) {
        throw DataError(what + " " + json::quote(content) + ": " + key + " = true is not supported (expected false)");
      }
    }
    if (content.empty()) throw DataError(what + " " + std::to_string(id) + " has empty content");
    const bool special = flag(t, "special", false, what);
    added_.push_back(AddedToken{content, static_cast<uint32_t>(id), flag(t, "normalized", !special, what)});
    if (static_cast<size_t>(id) >= id_to_bytes_.size()) id_to_bytes_.resize(id + 1), id_used_.resize(id + 1);
    id_to_bytes_[id] = content;
    id_used_[id] = true;
    if (special && (content == "<|endoftext|>" || content == "<|end_of_text|>") && !eot_) eot_ = static_cast<uint32_t>(id);
  }
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_first_[added_[i].normalized][static_cast<unsigned char>(added_[i].content[0])].push_back(static_cast<uint32_t>(i));
  }
}

std::vector<uint32_t> HfTokenizer::bpe(std::string_view piece) const {
  if (ignore_merges_) {
    std::string mapped;
    for (const char c : piece) mapped += byte_symbol_[static_cast<unsigned char>(c)];
    if (const auto it = vocab_.find(mapped); it != vocab_.end()) return {it->second};
  }
  std::vector<uint32_t> word;
  word.reserve(piece.size());
  bool last_unk = false;
  for (const char c : piece) {
    const int64_t id = byte_id_[static_cast<unsigned char>(c)];
    if (id >= 0) {
      word.push_back(static_cast<uint32_t>(id));
      last_unk = false;
    } else if (unk_) {
      if (!(fuse_unk_ && last_unk)) word.push_back(*unk_);
      last_unk = true;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(c));
      throw DataError(name_ + ": byte " + hex + " has no symbol in the vocab and the model has no unk_token");
    }
  }
  merge_word(word);
  return word;
}

// NOTE [BPE by heap]: as tokenizers does it (word.rs, merge_all), in O(n log n) so a
// long piece (a run of spaces or of '=') is not quadratic: a min-heap of candidate
// merges keyed (rank, position); a popped candidate whose left symbol is gone, or whose
// pair is no longer the one it was pushed for, is skipped. It merges the lowest-ranked
// adjacent pair, the leftmost among equals, until none has a rank.
void HfTokenizer::merge_word(std::vector<uint32_t>& word) const {
  if (word.size() < 2) return;
  struct Candidate {
    uint32_t rank;
    size_t pos;
    uint32_t left, right;  // the pair it was pushed for
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const size_t n = word.size();
  std::vector<size_t> prev(n), next(n);  // linked list over live symbols; n = none
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) prev[i] = i == 0 ? n : i - 1, next[i] = i + 1;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](size_t pos) {
    if (pos >= n || next[pos] >= n) return;
    const auto it = merges_.find((static_cast<uint64_t>(word[pos]) << 32) | word[next[pos]]);
    if (it != merges_.end()) heap.push(Candidate{it->second.rank, pos, word[pos], word[next[pos]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.pos] || next[c.pos] >= n || word[c.pos] != c.left || word[next[c.pos]] != c.right) continue;
    const size_t right = next[c.pos];
    word[c.pos] = merges_.at((static_cast<uint64_t>(c.left) << 32) | c.right).id;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] < n) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) word[out++] = word[i];
  }
  word.resize(out);
}

std::vector<std::string_view> HfTokenizer::pieces_of(std::string_view text) const {
  if (pattern_) return hf_pretokenize(text, *pattern_);
  if (text.empty()) return {};
  return {text};
}

void HfTokenizer::encode_plain(std::string_view text, std::vector<uint32_t>& ids) const {
  for (const std::string_view piece : pieces_of(text)) {
    const std::string key(piece);
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (const auto it = cache_.find(key); it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    std::vector<uint32_t> piece_ids = bpe(piece);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCache) cache_.clear();
    cache_.emplace(key, std::move(piece_ids));
  }
}

void HfTokenizer::split_added(std::string_view text, bool normalized, std::vector<uint32_t>& ids) const {
  size_t gap = 0;  // start of the text not yet emitted
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* best = nullptr;  // the longest token starting at pos
    for (const uint32_t i : added_by_first_[normalized][static_cast<unsigned char>(text[pos])]) {
      const AddedToken& t = added_[i];
      if ((best == nullptr || t.content.size() > best->content.size()) && text.compare(pos, t.content.size(), t.content) == 0) {
        best = &t;
      }
    }
    if (best == nullptr) {
      ++pos;
      continue;
    }
    const std::string_view before = text.substr(gap, pos - gap);
    normalized ? encode_plain(before, ids) : split_added(before, true, ids);
    ids.push_back(best->id);
    pos += best->content.size();
    gap = pos;
  }
  const std::string_view rest = text.substr(gap);
  normalized ? encode_plain(rest, ids) : split_added(rest, true, ids);
}

std::vector<std::string> HfTokenizer::pre_tokenize(const std::string& text) const {
  const std::vector<std::string_view> pieces = pieces_of(text);
  std::vector<std::string> mapped;
  mapped.reserve(pieces.size());
  for (const std::string_view piece : pieces) {
    std::string& m = mapped.emplace_back();
    for (const char c : piece) m += byte_symbol_[static_cast<unsigned char>(c)];
  }
  return mapped;
}

std::vector<uint32_t> HfTokenizer::encode(const std::string& text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3);
  split_added(text, false, ids);
  return ids;
}

std::string HfTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string text;
  for (const uint32_t id : ids) {
    if (id >= id_to_bytes_.size() || !id_used_[id]) {
      throw DataError(name_ + ": token id " + std::to_string(id) + " is not in the vocabulary (vocab size " +
                      std::to_string(id_to_bytes_.size()) + ")");
    }
    text += id_to_bytes_[id];
  }
  return text;
}

}  // namespace trident::data
