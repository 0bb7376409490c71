// Document listing, the deterministic train/validation split, and file writing.
#include "framework/data/prepare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "framework/data/brown.h"
#include "framework/data/errors.h"
#include "framework/data/token_file.h"
#include "framework/data/tokenizer.h"

namespace trident::data {

namespace fs = std::filesystem;

std::vector<std::string> list_documents(const std::vector<std::string>& inputs, const std::string& format) {
  if (format != "text" && format != "brown") throw DataError("unknown format '" + format + "' (expected text or brown)");
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

}  // namespace

PrepareSummary prepare_token_files(const PrepareOptions& options) {
  if (!(options.val_fraction >= 0.0 && options.val_fraction < 1.0)) {
    throw DataError("val fraction " + std::to_string(options.val_fraction) + " must be in [0, 1)");
  }
  if (options.output_prefix.empty()) throw DataError("an output prefix is required");
  const auto tokenizer = make_tokenizer(options.tokenizer, options.tokenizer_dir);
  const auto docs = list_documents(options.inputs, options.format);
  const auto eot = tokenizer->end_of_text();

  PrepareSummary summary;
  std::vector<uint32_t> train, val;
  for (size_t i = 0; i < docs.size(); ++i) {
    std::string text = read_document(docs[i]);
    if (options.format == "brown") text = brown_to_text(text);
    summary.text_bytes += text.size();
    const bool is_val = is_validation_document(i, options.val_fraction);
    auto& out = is_val ? val : train;
    const auto ids = tokenizer->encode(text);
    out.insert(out.end(), ids.begin(), ids.end());
    if (eot) out.push_back(*eot);
    ++(is_val ? summary.val_docs : summary.train_docs);
  }
  summary.train_tokens = train.size();
  summary.val_tokens = val.size();

  const fs::path parent = fs::path(options.output_prefix).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  const uint32_t eot_id = eot ? *eot : kNoEndOfText;
  for (const auto& [suffix, tokens, count] :
       {std::tuple{".train.bin", &train, summary.train_docs}, std::tuple{".val.bin", &val, summary.val_docs}}) {
    const std::string path = options.output_prefix + suffix;
    write_token_file(path, *tokens, count, tokenizer->name(), tokenizer->vocab_size(), eot_id);
    summary.files_written.push_back(path);
  }
  return summary;
}

}  // namespace trident::data
