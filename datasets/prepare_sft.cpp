// `trident data prepare --format prompt-completion`: JSONL examples -> a Megatron dataset and
// its loss-mask file, packed or not (prepare.h, NOTE [prompt-completion data]).
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/json.h"
#include "datasets/documents.h"
#include "datasets/errors.h"
#include "datasets/megatron_dataset.h"
#include "datasets/prepare.h"
#include "datasets/tokenizer.h"

namespace trident::data {

namespace {

struct Example {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> mask;
  bool text = false;  // a plain document
};

const std::string& string_member(const json::Value& v, const char* key, const std::string& where) {
  const json::Value* m = json::find(v, key);
  if (!m->is_string()) throw DataError(where + "member \"" + key + "\" is not a string");
  return json::as_string(*m, key);
}

// One line's example (NOTE [prompt-completion data]); `where` is "FILE:LINE: ".
Example parse_example(const std::string& line, const Tokenizer& tokenizer, uint32_t eod, const std::string& where) {
  json::Value v;
  try {
    v = json::parse(line, where + "line");
  } catch (const json::JsonError& e) {
    throw DataError(std::string(e.what()) + " (expected one JSON object per line)");
  }
  const bool prompt = json::find(v, "prompt") != nullptr, completion = json::find(v, "completion") != nullptr;
  const bool text = json::find(v, "text") != nullptr;
  if (!v.is_object() || (!prompt && !completion && !text))
    throw DataError(where + "expected an object with \"prompt\" and \"completion\" (or \"text\") members");
  if (prompt != completion)
    throw DataError(where + "has \"" + (prompt ? "prompt" : "completion") + "\" but no \"" +
                    (prompt ? "completion" : "prompt") + "\"");
  if (prompt && text) throw DataError(where + "has both \"text\" and \"prompt\"/\"completion\": expected one form");
  Example ex;
  ex.text = text;
  if (text) {
    ex.ids = tokenizer.encode(string_member(v, "text", where));
    if (ex.ids.empty()) throw DataError(where + "\"text\" is empty");
    ex.mask.assign(ex.ids.size(), 1);
  } else {
    ex.ids = tokenizer.encode(string_member(v, "prompt", where));
    ex.mask.assign(ex.ids.size(), 0);
    const std::vector<uint32_t> c = tokenizer.encode(string_member(v, "completion", where));
    if (c.empty()) throw DataError(where + "\"completion\" is empty: the example has nothing to learn");
    ex.ids.insert(ex.ids.end(), c.begin(), c.end());
    ex.mask.resize(ex.ids.size(), 1);
  }
  ex.ids.push_back(eod);
  ex.mask.push_back(1);
  return ex;
}

// Writes examples as sequences, packed into pack_seq_len tokens when it is > 0.
class Packer {
 public:
  Packer(const PrepareOptions& o, uint32_t vocab, uint32_t eod, PrepareSummary& s)
      : o_(o), eod_(eod), s_(s), writer_(o.output_prefix, vocab) {}

  void add(Example ex, const std::string& where) {
    const auto L = static_cast<size_t>(o_.pack_seq_len);
    if (L == 0) return write(ex.ids, ex.mask);
    if (ex.ids.size() > L) {
      if (o_.overlong != "truncate")
        throw DataError(where + "the example's " + std::to_string(ex.ids.size()) + " tokens do not fit a packed "
                        "sequence of " + std::to_string(L) + " (--pack-seq-len): --overlong truncate cuts it");
      ex.ids.resize(L);
      ex.mask.resize(L);
      ex.ids.back() = eod_;
      ++s_.truncated;
    }
    if (ids_.size() + ex.ids.size() > L) close();
    ids_.insert(ids_.end(), ex.ids.begin(), ex.ids.end());
    mask_.insert(mask_.end(), ex.mask.begin(), ex.mask.end());
  }

  // Pads and writes the open sequence, then PREFIX.idx and PREFIX.lossmask.
  void finish() {
    if (!ids_.empty()) close();
    writer_.finish();
    write_loss_mask_file(o_.output_prefix, all_mask_);
  }

 private:
  void close() {
    const auto L = static_cast<size_t>(o_.pack_seq_len);
    s_.pad_tokens += L - ids_.size();
    ids_.resize(L, eod_);
    mask_.resize(L, 0);
    write(ids_, mask_);
    ids_.clear();
    mask_.clear();
  }
  void write(const std::vector<uint32_t>& ids, const std::vector<uint8_t>& mask) {
    writer_.add_document(ids);
    all_mask_.insert(all_mask_.end(), mask.begin(), mask.end());
    ++s_.sequences;
    s_.train_tokens += ids.size();
  }

  const PrepareOptions& o_;
  uint32_t eod_;
  PrepareSummary& s_;
  MegatronWriter writer_;
  std::vector<uint32_t> ids_;
  std::vector<uint8_t> mask_, all_mask_;
};

void check_options(const PrepareOptions& o) {
  if (o.output_prefix.empty()) throw DataError("an output prefix is required");
  if (o.output_format != "megatron")
    throw DataError("--format prompt-completion writes a Megatron dataset and its loss mask: it needs "
                    "--output-format megatron, got " + o.output_format);
  if (o.pack_seq_len < 0 || o.pack_seq_len == 1)
    throw DataError("--pack-seq-len " + std::to_string(o.pack_seq_len) + ": expected 0 (no packing) or at least 2");
  if (o.overlong != "refuse" && o.overlong != "truncate")
    throw DataError("--overlong " + o.overlong + ": expected refuse or truncate");
}

}  // namespace

PrepareSummary prepare_prompt_completion(const PrepareOptions& o) {
  check_options(o);
  const auto tokenizer = make_tokenizer(o.tokenizer, o.tokenizer_dir);
  const auto own = tokenizer->end_of_text();
  if (o.eod_token < 0 && !own)
    throw DataError("--format prompt-completion ends every example with an end-of-document token, and --tokenizer " +
                    o.tokenizer + " has none: give --eod-token ID");
  if (o.eod_token >= static_cast<int64_t>(tokenizer->vocab_size()))
    throw DataError("--eod-token " + std::to_string(o.eod_token) + " is not below the tokenizer's vocabulary of " +
                    std::to_string(tokenizer->vocab_size()));
  const auto eod = o.eod_token >= 0 ? static_cast<uint32_t>(o.eod_token) : *own;
  const auto files = list_documents(o.inputs, "jsonl");
  const std::filesystem::path parent = std::filesystem::path(o.output_prefix).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  PrepareSummary s;
  Packer packer(o, tokenizer->vocab_size(), eod, s);
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw DataError("cannot read input file " + file);
    s.input_bytes += std::filesystem::file_size(file);
    std::string line;
    for (uint64_t n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // a blank line holds no example
      Example ex = parse_example(line, *tokenizer, eod, file + ":" + std::to_string(n) + ": ");
      ++(ex.text ? s.texts : s.examples);
      uint64_t counted = 0;
      for (uint8_t m : ex.mask) counted += m;
      s.loss_tokens += counted;
      s.prompt_tokens += ex.ids.size() - counted;
      s.text_bytes += line.size();
      packer.add(std::move(ex), file + ":" + std::to_string(n) + ": ");
    }
  }
  if (s.examples + s.texts == 0) throw DataError("no examples found in the inputs");
  packer.finish();
  s.train_docs = s.sequences;
  s.files_written = {o.output_prefix + ".bin", o.output_prefix + ".idx", loss_mask_path(o.output_prefix)};
  return s;
}

}  // namespace trident::data
