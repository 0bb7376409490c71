// `trident data prepare`: text, Brown or JSONL files -> Trident token files
// (PREFIX.train.bin / PREFIX.val.bin) or a Megatron indexed dataset (PREFIX.bin / .idx).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trident::data {

struct PrepareOptions {
  std::string tokenizer = "byte";     // "byte" | "gpt2" | "hf"
  std::string tokenizer_dir;          // gpt2 vocabulary folder (empty = default_gpt2_dir()); hf: tokenizer.json's folder
  std::vector<std::string> inputs;    // files and/or folders
  std::string output_prefix;          // trident: PREFIX.train.bin and PREFIX.val.bin; megatron: PREFIX.bin, PREFIX.idx
  double val_fraction = 0.05;         // share of documents sent to validation, in [0, 1) (trident output only)
  std::string format = "text";        // "text" (as is) | "brown" (tagged, see brown.h) | "jsonl" (one document a line)
                                      // | "prompt-completion" (JSONL examples, NOTE [prompt-completion data])
  std::string json_key = "text";      // jsonl: the member holding a line's document
  bool skip_bad_lines = false;        // jsonl: skip (and count) a bad line instead of failing on it
  bool allow_invalid_utf8 = false;    // gpt2/hf: tokenize a document that is not UTF-8 (its bytes as they are)
  std::string output_format = "trident";  // "trident" | "megatron"
  int threads = 1;                    // tokenizing threads (the output does not depend on it)
  int64_t eod_token = -1;             // prompt-completion: the end-of-document id; -1 = the tokenizer's own
  int64_t pack_seq_len = 0;           // prompt-completion: pack examples into sequences of this many tokens; 0 = not
  std::string overlong = "refuse";    // packing: an example longer than pack_seq_len is "refuse"d or "truncate"d
  // Called after each batch with the input bytes done so far and their total.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct PrepareSummary {
  uint64_t train_docs = 0, val_docs = 0;
  uint64_t train_tokens = 0, val_tokens = 0;
  uint64_t text_bytes = 0;   // document text tokenized (a JSONL document's decoded string)
  uint64_t input_bytes = 0;  // bytes of the input files
  uint64_t bad_lines = 0;    // jsonl lines skipped by skip_bad_lines
  // prompt-completion: examples (with prompt and completion) and plain documents ("text")
  // read, their prompt and loss-counted tokens, and with packing the sequences written, the
  // padding tokens in them and the examples truncated.
  uint64_t examples = 0, texts = 0, prompt_tokens = 0, loss_tokens = 0;
  uint64_t sequences = 0, pad_tokens = 0, truncated = 0;
  std::vector<std::string> files_written;
};

// Expands inputs into the ordered list of input files: a file is itself; a folder
// contributes its regular files sorted by name (non-recursive; with format
// "brown" only Brown document names like "ca01"; otherwise names not starting
// with '.'). With format text or brown each file is one document; with jsonl
// each line of each file is. Throws DataError on a missing input or when no file
// is found.
std::vector<std::string> list_documents(const std::vector<std::string>& inputs, const std::string& format);

// Document i (0-based, in list order) goes to validation iff
// floor((i + 1) * f) > floor(i * f): an even spread of floor(n * f) documents
// (with f = 0.05, every 20th document).
bool is_validation_document(uint64_t index, double val_fraction);

// The document of one JSONL line: the string member `key` of the object on the
// line. Throws DataError "FILE:LINE: ..." when the line is not a JSON object or
// lacks a string `key`.
std::string jsonl_document(const std::string& line, const std::string& key, const std::string& file, uint64_t line_no);

// Runs the whole preparation. Each document's tokens are followed by the
// tokenizer's end-of-text id when it has one (gpt2: 50256; byte: nothing, its
// 256 ids are the bytes; hf: <|endoftext|> or <|end_of_text|>). Documents are
// tokenized by options.threads threads in batches and written in input order,
// so the files are byte-identical for any thread count.
PrepareSummary prepare_token_files(const PrepareOptions& options);

// NOTE [prompt-completion data]
// format "prompt-completion" reads JSONL lines, each an object with string members "prompt"
// and "completion" (TRL's prompt-completion format; the completion not empty) or "text" (a
// plain document). An example's ids are encode(prompt) + encode(completion) + [eod], a
// document's encode(text) + [eod]; its loss mask (NOTE [loss-mask file] in documents.h) is 0
// over the prompt's ids and 1 over the completion's and the eod (a document's: 1 throughout).
// The output is a Megatron dataset PREFIX.bin/.idx plus PREFIX.lossmask. Without packing each
// example is one sequence. With pack_seq_len L, examples go in input order into sequences of
// exactly L tokens: an example joins the open sequence when it fits in the room left, else the
// open one is padded to L with eod ids (loss mask 0) and the example opens the next, so no
// example that fits in L is split. One longer than L is refused (naming its line), or with
// overlong "truncate" cut to its first L - 1 ids and the eod. Megatron's order with
// model.seq_len = L then reads each packed sequence as one sample (its last label is the next
// sequence's first token: loss mask 0 unless it starts a "text" document).
PrepareSummary prepare_prompt_completion(const PrepareOptions& options);

}  // namespace trident::data
