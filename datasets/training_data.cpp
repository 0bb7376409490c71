// A run's samples from its config (see training_data.h).
#include "datasets/training_data.h"

#include <algorithm>
#include <filesystem>

#include "datasets/errors.h"
#include "datasets/megatron_samples.h"
#include "datasets/tokenizer.h"

namespace trident {
namespace {

std::vector<WeightedPath> paths_of(const Config& c) {
  return c.data.paths.empty() ? std::vector<WeightedPath>{{1.0, c.data.path}} : c.data.paths;
}

// A Megatron dataset's sequences of `split` (NOTE [Megatron split]); all of them without data.split.
std::array<uint64_t, 2> split_range(const Config& c, const data::MegatronDataset& ds, const std::string& split) {
  if (c.data.split.empty()) return {0, ds.sequence_count()};  // check_config: then there is no evaluation
  return data::megatron_split(data::parse_split(c.data.split), ds.sequence_count())[split == "train" ? 0 : 1];
}

void open_megatron_order(const Config& c, const std::string& split, bool write_caches, TrainingData& t) {
  std::vector<data::MegatronPart> parts;
  for (const WeightedPath& w : paths_of(c)) {
    t.megatron.push_back(std::make_unique<data::MegatronDataset>(w.path));
    const data::MegatronDataset& ds = *t.megatron.back();
    ds.check_vocab(c.model.vocab_size);
    const auto r = split_range(c, ds, split);
    parts.push_back({&ds, w.weight, r[0], r[1]});
    if (c.data.completion_only_loss) {
      t.loss_masks.push_back(std::make_unique<std::vector<uint8_t>>(data::read_loss_mask_file(w.path, ds.tokens().size())));
      parts.back().loss_mask = t.loss_masks.back().get();
    }
  }
  // One data.path is a GPTDataset alone; data.paths a BlendedDataset, as Megatron's
  // --data-path PREFIX and --data-path W1 PREFIX1 ... are.
  t.samples = std::make_unique<data::MegatronSamples>(parts, !c.data.paths.empty(), megatron_samples_asked(c, split),
                                                      c.model.seq_len, static_cast<uint32_t>(c.training.seed),
                                                      split == "train" ? "train" : "valid",
                                                      data::MegatronCache{c.data.cache_dir, write_caches, c.data.split,
                                                                          c.data.cache_tokenizer});
}

// The command that writes PREFIX.train.bin and PREFIX.val.bin for this config's tokenizer.
std::string prepare_command(const Config& c, const std::string& prefix) {
  std::string cmd = "trident data prepare --tokenizer " + c.data.tokenizer;
  if (!c.data.tokenizer_dir.empty()) cmd += " --tokenizer-dir " + c.data.tokenizer_dir;
  return cmd + " --input TEXT --output " + prefix;
}

// One dataset's stream of `split` in stream order: a Megatron dataset's share of its
// documents by data.split, or a token file's PREFIX.split.bin.
data::TokenView open_stream_part(const Config& c, const std::string& prefix, const std::string& split,
                                 TrainingData& t) {
  if (c.data.format == "megatron") {
    t.megatron.push_back(std::make_unique<data::MegatronDataset>(prefix));
    const data::MegatronDataset& ds = *t.megatron.back();
    ds.check_vocab(c.model.vocab_size);
    const auto r = split_range(c, ds, split);
    if (c.data.split.empty()) return ds.tokens(r[0], r[1], prefix + ".bin");
    return ds.tokens(r[0], r[1],
                     prefix + ".bin (data.split " + (split == "train" ? "train" : "valid") + " share: documents [" +
                         std::to_string(r[0]) + ", " + std::to_string(r[1]) + "))");
  }
  const std::string path = prefix + "." + split + ".bin";
  try {
    t.files.push_back(std::make_unique<data::TokenFile>(path));
  } catch (const data::DataError& e) {
    if (std::filesystem::exists(path)) throw;  // there, but unreadable or not a token file: the error says
    throw data::DataError(std::string(e.what()) + "; make it with `" + prepare_command(c, prefix) +
                          "` (TEXT: files or folders; `trident data prepare --help`)");
  }
  const data::TokenFile& f = *t.files.back();
  data::check_tokenizer(f, c.data.tokenizer, c.data.tokenizer_dir);
  data::check_vocab(f, c.model.vocab_size);
  return f.view();
}

}  // namespace

data::DocumentOptions document_options(const Config& c) {
  const DataConfig& d = c.data;
  data::DocumentOptions o{d.reset_position_ids, d.reset_attention_mask, d.eod_mask_loss, d.completion_only_loss,
                          d.eod_token};
  const bool needs_eod = d.reset_position_ids || d.reset_attention_mask || d.eod_mask_loss;
  if (!needs_eod || o.eod >= 0) return o;
  if (const auto eot = data::make_tokenizer(d.tokenizer, d.tokenizer_dir)->end_of_text()) {
    o.eod = static_cast<int64_t>(*eot);
    return o;
  }
  const char* key = d.reset_position_ids ? "data.reset_position_ids" : d.reset_attention_mask
                                                                         ? "data.reset_attention_mask"
                                                                         : "data.eod_mask_loss";
  throw data::DataError(std::string(key) + " = true needs an end-of-document token, and data.tokenizer = \"" +
                        d.tokenizer + "\" (" + d.tokenizer_dir + ") has none: set data.eod_token");
}

int64_t megatron_samples_asked(const Config& c, const std::string& split) {
  const auto& tr = c.training;
  if (split == "train") return tr.steps * tr.global_batch_size;
  const int64_t evaluations = tr.eval_interval > 0 ? tr.steps / tr.eval_interval + 1 : 1;
  return evaluations * tr.eval_batches * tr.global_batch_size;
}

int64_t eval_batch_index(const Config& c, int64_t evaluation, int64_t e) {
  return data_order(c) == "megatron" ? evaluation * c.training.eval_batches + e : e;
}

std::unique_ptr<TrainingData> open_training_data(const Config& c, const std::string& split, bool write_caches) {
  auto t = std::make_unique<TrainingData>();
  t->documents = document_options(c);
  if (data_order(c) == "megatron") {
    open_megatron_order(c, split, write_caches, *t);
    return t;
  }
  std::vector<data::WeightedTokens> parts;
  if (c.data.source == "synthetic") {
    // Validation continues the training stream's chain (synthetic_tokens of a
    // longer n has the shorter one as its prefix), so it measures the same
    // distribution on unseen tokens.
    const int64_t n = c.data.synthetic_tokens;
    const int64_t val = std::max<int64_t>(n / 8, 64 * (c.model.seq_len + 1));
    t->synthetic = data::synthetic_tokens(split == "train" ? n : n + val, static_cast<uint32_t>(c.model.vocab_size),
                                          static_cast<uint64_t>(c.training.seed));
    if (split != "train") t->synthetic.erase(t->synthetic.begin(), t->synthetic.begin() + n);
    parts.push_back({1.0, data::TokenView::of(t->synthetic, "synthetic/" + split)});
  } else {
    // A blend is mixed per split with the same weights, as Megatron blends each split.
    for (const WeightedPath& w : paths_of(c)) parts.push_back({w.weight, open_stream_part(c, w.path, split, *t)});
  }
  t->samples = std::make_unique<data::CausalLmDataset>(parts, c.model.seq_len, static_cast<uint64_t>(c.training.seed));
  return t;
}

}  // namespace trident
