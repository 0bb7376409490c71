// CausalLmDataset sampling order and slicing, and the synthetic token stream.
#include "datasets/dataset.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>
#include <utility>

#include "datasets/errors.h"

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

void SampleSource::copy_sample_loss_mask(int64_t, uint8_t*) const {
  throw DataError("this sample order has no loss masks (data.completion_only_loss reads them in data.order = "
                  "\"megatron\")");
}

CausalLmDataset::CausalLmDataset(TokenView tokens, int64_t seq_len, uint64_t seed)
    : CausalLmDataset(std::vector<WeightedTokens>{{1.0, std::move(tokens)}}, seq_len, seed) {}

CausalLmDataset::CausalLmDataset(std::vector<WeightedTokens> parts, int64_t seq_len, uint64_t seed) : seq_len_(seq_len) {
  if (seq_len < 1) throw DataError("seq_len must be at least 1, got " + std::to_string(seq_len));
  if (parts.empty()) throw DataError("a blend needs at least one dataset");
  double total = 0;
  for (const WeightedTokens& w : parts) {
    if (!(w.weight > 0) || !std::isfinite(w.weight))
      throw DataError("blend weight " + std::to_string(w.weight) + " of " + w.tokens.source() +
                      ": expected a positive finite number");
    total += w.weight;
  }
  for (size_t d = 0; d < parts.size(); ++d) {
    Part p;
    p.tokens = std::move(parts[d].tokens);
    p.weight = parts[d].weight / total;  // Megatron's normalize(): w / sum(w) in float64
    p.seed = seed + static_cast<uint64_t>(d) * 0x9E3779B97F4A7C15ull;
    const auto n = static_cast<int64_t>(p.tokens.size());
    if (n < seq_len + 1) {
      throw DataError("seq_len " + std::to_string(seq_len) + " needs at least " + std::to_string(seq_len + 1) +
                      " tokens but " + p.tokens.source() + " has " + std::to_string(n));
    }
    p.samples = (n - 1) / seq_len;
    p.first_id = num_samples_;
    num_samples_ += p.samples;
    parts_.push_back(std::move(p));
  }
  blend_counts_.assign(parts_.size(), 0);
}

size_t CausalLmDataset::dataset_of(int64_t i) const {
  size_t d = 0;
  while (d + 1 < parts_.size() && i >= parts_[d + 1].first_id) ++d;
  return d;
}

const std::vector<int64_t>& CausalLmDataset::epoch_order(Part& part, int64_t epoch) const {
  if (epoch == part.cached_epoch) return part.cached_order;
  auto& order = part.cached_order;
  order.resize(static_cast<size_t>(part.samples));
  for (int64_t i = 0; i < part.samples; ++i) order[i] = i;
  // Fisher-Yates with a stream seeded by (seed, epoch).
  uint64_t state = part.seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(epoch + 1));
  splitmix64(state);
  for (int64_t i = part.samples - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(state, static_cast<uint64_t>(i + 1)));
    std::swap(order[i], order[j]);
  }
  part.cached_epoch = epoch;
  return order;
}

