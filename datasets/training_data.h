// The samples a run reads, from its config (data.*, model.seq_len, training.*):
// token files, Megatron datasets or the synthetic stream, in data.order. The
// trainer and `trident data batches` both read through it, so the command prints
// exactly what training reads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "datasets/dataset.h"
#include "datasets/documents.h"
#include "datasets/megatron_dataset.h"
#include "datasets/token_file.h"

namespace trident {

struct TrainingData {
  std::vector<std::unique_ptr<data::TokenFile>> files;
  std::vector<std::unique_ptr<data::MegatronDataset>> megatron;
  std::vector<uint32_t> synthetic;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> loss_masks;  // data.completion_only_loss: per Megatron dataset
  std::unique_ptr<data::SampleSource> samples;  // reads the above
  data::DocumentOptions documents;              // what a sample carries beside tokens (document_options)
};

// data.reset_*, data.eod_mask_loss, data.completion_only_loss and the end-of-document id:
// data.eod_token, or the tokenizer's own when -1. Throws data::DataError when a key needs
// an end-of-document id and neither gives one.
data::DocumentOptions document_options(const Config& c);

// The samples Megatron's trainer asks of a split (megatron/training's
// get_train_valid_test_num_samples): train = training.steps x G; valid =
// (training.steps / training.eval_interval + 1) x training.eval_batches x G, every
// evaluation reading batches it has not read before.
int64_t megatron_samples_asked(const Config& c, const std::string& split);

// split: "train" or "val". Throws data::DataError for files that cannot be read.
// write_caches: in Megatron's order, write the index caches data.cache_dir lacks
// (NOTE [Megatron cache writes]); one process of a run does (the trainer's rank 0).
std::unique_ptr<TrainingData> open_training_data(const Config& c, const std::string& split, bool write_caches);

// The global batch a data.order reads at evaluation `e` of evaluation number
// `evaluation` (0, 1, ...): stream order reads batches 0 .. eval_batches - 1 every
// time, Megatron's order goes on through the valid split.
int64_t eval_batch_index(const Config& c, int64_t evaluation, int64_t e);

}  // namespace trident
