// GptDataset sampling order and slicing, and the synthetic token stream.
#include "framework/data/dataset.h"

#include <cassert>
#include <string>
#include <utility>

#include "framework/data/errors.h"

namespace trident::data {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

// Uniform integer in [0, bound) by rejection, free of modulo bias.
uint64_t uniform_below(uint64_t& state, uint64_t bound) {
  assert(bound > 0);
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t r;
  do r = splitmix64(state);
  while (r >= limit);
  return r % bound;
}

}  // namespace

GptDataset::GptDataset(TokenView tokens, int64_t seq_len, uint64_t seed)
    : tokens_(std::move(tokens)), seq_len_(seq_len), seed_(seed), num_samples_(0) {
  if (seq_len < 1) throw DataError("seq_len must be at least 1, got " + std::to_string(seq_len));
  const auto n = static_cast<int64_t>(tokens_.size());
  if (n < seq_len + 1) {
    throw DataError("seq_len " + std::to_string(seq_len) + " needs at least " + std::to_string(seq_len + 1) +
                    " tokens but " + tokens_.source() + " has " + std::to_string(n));
  }
  num_samples_ = (n - 1) / seq_len;
}

const std::vector<int64_t>& GptDataset::epoch_order(int64_t epoch) const {
  if (epoch == cached_epoch_) return cached_order_;
  cached_order_.resize(num_samples_);
  for (int64_t i = 0; i < num_samples_; ++i) cached_order_[i] = i;
  // Fisher-Yates with a stream seeded by (seed, epoch).
  uint64_t state = seed_ ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(epoch + 1));
  splitmix64(state);
  for (int64_t i = num_samples_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(state, static_cast<uint64_t>(i + 1)));
    std::swap(cached_order_[i], cached_order_[j]);
  }
  cached_epoch_ = epoch;
  return cached_order_;
}

std::vector<int64_t> GptDataset::global_batch(int64_t step, int64_t global_batch_size) const {
  if (step < 0) throw DataError("step must be >= 0, got " + std::to_string(step));
  if (global_batch_size < 1) throw DataError("global batch size must be >= 1, got " + std::to_string(global_batch_size));
  std::vector<int64_t> batch;
  batch.reserve(global_batch_size);
  std::lock_guard<std::mutex> lock(order_mutex_);
  for (int64_t j = 0; j < global_batch_size; ++j) {
    const int64_t pos = step * global_batch_size + j;
    batch.push_back(epoch_order(pos / num_samples_)[pos % num_samples_]);
  }
  return batch;
}

std::vector<int64_t> GptDataset::micro_batch(int64_t step, int64_t global_batch_size, int64_t dp_rank, int64_t dp,
                                             int64_t micro_index, int64_t micro_batch_size) const {
  if (dp < 1 || micro_batch_size < 1 || global_batch_size < 1 || global_batch_size % (dp * micro_batch_size) != 0) {
    throw DataError("global batch size " + std::to_string(global_batch_size) + " must be a positive multiple of dp(" +
                    std::to_string(dp) + ") x micro_batch_size(" + std::to_string(micro_batch_size) + ") = " +
                    std::to_string(dp * micro_batch_size));
  }
  const int64_t per_rank = global_batch_size / dp;
  const int64_t micro_batches = per_rank / micro_batch_size;
  if (dp_rank < 0 || dp_rank >= dp) {
    throw DataError("dp_rank " + std::to_string(dp_rank) + " out of range [0, " + std::to_string(dp) + ")");
  }
  if (micro_index < 0 || micro_index >= micro_batches) {
    throw DataError("micro-batch index " + std::to_string(micro_index) + " out of range [0, " +
                    std::to_string(micro_batches) + ")");
  }
  const std::vector<int64_t> global = global_batch(step, global_batch_size);
  const auto begin = global.begin() + dp_rank * per_rank + micro_index * micro_batch_size;
  return std::vector<int64_t>(begin, begin + micro_batch_size);
}

void GptDataset::copy_sample(int64_t i, int64_t* out) const {
  if (i < 0 || i >= num_samples_) {
    throw DataError("sample " + std::to_string(i) + " out of range [0, " + std::to_string(num_samples_) + ")");
  }
  const auto start = static_cast<size_t>(i * seq_len_);
  for (int64_t k = 0; k <= seq_len_; ++k) out[k] = tokens_[start + static_cast<size_t>(k)];
}

std::vector<uint32_t> synthetic_tokens(int64_t n, uint32_t vocab, uint64_t seed) {
  if (n < 0) throw DataError("synthetic token count must be >= 0, got " + std::to_string(n));
  if (vocab < 2) throw DataError("synthetic vocab must be >= 2, got " + std::to_string(vocab));
  constexpr int kSuccessors = 4;
  uint64_t state = seed ^ 0x5EEDF00DCAFEull;
  // Successors biased toward small ids (u^2 scaling) so the unigram is skewed too.
  std::vector<uint32_t> next(static_cast<size_t>(vocab) * kSuccessors);
  for (auto& s : next) {
    const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
    s = static_cast<uint32_t>(u * u * vocab);
  }
  std::vector<uint32_t> tokens;
  tokens.reserve(static_cast<size_t>(n));
  uint32_t current = static_cast<uint32_t>(uniform_below(state, vocab));
  for (int64_t i = 0; i < n; ++i) {
    tokens.push_back(current);
    const uint64_t r = splitmix64(state) & 7;  // 0-3: 1st, 4-5: 2nd, 6: 3rd, 7: 4th successor
    const int pick = r < 4 ? 0 : r < 6 ? 1 : r == 6 ? 2 : 3;
    current = next[static_cast<size_t>(current) * kSuccessors + pick];
  }
  return tokens;
}

}  // namespace trident::data
