// Document listing, the deterministic train/validation split, batched tokenizing
// on several threads, and file writing.
#include "datasets/prepare.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "datasets/brown.h"
#include "datasets/errors.h"
#include "datasets/megatron_dataset.h"
#include "datasets/token_file.h"
#include "datasets/tokenizer.h"
#include "core/json.h"

namespace trident::data {

namespace fs = std::filesystem;

std::vector<std::string> list_documents(const std::vector<std::string>& inputs, const std::string& format) {
  if (format != "text" && format != "brown" && format != "jsonl")
    throw DataError("unknown format '" + format + "' (expected text, brown or jsonl)");
  std::vector<std::string> docs;
  for (const auto& input : inputs) {
    std::error_code ec;
    if (fs::is_regular_file(input, ec)) {
      docs.push_back(input);
    } else if (fs::is_directory(input, ec)) {
      std::vector<std::string> files;
      for (const auto& entry : fs::directory_iterator(input)) {
        if (!entry.is_regular_file()) continue;
        const std::string name = entry.path().filename().string();
        if (format == "brown" ? is_brown_document_name(name) : name[0] != '.') files.push_back(entry.path().string());
      }
      std::sort(files.begin(), files.end());
      docs.insert(docs.end(), files.begin(), files.end());
    } else {
      throw DataError("input " + input + " is neither a file nor a folder");
    }
  }
  if (docs.empty()) throw DataError("no input documents found (format " + format + ")");
  return docs;
}

bool is_validation_document(uint64_t index, double val_fraction) {
  return std::floor(static_cast<double>(index + 1) * val_fraction) > std::floor(static_cast<double>(index) * val_fraction);
}

namespace {

std::string read_document(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("cannot read input document " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One document of a batch: its text (a JSONL line still raw) and where it came from.
struct Pending {
  std::string text;
  size_t file = 0;       // index into the file list
  uint64_t line = 0;     // jsonl: 1-based line number
};

struct Done {
  std::vector<uint32_t> ids;
  uint64_t text_bytes = 0;
  std::string error;     // jsonl: what is wrong with the line
  bool fatal = false;    // an error --skip-bad-lines does not skip (not UTF-8, not Brown)
};

// Offset of the first byte that does not start or continue a well-formed UTF-8
// sequence (overlong forms, surrogates and code points past U+10FFFF included), or npos.
size_t first_invalid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return i;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string::npos;
}

// A tagged Brown file has word/tag tokens; plain text has none, or nearly none
// (a URL or a date). Empty text counts as tagged (nothing to convert).
bool looks_tagged(const std::string& text) {
  size_t tokens = 0, tagged = 0;
  for (size_t i = 0; i < text.size();) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const size_t start = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i == start) break;
    ++tokens;
    const size_t slash = text.rfind('/', i - 1);
    if (slash != std::string::npos && slash >= start && slash + 1 < i) ++tagged;
  }
  return tokens == 0 || 2 * tagged > tokens;
}

// Reads the inputs in order, a batch of about kBatchBytes at a time.
class BatchReader {
 public:
  static constexpr uint64_t kBatchBytes = 16ull << 20;
  BatchReader(const std::vector<std::string>& files, bool jsonl) : files_(files), jsonl_(jsonl) {}

  // Fills `out` with the next documents; false when the inputs are exhausted.
  bool next(std::vector<Pending>& out, uint64_t& bytes_read) {
    out.clear();
    uint64_t bytes = 0;
    while (bytes < kBatchBytes && file_ < files_.size()) {
      if (!jsonl_) {
        Pending p{read_document(files_[file_]), file_, 0};
        bytes += p.text.size();
        out.push_back(std::move(p));
        ++file_;
        continue;
      }
      if (!in_.is_open()) {
        in_.open(files_[file_], std::ios::binary);
        if (!in_) throw DataError("cannot read input file " + files_[file_]);
        line_ = 0;
      }
      std::string line;
      if (std::getline(in_, line)) {
        ++line_;
        bytes += line.size() + 1;
        out.push_back(Pending{std::move(line), file_, line_});
      } else {
        in_.close();
        ++file_;
      }
    }
    bytes_read += bytes;
    return !out.empty();
  }

 private:
  const std::vector<std::string>& files_;
  bool jsonl_;
  size_t file_ = 0;
  std::ifstream in_;
  uint64_t line_ = 0;
};

// Tokenizes batch[i] into done[i] for every i, o.threads threads taking documents
// in turn from a shared counter, and the results land by index, so their order is
// the input's. The threads share one tokenizer: encode is const and its piece cache
// is behind a mutex (gpt2, hf), and one shared cache does each distinct piece's BPE
// once (a tokenizer per thread did it once per thread: measured slower on 2 threads
// than on 1 for gpt2 on the Brown corpus, and faster once shared).
void tokenize_batch(const PrepareOptions& o, const std::vector<std::string>& files, const Tokenizer& tokenizer,
                    std::vector<Pending>& batch, std::vector<Done>& done) {
  done.assign(batch.size(), Done{});
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < batch.size(); i = next++) {
      Pending& p = batch[i];
      std::string text;
      if (o.format == "jsonl") {
        try {
          text = jsonl_document(p.text, o.json_key, files[p.file], p.line);
        } catch (const DataError& e) {
          done[i].error = e.what();
          continue;
        }
      } else {
        if (o.format == "brown" && !looks_tagged(p.text)) {
          done[i].error = files[p.file] + ": not a tagged Brown corpus file (no word/tag token): expected --format text";
          done[i].fatal = true;
          continue;
        }
        text = o.format == "brown" ? brown_to_text(p.text) : std::move(p.text);
      }
      // The byte tokenizer's ids are the bytes; gpt2 and hf read text, and
      // bytes that are not UTF-8 there are most likely a file in another encoding.
      if (o.tokenizer != "byte" && !o.allow_invalid_utf8) {
        const size_t bad = first_invalid_utf8(text);
        if (bad != std::string::npos) {
          done[i].error = files[p.file] + (o.format == "jsonl" ? ":" + std::to_string(p.line) : "") +
                          ": not UTF-8 (byte " + std::to_string(bad) + " of its text): expected UTF-8 text for --tokenizer " +
                          o.tokenizer + ", or --allow-invalid-utf8 to tokenize the bytes as they are";
          done[i].fatal = true;
          continue;
        }
      }
      done[i].text_bytes = text.size();
      done[i].ids = tokenizer.encode(text);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < o.threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
}

}  // namespace

