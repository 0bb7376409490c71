// GPT training samples over one token stream or a weighted blend of several:
// fixed windows, a seeded order per epoch, and the global-batch -> data-parallel
// rank -> micro-batch slicing.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "datasets/token_file.h"

namespace trident::data {

// splitmix64: a tiny portable PRNG, so data order is identical on every platform
// and standard library (std::shuffle and std distributions are not).
uint64_t splitmix64(uint64_t& state);

// What training reads: the sample ids of each global batch, the ids of each data-
// parallel rank's micro-batch, and a sample's seq_len + 1 tokens. Two orders
// implement it: CausalLmDataset (data.order = "stream") and MegatronSamples
// (data.order = "megatron", datasets/megatron_samples.h).
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t seq_len() const = 0;
  // The G sample ids of optimizer step `step`, in the order the data-parallel ranks
  // and their micro-batches take them (rank 0's first).
  virtual std::vector<int64_t> global_batch(int64_t step, int64_t global_batch_size) const = 0;
  // Micro-batch `micro_index` of rank `dp_rank` in step `step`. Throws DataError if G
  // is not a multiple of dp * mbs or an index is out of range.
  virtual std::vector<int64_t> micro_batch(int64_t step, int64_t global_batch_size, int64_t dp_rank, int64_t dp,
                                           int64_t micro_index, int64_t micro_batch_size) const = 0;
  // Copies sample i's seq_len + 1 tokens to out[0 .. seq_len].
  virtual void copy_sample(int64_t i, int64_t* out) const = 0;
  // Whether copy_sample_loss_mask has masks to give (datasets/documents.h, NOTE [loss-mask file]).
  virtual bool has_loss_masks() const { return false; }
  // Copies the loss-mask bytes of sample i's seq_len + 1 tokens to out[0 .. seq_len];
  // only where has_loss_masks().
  virtual void copy_sample_loss_mask(int64_t i, uint8_t* out) const;
};

// Checks G, dp, mbs, dp_rank and micro_index for micro_batch(); returns the
// micro-batches per rank.
int64_t check_micro_batch(int64_t global_batch_size, int64_t dp_rank, int64_t dp, int64_t micro_index,
                          int64_t micro_batch_size);

// One dataset of a blend (data.paths): its weight and its token stream.
struct WeightedTokens {
  double weight;
  TokenView tokens;
};

// NOTE [blended sample order]
// Position p of the endless sample sequence (step*G + j) goes to dataset
// b(p) of the blend, chosen as Megatron's BlendedDataset does
// (megatron/core/datasets/helpers.cpp, build_blending_indices): with the
// weights normalised to sum 1 and c_d(p) the positions before p that went to
// dataset d, b(p) is the d with the largest w_d * max(p, 1) - c_d(p), the
// lowest d on a tie. It is the k-th sample that dataset d takes, k = c_d(p),
// and that is dataset d's own sample order(k) (the one-stream rule, with seed
// seed_d = seed + d * 0x9E3779B97F4A7C15 mod 2^64, so dataset 0 of a blend
// orders its samples exactly as it would alone). Every position is a pure
// function of (seed, weights, streams, p): a resumed run, any layout and the
// reference trainer (tests/reference/trident_data.py) read the same samples.
class CausalLmDataset final : public SampleSource {
 public:
  // Sample i is tokens [i*seq_len, i*seq_len + seq_len + 1): seq_len inputs and,
  // shifted by one, seq_len targets. Throws DataError if seq_len < 1 or the stream
  // has fewer than seq_len + 1 tokens. `tokens` storage must outlive the dataset.
  CausalLmDataset(TokenView tokens, int64_t seq_len, uint64_t seed);
  // A blend (NOTE [blended sample order]): sample ids are dataset d's own sample
  // index plus the sample counts of datasets 0 .. d-1. Throws DataError on an
  // empty list, a weight that is not positive and finite, or a stream too short.
  CausalLmDataset(std::vector<WeightedTokens> parts, int64_t seq_len, uint64_t seed);

  int64_t seq_len() const override { return seq_len_; }
  int64_t num_samples() const { return num_samples_; }  // sum over datasets of (n_d - 1) / seq_len
  size_t datasets() const { return parts_.size(); }
  // Which dataset sample id `i` is from (0 for a single stream).
  size_t dataset_of(int64_t i) const;

  // Sample ids of optimizer step `step`: positions step*G ... step*G + G - 1. One
  // stream: an endless sequence of epochs, each a permutation of all samples seeded
  // by (seed, epoch). A blend: NOTE [blended sample order]. A pure function of
  // (seed, step, G).
  std::vector<int64_t> global_batch(int64_t step, int64_t global_batch_size) const override;

  // Micro-batch `micro_index` of data-parallel rank `dp_rank`: the rank owns the
  // block [dp_rank*G/dp, (dp_rank+1)*G/dp) of the global batch, and micro-batch k
  // is [k*mbs, (k+1)*mbs) inside it. Throws DataError if G is not a multiple of
  // dp*mbs or an index is out of range.
  std::vector<int64_t> micro_batch(int64_t step, int64_t global_batch_size, int64_t dp_rank, int64_t dp,
                                   int64_t micro_index, int64_t micro_batch_size) const override;

  // Copies sample i's seq_len + 1 tokens to out[0 .. seq_len].
  void copy_sample(int64_t i, int64_t* out) const override;

 private:
  struct Part {
    TokenView tokens;
    double weight = 1;  // normalised
    uint64_t seed = 0;
    int64_t samples = 0, first_id = 0;
    // Cache of the most recent epoch's permutation; steps visit epochs in order.
    int64_t cached_epoch = -1;
    std::vector<int64_t> cached_order;
  };
  const std::vector<int64_t>& epoch_order(Part& part, int64_t epoch) const;
  // Makes blend_* hold positions [lo, hi) (at least): from the kept window, or from 0.
  void blend_range(int64_t lo, int64_t hi) const;

  mutable std::vector<Part> parts_;
  int64_t seq_len_;
  int64_t num_samples_ = 0;
  mutable std::mutex order_mutex_;
  // A blend's choices for positions [blend_base_, blend_base_ + blend_dataset_.size()):
  // dataset b(p) and k = c_{b(p)}(p); blend_counts_ is c_d at the window's end.
  mutable int64_t blend_base_ = 0;
  mutable std::vector<uint32_t> blend_dataset_;
  mutable std::vector<int64_t> blend_k_, blend_counts_;
};

// A deterministic, learnable stream of n tokens over [0, vocab): an order-1
// Markov chain where each token has 4 successors (drawn with a bias toward small
// ids) taken with probabilities 1/2, 1/4, 1/8, 1/8. Both its skewed unigram
// distribution and its low-entropy bigrams are learnable, so a tiny model's loss
// falls visibly within a few dozen steps.
std::vector<uint32_t> synthetic_tokens(int64_t n, uint32_t vocab, uint64_t seed);

}  // namespace trident::data
