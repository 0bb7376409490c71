// Megatron's sample order over Megatron datasets (data.order = "megatron"): the
// indices megatron-core's GPTDataset and BlendedDataset build, computed again.
//
// NOTE [Megatron GPT samples] (megatron-core 0.16: datasets/gpt_dataset.py, helpers.cpp)
// One dataset's split is the sequences [begin, end) (NOTE [Megatron split]); with
// `num_samples` asked of it and sequence length L:
//   tokens per epoch T = the sum of their lengths; epochs E = the fewest with E * T >=
//     num_samples * L + 1; the last epoch goes apart when E > 1 and the samples it adds,
//     num_samples - ((E-1) * T - 1) / L, are fewer than int(0.8 * ((T - 1) / L));
//   document index: the sequence ids repeated E times (int32), shuffled by one numpy
//     RandomState(seed) (NOTE [numpy RandomState]); apart: the first E - 1 epochs, then the last;
//   sample index (build_sample_idx): (E * T - 1) / L samples of L + 1 tokens; row k is
//     (position in the document index, offset in that sequence) where sample k starts, and
//     sample k ends on row k + 1's sequence at its offset inclusive: neighbours share a token;
//   shuffle index: [0, S) shuffled by the same RandomState after the document index
//     (apart: [0, S') then [S', S), S' the samples of the first E - 1 epochs);
//   sample i is sample shuffle[i] of the sample index.
// tests/reference/test_megatron_samples.py compares it, and NOTE [Megatron blend], with megatron-core.
// NOTE [Megatron blend] (megatron-core 0.16: blended_megatron_dataset_builder.py, blended_dataset.py)
// A blend (data.paths) of normalised weights w_d asked for N samples asks dataset d for
// ceil(ceil(N * w_d) * (1 + surplus)) (megatron-core's mid_level_dataset_surplus, 0.005 by
// default) and blends sum_d ceil(N * w_d) positions with build_blending_indices (NOTE
// [blended sample order] in dataset.h) over the weights normalised once more (BlendedDataset
// normalises what the builder already normalised; numpy's pairwise sum makes that differ
// from the first in the last bit now and then). Position p's sample is dataset b(p)'s
// sample c_{b(p)}(p). A single data.path is a GPTDataset alone, asked for N.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "datasets/dataset.h"
#include "datasets/errors.h"
#include "datasets/megatron_dataset.h"

namespace trident::data {

// One GPTDataset's indices (NOTE [Megatron GPT samples]).
struct GptIndices {
  std::vector<int32_t> document_index;
  std::vector<int64_t> sample_index;  // (samples + 1) rows of (document index position, offset), row-major
  std::vector<int64_t> shuffle_index;
  int64_t epochs = 0;
  int64_t tokens_per_epoch = 0;
  bool separate_final_epoch = false;
  int64_t samples() const { return static_cast<int64_t>(shuffle_index.size()); }
};

// The indices of sequences [begin, end) of a dataset whose sequence lengths are
// `sizes`. Throws DataError when the range holds fewer than 2 tokens, seq_len < 2
// (megatron-core asserts both) or num_samples < 1.
GptIndices build_gpt_indices(const std::vector<int32_t>& sizes, uint64_t begin, uint64_t end, int64_t num_samples,
                             int64_t seq_len, uint32_t seed);

// numpy.sum of a float64 array (pairwise summation, blocks of 8) and
// megatron-core's normalize(): w / sum(w).
double numpy_sum(const std::vector<double>& v);
std::vector<double> numpy_normalize(const std::vector<double>& w);

// build_blending_indices: for each of `size` positions the dataset (int16) and
// that dataset's sample.
void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);

// One dataset of a Megatron order: its files, blend weight and the sequences of the split.
struct MegatronPart {
  const MegatronDataset* dataset = nullptr;
  double weight = 1;
  uint64_t begin = 0, end = 0;
  const std::vector<uint8_t>* loss_mask = nullptr;  // one byte per token of the dataset (NOTE [loss-mask file])
};

// megatron-core's index caches (NOTE [Megatron index caches] in megatron_cache.h).
struct MegatronCache {
  std::string dir;        // data.cache_dir; "" = neither read nor write, always build
  bool write = false;     // write a dataset's cache when dir holds none for it (one writer a run)
  std::string split;      // data.split as given, for a written description
  std::string tokenizer;  // data.cache_tokenizer, for a written description
};

class MegatronSamples final : public SampleSource {
 public:
  // blend = false: one part, a GPTDataset asked for num_samples; true: a
  // BlendedDataset of the parts. `split` ("train", "valid") names the samples in
  // messages. Throws DataError as build_gpt_indices does, and when a blend asks a
  // dataset for more samples than it built (megatron-core's IndexError).
  // cache: where megatron-core's index caches are read from when one was built for
  // a dataset, and written to when none was.
  MegatronSamples(const std::vector<MegatronPart>& parts, bool blend, int64_t num_samples, int64_t seq_len,
                  uint32_t seed, std::string split, const MegatronCache& cache = {}, double surplus = 0.005);

  int64_t seq_len() const override { return seq_len_; }
  int64_t size() const { return size_; }  // positions there are
  size_t datasets() const { return parts_.size(); }
  const GptIndices& indices(size_t d) const { return parts_.at(d).indices; }
  size_t cached() const { return cached_; }    // datasets whose indices came from data.cache_dir
  size_t written() const { return written_; }  // datasets whose indices were written to it
  // The dataset and its sample at a position.
  std::pair<size_t, int64_t> locate(int64_t position) const;

  // Sample ids are positions: step * G .. step * G + G - 1.
  std::vector<int64_t> global_batch(int64_t step, int64_t global_batch_size) const override;
  // Megatron's pretraining sampler: micro-step k of the step takes dp * mbs
  // consecutive positions, and rank r the r-th mbs of them.
  std::vector<int64_t> micro_batch(int64_t step, int64_t global_batch_size, int64_t dp_rank, int64_t dp,
                                   int64_t micro_index, int64_t micro_batch_size) const override;
  void copy_sample(int64_t position, int64_t* out) const override;
  // Every part has a loss mask (MegatronPart::loss_mask).
  bool has_loss_masks() const override;
  void copy_sample_loss_mask(int64_t position, uint8_t* out) const override;

 private:
  struct Part {
    const MegatronDataset* dataset = nullptr;
    GptIndices indices;
    const std::vector<uint8_t>* loss_mask = nullptr;
  };
  DataError short_or_long(int64_t position) const;
  // Calls take(index) for each of the sample's seq_len + 1 tokens, index into its dataset's tokens().
  template <class Take>
  void walk_sample(int64_t position, Take take) const;
  std::vector<Part> parts_;
  int64_t seq_len_ = 0, size_ = 0;
  size_t cached_ = 0, written_ = 0;
  std::string split_;
  std::vector<int16_t> dataset_index_;  // a blend's choice per position (empty: one dataset)
  std::vector<int64_t> dataset_sample_index_;
};

}  // namespace trident::data