void CausalLmDataset::blend_range(int64_t lo, int64_t hi) const {
  if (lo < blend_base_) {  // behind the window: start again from position 0
    blend_base_ = 0;
    blend_dataset_.clear();
    blend_k_.clear();
    blend_counts_.assign(parts_.size(), 0);
  }
  // Drop what lies well behind lo; the counts at the window's end are unchanged by it.
  const int64_t drop = lo - blend_base_;
  if (drop > (int64_t{1} << 16)) {
    blend_dataset_.erase(blend_dataset_.begin(), blend_dataset_.begin() + drop);
    blend_k_.erase(blend_k_.begin(), blend_k_.begin() + drop);
    blend_base_ = lo;
  }
  // NOTE [blended sample order]: Megatron's greedy choice, position by position.
  for (int64_t p = blend_base_ + static_cast<int64_t>(blend_dataset_.size()); p < hi; ++p) {
    const double at = std::max(static_cast<double>(p), 1.0);
    size_t best = 0;
    double best_error = parts_[0].weight * at - static_cast<double>(blend_counts_[0]);
    for (size_t d = 1; d < parts_.size(); ++d) {
      const double error = parts_[d].weight * at - static_cast<double>(blend_counts_[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    blend_dataset_.push_back(static_cast<uint32_t>(best));
    blend_k_.push_back(blend_counts_[best]++);
  }
}

std::vector<int64_t> CausalLmDataset::global_batch(int64_t step, int64_t global_batch_size) const {
  if (step < 0) throw DataError("step must be >= 0, got " + std::to_string(step));
  if (global_batch_size < 1) throw DataError("global batch size must be >= 1, got " + std::to_string(global_batch_size));
  std::vector<int64_t> batch;
  batch.reserve(global_batch_size);
  std::lock_guard<std::mutex> lock(order_mutex_);
  const int64_t first = step * global_batch_size;
  if (parts_.size() > 1) blend_range(first, first + global_batch_size);
  for (int64_t j = 0; j < global_batch_size; ++j) {
    const int64_t pos = first + j;
    size_t d = 0;
    int64_t k = pos;
    if (parts_.size() > 1) {
      d = blend_dataset_[static_cast<size_t>(pos - blend_base_)];
      k = blend_k_[static_cast<size_t>(pos - blend_base_)];
    }
    Part& part = parts_[d];
    batch.push_back(part.first_id + epoch_order(part, k / part.samples)[static_cast<size_t>(k % part.samples)]);
  }
  return batch;
}

int64_t check_micro_batch(int64_t global_batch_size, int64_t dp_rank, int64_t dp, int64_t micro_index,
                          int64_t micro_batch_size) {
  if (dp < 1 || micro_batch_size < 1 || global_batch_size < 1 || global_batch_size % (dp * micro_batch_size) != 0) {
    throw DataError("global batch size " + std::to_string(global_batch_size) + " must be a positive multiple of dp(" +
                    std::to_string(dp) + ") x micro_batch_size(" + std::to_string(micro_batch_size) + ") = " +
                    std::to_string(dp * micro_batch_size));
  }
  const int64_t micro_batches = global_batch_size / dp / micro_batch_size;
  if (dp_rank < 0 || dp_rank >= dp) {
    throw DataError("dp_rank " + std::to_string(dp_rank) + " out of range [0, " + std::to_string(dp) + ")");
  }
  if (micro_index < 0 || micro_index >= micro_batches) {
    throw DataError("micro-batch index " + std::to_string(micro_index) + " out of range [0, " +
                    std::to_string(micro_batches) + ")");
  }
  return micro_batches;
}

std::vector<int64_t> CausalLmDataset::micro_batch(int64_t step, int64_t global_batch_size, int64_t dp_rank, int64_t dp,
                                             int64_t micro_index, int64_t micro_batch_size) const {
  check_micro_batch(global_batch_size, dp_rank, dp, micro_index, micro_batch_size);
  const int64_t per_rank = global_batch_size / dp;
  const std::vector<int64_t> global = global_batch(step, global_batch_size);
  const auto begin = global.begin() + dp_rank * per_rank + micro_index * micro_batch_size;
  return std::vector<int64_t>(begin, begin + micro_batch_size);
}

void CausalLmDataset::copy_sample(int64_t i, int64_t* out) const {
  if (i < 0 || i >= num_samples_) {
    throw DataError("sample " + std::to_string(i) + " out of range [0, " + std::to_string(num_samples_) + ")");
  }
  const Part& part = parts_[dataset_of(i)];
  const auto start = static_cast<size_t>((i - part.first_id) * seq_len_);
  for (int64_t k = 0; k <= seq_len_; ++k) out[k] = part.tokens[start + static_cast<size_t>(k)];
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
