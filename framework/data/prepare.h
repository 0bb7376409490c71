// `trident data prepare`: text or Brown files -> PREFIX.train.bin / PREFIX.val.bin.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trident::data {

struct PrepareOptions {
  std::string tokenizer = "byte";     // "byte" | "gpt2" | "hf"
  std::string tokenizer_dir;          // gpt2 vocabulary folder (empty = default_gpt2_dir()); hf: tokenizer.json's folder
  std::vector<std::string> inputs;    // files and/or folders
  std::string output_prefix;          // writes PREFIX.train.bin and PREFIX.val.bin
  double val_fraction = 0.05;         // share of documents sent to validation, in [0, 1)
  std::string format = "text";        // "text" (as is) | "brown" (tagged, see brown.h)
};

struct PrepareSummary {
  uint64_t train_docs = 0, val_docs = 0;
  uint64_t train_tokens = 0, val_tokens = 0;
  uint64_t text_bytes = 0;
  std::vector<std::string> files_written;
};

// Expands inputs into the ordered document list: a file is one document; a
// folder contributes its regular files sorted by name (non-recursive; with
// format "brown" only Brown document names like "ca01"). Throws DataError on a
// missing input or when no document is found.
std::vector<std::string> list_documents(const std::vector<std::string>& inputs, const std::string& format);

// Document i (0-based, in list order) goes to validation iff
// floor((i + 1) * f) > floor(i * f): an even spread of floor(n * f) documents
// (with f = 0.05, every 20th document).
bool is_validation_document(uint64_t index, double val_fraction);

// Runs the whole preparation. Each document's tokens are followed by the
// tokenizer's end-of-text id when it has one (gpt2: 50256; byte: nothing; hf:
// <|endoftext|> or <|end_of_text|>).
PrepareSummary prepare_token_files(const PrepareOptions& options);

}  // namespace trident::data
