// GPT training samples over a token stream: fixed windows, a seeded order per
// epoch, and the global-batch -> data-parallel rank -> micro-batch slicing.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "framework/data/token_file.h"

namespace trident::data {

// splitmix64: a tiny portable PRNG, so data order is identical on every platform
// and standard library (std::shuffle and std distributions are not).
uint64_t splitmix64(uint64_t& state);

class GptDataset {
 public:
  // Sample i is tokens [i*seq_len, i*seq_len + seq_len + 1): seq_len inputs and,
  // shifted by one, seq_len targets. Throws DataError if seq_len < 1 or the stream
  // has fewer than seq_len + 1 tokens. `tokens` storage must outlive the dataset.
  GptDataset(TokenView tokens, int64_t seq_len, uint64_t seed);

  int64_t seq_len() const { return seq_len_; }
  int64_t num_samples() const { return num_samples_; }  // (n - 1) / seq_len

  // Sample indices of optimizer step `step`: positions step*G ... step*G + G - 1 of
  // an endless sequence of epochs, each a permutation of all samples seeded by
  // (seed, epoch). A pure function of (seed, step, G).
  std::vector<int64_t> global_batch(int64_t step, int64_t global_batch_size) const;

  // Micro-batch `micro_index` of data-parallel rank `dp_rank`: the rank owns the
  // block [dp_rank*G/dp, (dp_rank+1)*G/dp) of the global batch, and micro-batch k
  // is [k*mbs, (k+1)*mbs) inside it. Throws DataError if G is not a multiple of
  // dp*mbs or an index is out of range.
  std::vector<int64_t> micro_batch(int64_t step, int64_t global_batch_size, int64_t dp_rank, int64_t dp,
                                   int64_t micro_index, int64_t micro_batch_size) const;

  // Copies sample i's seq_len + 1 tokens to out[0 .. seq_len].
  void copy_sample(int64_t i, int64_t* out) const;

 private:
  const std::vector<int64_t>& epoch_order(int64_t epoch) const;

  TokenView tokens_;
  int64_t seq_len_;
  uint64_t seed_;
  int64_t num_samples_;
  // Cache of the most recent epoch's permutation; steps visit epochs in order.
  mutable std::mutex order_mutex_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_order_;
};

// A deterministic, learnable stream of n tokens over [0, vocab): an order-1
// Markov chain where each token has 4 successors (drawn with a bias toward small
// ids) taken with probabilities 1/2, 1/4, 1/8, 1/8. Both its skewed unigram
// distribution and its low-entropy bigrams are learnable, so a tiny model's loss
// falls visibly within a few dozen steps.
std::vector<uint32_t> synthetic_tokens(int64_t n, uint32_t vocab, uint64_t seed);

}  // namespace trident::data
