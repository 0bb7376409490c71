// Single-process use of a trained model of any family: load the whole model
// (tp = pp = 1) from a checkpoint or a Hugging Face directory, score a token
// stream, sample a continuation. Backs `trident eval` and `trident generate`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "datasets/tokenizer.h"
#include "models/common/model.h"

namespace trident {

struct LoadedModel {
  ModelConfig model;          // dropout forced to 0 (inference)
  std::string tokenizer;      // as recorded by the model ("" when unknown)
  std::string tokenizer_dir;  // from a checkpoint's config, or the HF directory for "hf"; "" = default search
  std::unique_ptr<Stage> stage;  // all layers, embedding and head (Stage::logits works)
};

// Exactly one of `checkpoint` (a checkpoint_store directory of any layout) and
// `hf_dir` (a Hugging Face GPT-2 or Llama directory, e.g. from `trident
// export`) is non-empty.
LoadedModel load_model(const std::string& checkpoint, const std::string& hf_dir);

// The tokenizer to use with `m`: `name` (or, when empty, the one the model
// records) from `dir` (or the model's recorded folder for that tokenizer).
// Throws when neither names one, or when it has more tokens than the model's
// vocabulary.
std::unique_ptr<data::Tokenizer> model_tokenizer(const LoadedModel& m, std::string name, std::string dir);

// The model section of a checkpoint's recorded config.
ModelConfig checkpoint_model(const std::string& checkpoint);
// Throws naming every shape-defining model key (arch, layers, hidden, heads,
// kv_heads, MLP width, seq_len, vocab_size) whose value in the checkpoint `checkpoint`
// differs from `cfg`, e.g. "model.layers: 8 in the checkpoint, 4 in the config".
void check_checkpoint_matches(const std::string& checkpoint, const ModelConfig& cfg);

struct EvalResult {
  double loss = 0;     // mean next-token cross-entropy (nats)
  int64_t tokens = 0;  // predicted tokens: every token after the first, once
};

// Windows tokens[k·L, k·L + L + 1) for L = seq_len: the first L (or fewer) are
// inputs, the next-token targets are shifted by one; the last window may be
// shorter. Each window's loss is the model's training loss (Stage::forward).
EvalResult evaluate(Stage& model, int64_t seq_len, const std::vector<int64_t>& tokens);

// Appends up to `max_tokens` sampled tokens to `prompt` (context cut to the
// last seq_len tokens) and returns only the new ones. temperature 0 = greedy;
// top_k 0 = the whole vocabulary. Stops early at `stop` when given.
std::vector<int64_t> generate(const Stage& model, int64_t seq_len, const std::vector<int64_t>& prompt,
                              int64_t max_tokens, double temperature, int64_t top_k, uint64_t seed,
                              std::optional<int64_t> stop = std::nullopt);

}  // namespace trident
