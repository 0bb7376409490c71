// The [data] section: its keys, the rules across them (where tokens come
// from, Megatron's split, order and index caches, the tokenizer), and the two
// value syntaxes the datasets layer reads again (core/data_values.h).
#include "core/config.h"
#include "core/config_rules.h"
#include "core/config_schema.h"
#include "core/data_values.h"

#include <array>
#include <cmath>
#include <locale>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.h"

namespace trident {

std::string split_problem(const std::string& text, std::array<double, 3>* shares) {
  const auto bad = [&text](const std::string& why) {
    return "data.split = \"" + text + "\": " + why +
           " (expected up to three non-negative numbers separated by commas, e.g. \"969,30,1\")";
  };
  std::array<double, 3> w{0, 0, 0};
  size_t count = 0, at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    std::string part = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const size_t b = part.find_first_not_of(' '), e = part.find_last_not_of(' ');
    part = b == std::string::npos ? "" : part.substr(b, e - b + 1);
    const std::string not_number = "part " + std::to_string(count + 1) + " is \"" + part + "\", not a number";
    if (part.empty() || part.find_first_not_of("0123456789.") != std::string::npos) return bad(not_number);
    if (count == 3) return bad("more than three parts");
    std::istringstream in(part);
    in.imbue(std::locale::classic());
    double v = 0;
    if (!(in >> v) || !in.eof()) return bad(not_number);
    w[count++] = v;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  const double sum = w[0] + w[1] + w[2];
  if (!(sum > 0) || !std::isfinite(sum)) return bad("the parts sum to " + std::to_string(sum));
  for (double& v : w) v /= sum;
  *shares = w;
  return "";
}

std::string cache_tokenizer_problem(const std::string& text) {
  json::Value v;
  try {
    v = json::parse(text, "data.cache_tokenizer");
  } catch (const json::JsonError& e) {
    return std::string("not JSON (") + e.what() + ")";
  }
  if (!v.is_object())
    return "expected a JSON object, the tokenizer's unique_identifiers as megatron-core's description.txt holds "
           "them, e.g. {\"class\": \"megatron.core.tokenizers.text.libraries.null_tokenizer.NullTokenizer\"}";
  return "";
}

namespace config_rules {

std::vector<Field> data_fields() {
  return {
      TRIDENT_FIELD(data, source, one_of({"synthetic", "file"}), "where training tokens come from"),
      TRIDENT_FIELD(data, path, any(), "token file prefix written by `trident data prepare`"),
      TRIDENT_FIELD(data, format, one_of({"trident", "megatron"}),
                    "the files at data.path: \"trident\" PREFIX.train.bin and PREFIX.val.bin; "
                    "\"megatron\" Megatron-LM's PREFIX.bin + PREFIX.idx (uint16 or int32 tokens), cut by data.split"),
      TRIDENT_FIELD(data, paths, positive(),
                    "a blend instead of data.path: [[weight, PREFIX], ...], datasets of data.format mixed by "
                    "weight as Megatron's BlendedDataset does (datasets/README.md)"),
      TRIDENT_FIELD(data, split, any(),
                    "megatron: train, valid, test shares cut by documents as Megatron does, e.g. \"969,30,1\"; "
                    "empty = every document trains"),
      TRIDENT_FIELD(data, order, one_of({"auto", "stream", "megatron"}),
                    "which samples each step reads: \"megatron\" Megatron's GPTDataset and BlendedDataset order "
                    "(shuffled documents, samples across document ends); \"stream\" fixed windows of the token "
                    "stream, shuffled per epoch; \"auto\" = megatron for data.format = \"megatron\", else stream"),
      TRIDENT_FIELD(data, cache_dir, any(),
                    "megatron order: a folder of megatron-core's GPTDataset index caches (its path_to_cache); a "
                    "cache built for the same dataset, split, samples, seq_len and seed is read, not built again, "
                    "and when there is none the indices built are written there as megatron-core writes them"),
      TRIDENT_FIELD(data, cache_tokenizer, any(),
                    "with data.cache_dir: the tokenizer's unique_identifiers (a JSON object) that the caches Trident "
                    "writes put in their description, whose md5 names them; megatron-core loads them only when its "
                    "tokenizer has these identifiers"),
      TRIDENT_FIELD(data, tokenizer, one_of({"byte", "gpt2", "hf"}), "tokenizer"),
      TRIDENT_FIELD(data, tokenizer_dir, any(),
                    "directory holding encoder.json and vocab.bpe (gpt2) or tokenizer.json (hf)"),
      TRIDENT_FIELD(data, synthetic_tokens, at_least(1), "tokens generated when source = \"synthetic\""),
      TRIDENT_FIELD(data, reset_position_ids, any(),
                    "positions restart after each end-of-document token of a sample (Megatron's "
                    "--reset-position-ids; datasets/documents.h)"),
      TRIDENT_FIELD(data, reset_attention_mask, any(),
                    "attention stays inside each document of a sample, documents ending at the "
                    "end-of-document token (Megatron's --reset-attention-mask)"),
      TRIDENT_FIELD(data, eod_mask_loss, any(),
                    "the loss of the prediction made from an end-of-document token is dropped (Megatron's "
                    "--eod-mask-loss)"),
      TRIDENT_FIELD(data, eod_token, at_least(-1),
                    "the end-of-document id the three keys above look for; -1 = the tokenizer's own (gpt2: "
                    "50256, hf: its end-of-text special token; byte has none)"),
      TRIDENT_FIELD(data, completion_only_loss, any(),
                    "megatron: the loss counts only tokens PREFIX.lossmask marks (the completions of "
                    "prompt/completion JSONL prepared by `trident data prepare`)"),
  };
}

namespace {

// data.reset_* and data.eod_mask_loss look for an end-of-document token; completion_only_loss
// reads each Megatron dataset's loss-mask file through Megatron's order.
void check_documents(const Config& c) {
  const DataConfig& d = c.data;
  const char* reset = d.reset_position_ids     ? "data.reset_position_ids"
                      : d.reset_attention_mask ? "data.reset_attention_mask"
                      : d.eod_mask_loss        ? "data.eod_mask_loss"
                                               : nullptr;
  if (reset != nullptr && d.eod_token < 0 && (d.tokenizer == "byte" || d.source == "synthetic"))
    fail(c, std::string(reset) + " = true needs an end-of-document token, and " +
                (d.source == "synthetic" ? "synthetic data has" : "data.tokenizer = \"byte\" has") +
                " none: set data.eod_token (the id that ends each document)");
  if (d.eod_token >= c.model.vocab_size)
    fail(c, "data.eod_token = " + n(d.eod_token) + " is not below model.vocab_size = " + n(c.model.vocab_size));
  if (d.completion_only_loss && data_order(c) != "megatron")
    fail(c, "data.completion_only_loss reads PREFIX.lossmask beside a Megatron dataset: it needs data.format = "
            "\"megatron\" and data.order = \"megatron\" (auto), got data.order = \"" + data_order(c) + "\"");
}

}  // namespace

void check_data(const Config& c) {
  const DataConfig& d = c.data;
  if (d.source == "file" && d.path.empty() && d.paths.empty())
    fail(c, "data.source = \"file\" needs data.path (the prefix written by `trident data prepare`) or data.paths");
  if (!d.path.empty() && !d.paths.empty())
    fail(c, "data.path = " + quote(d.path) + " and data.paths: expected one of them (data.paths is a blend)");
  if (!d.paths.empty() && d.source != "file")
    fail(c, "data.paths reads files: it needs data.source = \"file\", got " + quote(d.source));
  if (d.format == "megatron" && d.source != "file")
    fail(c, "data.format = \"megatron\" reads data.path: it needs data.source = \"file\", got " + quote(d.source));
  if (!d.split.empty() && d.format != "megatron")
    fail(c, "data.split = " + quote(d.split) + " with data.format = " + quote(d.format) +
                ": expected data.format = \"megatron\" (a Trident token file is split when prepared: "
                "PREFIX.train.bin and PREFIX.val.bin)");
  if (!d.split.empty()) {
    std::array<double, 3> shares{};
    if (const std::string problem = split_problem(d.split, &shares); !problem.empty()) fail(c, problem);
    if (c.training.eval_interval > 0 && shares[1] == 0)
      fail(c, "data.split = " + quote(d.split) + " has no valid share but training.eval_interval = " +
                  n(c.training.eval_interval) + ": expected a second part > 0");
  }
  if (d.format == "megatron" && c.training.eval_interval > 0 && d.split.empty())
    fail(c, "data.format = \"megatron\" with training.eval_interval = " + n(c.training.eval_interval) +
                " needs data.split (e.g. \"969,30,1\"): without it every document trains and none validates");
  if (d.order == "megatron" && d.format != "megatron")
    fail(c, "data.order = \"megatron\" needs data.format = \"megatron\" (it walks the documents of PREFIX.idx), got "
            "data.format = " + quote(d.format) + " with data.source = " + quote(d.source) +
                ": use data.order = \"stream\"");
  if (!d.cache_dir.empty() && data_order(c) != "megatron")
    fail(c, "data.cache_dir = " + quote(d.cache_dir) + " holds Megatron's index caches, which only data.order = "
            "\"megatron\" reads; this run's order is \"" + data_order(c) + "\"");
  if (!d.cache_dir.empty() && d.split.empty())
    fail(c, "data.cache_dir = " + quote(d.cache_dir) + " needs data.split: the index caches megatron-core reads "
            "and writes are described by the split string (Megatron's --split; \"100,0,0\" trains on every "
            "document as no data.split does)");
  if (const std::string problem = cache_tokenizer_problem(d.cache_tokenizer); !problem.empty())
    fail(c, "data.cache_tokenizer = " + quote(d.cache_tokenizer) + ": " + problem);
  if (d.cache_tokenizer != kNullTokenizerIdentifiers && d.cache_dir.empty())
    fail(c, "data.cache_tokenizer = " + quote(d.cache_tokenizer) + " names the tokenizer in the index caches written "
            "to data.cache_dir, which is not set: expected data.cache_dir, or no data.cache_tokenizer");
  if (data_order(c) == "megatron" && c.training.seed > 0xffffffffLL)
    fail(c, "training.seed = " + n(c.training.seed) + " with data.order = \"megatron\": numpy's RandomState, "
                "which Megatron's order draws from, takes seeds below 2^32");
  if (data_order(c) == "megatron" && c.model.seq_len < 2)
    fail(c, "model.seq_len = " + n(c.model.seq_len) + " with data.order = \"megatron\": megatron-core's sample "
                "index needs a sequence length of at least 2");
  if (d.source == "synthetic" && !d.path.empty()) {
    fail(c, "data.path = " + quote(d.path) + " with data.source = \"synthetic\": expected data.source = \"file\", "
                "or no data.path (synthetic data reads no file)");
  }
  if (d.source == "synthetic" && d.synthetic_tokens <= c.model.seq_len) {
    fail(c, "data.synthetic_tokens (" + n(d.synthetic_tokens) + ") must exceed model.seq_len (" +
                n(c.model.seq_len) + "): a sample needs seq_len + 1 tokens");
  }
  check_documents(c);
  if (!d.tokenizer_dir.empty() && d.tokenizer == "byte") {
    fail(c, "data.tokenizer_dir = " + quote(d.tokenizer_dir) + " with data.tokenizer = " + quote(d.tokenizer) +
                ": expected data.tokenizer = \"gpt2\" or \"hf\", or no data.tokenizer_dir (only gpt2 and hf read "
                "a vocabulary directory)");
  }
  if (d.tokenizer == "hf" && d.tokenizer_dir.empty())
    fail(c, "data.tokenizer = \"hf\" needs data.tokenizer_dir (the folder holding tokenizer.json)");
  // The tokenizer's ids must be rows of the embedding: a smaller vocabulary
  // trains (synthetic data draws below it) but saves a model that eval and
  // generate refuse. hf's size is known only once tokenizer.json is read.
  const int64_t tokenizer_vocab = d.tokenizer == "byte" ? 256 : d.tokenizer == "gpt2" ? 50257 : 0;
  if (c.model.vocab_size < tokenizer_vocab)
    fail(c, "model.vocab_size = " + n(c.model.vocab_size) + " is smaller than data.tokenizer = " + quote(d.tokenizer) +
                "'s " + n(tokenizer_vocab) + " tokens: expected model.vocab_size >= " + n(tokenizer_vocab));
}

}  // namespace config_rules

}  // namespace trident