std::string jsonl_document(const std::string& line, const std::string& key, const std::string& file,
                           uint64_t line_no) {
  const std::string where = file + ":" + std::to_string(line_no) + ": ";
  json::Value v;
  try {
    v = json::parse(line, where + "line");
  } catch (const json::JsonError& e) {
    throw DataError(std::string(e.what()) + " (expected one JSON object per line)");
  }
  if (!v.is_object()) throw DataError(where + "the line is not a JSON object (expected {\"" + key + "\": \"...\"})");
  const json::Value* text = json::find(v, key);
  if (text == nullptr) throw DataError(where + "the object has no member \"" + key + "\" (--json-key)");
  if (!text->is_string()) throw DataError(where + "member \"" + key + "\" is not a string");
  return json::as_string(*text, key);
}

PrepareSummary prepare_token_files(const PrepareOptions& options) {
  const PrepareOptions& o = options;
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0)) {
    throw DataError("val fraction " + std::to_string(o.val_fraction) + " must be in [0, 1)");
  }
  if (o.output_prefix.empty()) throw DataError("an output prefix is required");
  if (o.output_format != "trident" && o.output_format != "megatron")
    throw DataError("unknown output format '" + o.output_format + "' (expected trident or megatron)");
  if (o.output_format == "megatron" && o.val_fraction != 0.0)
    throw DataError("a Megatron dataset holds every document (training cuts it with data.split): val fraction must "
                    "be 0 with output format megatron, got " + std::to_string(o.val_fraction));
  if (o.threads < 1) throw DataError("threads must be at least 1, got " + std::to_string(o.threads));
  if (o.format == "jsonl" && o.json_key.empty()) throw DataError("jsonl input needs a json key (--json-key)");
  const auto owned = make_tokenizer(o.tokenizer, o.tokenizer_dir);
  const Tokenizer& tokenizer = *owned;
  const auto files = list_documents(o.inputs, o.format);
  const auto eot = tokenizer.end_of_text();

  PrepareSummary summary;
  uint64_t total = 0;
  for (const auto& f : files) total += fs::file_size(f);
  summary.input_bytes = total;
  if (total == 0)
    throw DataError("the inputs are empty (" + std::to_string(files.size()) + " file(s), 0 bytes): nothing to tokenize");

  const fs::path parent = fs::path(o.output_prefix).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  std::unique_ptr<MegatronWriter> megatron;
  if (o.output_format == "megatron") megatron = std::make_unique<MegatronWriter>(o.output_prefix, tokenizer.vocab_size());

  std::vector<uint32_t> train, val;
  BatchReader reader(files, o.format == "jsonl");
  std::vector<Pending> batch;
  std::vector<Done> done;
  uint64_t read = 0, doc = 0;
  while (reader.next(batch, read)) {
    tokenize_batch(o, files, tokenizer, batch, done);
    for (size_t i = 0; i < done.size(); ++i) {
      Done& d = done[i];
      if (d.fatal) throw DataError(d.error);
      if (!d.error.empty()) {
        if (!o.skip_bad_lines) throw DataError(d.error + " (--skip-bad-lines skips such lines)");
        ++summary.bad_lines;
        continue;
      }
      summary.text_bytes += d.text_bytes;
      if (eot) d.ids.push_back(*eot);
      if (megatron) {
        megatron->add_document(d.ids);
        ++summary.train_docs;
        summary.train_tokens += d.ids.size();
      } else {
        const bool is_val = is_validation_document(doc, o.val_fraction);
        auto& out = is_val ? val : train;
        out.insert(out.end(), d.ids.begin(), d.ids.end());
        ++(is_val ? summary.val_docs : summary.train_docs);
      }
      ++doc;
    }
    if (o.progress) o.progress(read, total);
  }
  if (doc == 0) throw DataError("no documents found in the inputs (every line was skipped as bad)");
  if (summary.text_bytes == 0)
    throw DataError("the inputs' " + std::to_string(doc) + " document(s) hold no text: nothing to tokenize");

  if (megatron) {
    megatron->finish();
    summary.files_written = {o.output_prefix + ".bin", o.output_prefix + ".idx"};
    return summary;
  }
  summary.train_tokens = train.size();
  summary.val_tokens = val.size();
  const uint32_t eot_id = eot ? *eot : kNoEndOfText;
  for (const auto& [suffix, tokens, count] :
       {std::tuple{".train.bin", &train, summary.train_docs}, std::tuple{".val.bin", &val, summary.val_docs}}) {
    const std::string path = o.output_prefix + suffix;
    write_token_file(path, *tokens, count, tokenizer.name(), tokenizer.vocab_size(), eot_id);
    summary.files_written.push_back(path);
  }
  return summary;
}

}  // namespace trident::data
