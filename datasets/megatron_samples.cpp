// Megatron's GPTDataset and BlendedDataset indices (NOTE [Megatron GPT samples], NOTE [Megatron blend]).
#include "datasets/megatron_samples.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "datasets/errors.h"
#include "datasets/megatron_cache.h"
#include "datasets/numpy_random.h"

namespace trident::data {
namespace {

// The epochs' document index: the split's sequences `epochs` times, shuffled.
void append_epochs(std::vector<int32_t>& out, uint64_t begin, uint64_t end, int64_t epochs, NumpyRandomState& rs) {
  std::vector<int32_t> idx;
  idx.reserve(static_cast<size_t>(epochs) * (end - begin));
  for (int64_t e = 0; e < epochs; ++e)
    for (uint64_t s = begin; s < end; ++s) idx.push_back(static_cast<int32_t>(s));
  rs.shuffle(idx);
  out.insert(out.end(), idx.begin(), idx.end());
}

// [first, last) shuffled, appended.
void append_shuffled(std::vector<int64_t>& out, int64_t first, int64_t last, NumpyRandomState& rs) {
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(std::max<int64_t>(0, last - first)));
  for (int64_t i = first; i < last; ++i) idx.push_back(i);
  rs.shuffle(idx);
  out.insert(out.end(), idx.begin(), idx.end());
}

// build_sample_idx: where each (seq_len + 1)-token sample starts, walking the document index.
std::vector<int64_t> sample_starts(const std::vector<int32_t>& sizes, const std::vector<int32_t>& documents,
                                   int64_t seq_len, int64_t samples) {
  std::vector<int64_t> rows(2 * static_cast<size_t>(samples + 1), 0);
  int64_t at = 0, offset = 0;  // position in the document index, offset in its sequence
  const auto last = static_cast<int64_t>(documents.size()) - 1;
  for (int64_t k = 1; k <= samples; ++k) {
    int64_t remaining = seq_len + 1;
    while (remaining != 0) {
      const int64_t length = sizes[static_cast<size_t>(documents[static_cast<size_t>(at)])] - offset;
      remaining -= length;
      if (remaining <= 0) {
        // The sample ends inside this sequence; the next one starts on its last token.
        offset += remaining + length - 1;
        remaining = 0;
      } else if (at == last) {  // the end of the data: only the last sample gets here
        offset = sizes[static_cast<size_t>(documents[static_cast<size_t>(at)])] - 1;
        break;
      } else {
        ++at;
        offset = 0;
      }
    }
    rows[2 * static_cast<size_t>(k)] = at;
    rows[2 * static_cast<size_t>(k) + 1] = offset;
  }
  return rows;
}

}  // namespace

GptIndices build_gpt_indices(const std::vector<int32_t>& sizes, uint64_t begin, uint64_t end, int64_t num_samples,
                             int64_t seq_len, uint32_t seed) {
  if (seq_len < 2) throw DataError("Megatron's sample order needs a sequence length of at least 2, got " +
                                   std::to_string(seq_len));
  if (num_samples < 1) throw DataError("Megatron's sample order asked for " + std::to_string(num_samples) + " samples");
  if (begin > end || end > sizes.size())
    throw DataError("sequences [" + std::to_string(begin) + ", " + std::to_string(end) + ") out of range (there are " +
                    std::to_string(sizes.size()) + ")");
  GptIndices g;
  for (uint64_t s = begin; s < end; ++s) g.tokens_per_epoch += sizes[s];
  if (g.tokens_per_epoch < 2)
    throw DataError("sequences [" + std::to_string(begin) + ", " + std::to_string(end) + ") hold " +
                    std::to_string(g.tokens_per_epoch) + " tokens: Megatron's sample order needs at least 2");
  const int64_t T = g.tokens_per_epoch, L = seq_len;
  g.epochs = 1;
  for (int64_t tokens = T; tokens < num_samples * L + 1; tokens += T) ++g.epochs;
  int64_t sans_final = 0;  // samples of the first E - 1 epochs
  if (g.epochs > 1) {
    sans_final = ((g.epochs - 1) * T - 1) / L;
    const int64_t from_final = num_samples - sans_final, per_epoch = (T - 1) / L;
    // Python's int(0.80 * n): the double product, truncated.
    g.separate_final_epoch = from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }
  NumpyRandomState rs(seed);
  if (g.separate_final_epoch) {
    append_epochs(g.document_index, begin, end, g.epochs - 1, rs);
    append_epochs(g.document_index, begin, end, 1, rs);
  } else {
    append_epochs(g.document_index, begin, end, g.epochs, rs);
  }
  const int64_t samples = (g.epochs * T - 1) / L;
  g.sample_index = sample_starts(sizes, g.document_index, L, samples);
  if (g.separate_final_epoch) {
    append_shuffled(g.shuffle_index, 0, sans_final, rs);
    append_shuffled(g.shuffle_index, sans_final, samples, rs);
  } else {
    append_shuffled(g.shuffle_index, 0, samples, rs);
  }
  return g;
}

double numpy_sum(const std::vector<double>& v) {
  // numpy's pairwise_sum: sequential below 8 elements, 8 accumulators up to 128,
  // else the halves (the first a multiple of 8) summed apart.
  const auto pairwise = [](const auto& self, const double* a, size_t n) -> double {
    if (n < 8) {
      double r = 0;
      for (size_t i = 0; i < n; ++i) r += a[i];
      return r;
    }
    if (n <= 128) {
      double r[8];
      for (size_t j = 0; j < 8; ++j) r[j] = a[j];
      size_t i = 8;
      for (; i < n - n % 8; i += 8)
        for (size_t j = 0; j < 8; ++j) r[j] += a[i + j];
      double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
      for (; i < n; ++i) res += a[i];
      return res;
    }
    size_t half = n / 2;
    half -= half % 8;
    return self(self, a, half) + self(self, a + half, n - half);
  };
  return pairwise(pairwise, v.data(), v.size());
}

std::vector<double> numpy_normalize(const std::vector<double>& w) {
  const double sum = numpy_sum(w);
  std::vector<double> out;
  for (double x : w) out.push_back(x / sum);
  return out;
}

void build_blending_indices(const std::vector<double>& weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
  dataset_index.assign(static_cast<size_t>(size), 0);
  dataset_sample_index.assign(static_cast<size_t>(size), 0);
  std::vector<int64_t> taken(weights.size(), 0);
  // NOTE [blended sample order]: the dataset furthest behind its share, the lowest on a tie.
  for (int64_t p = 0; p < size; ++p) {
    const double at = std::max(static_cast<double>(p), 1.0);
    size_t best = 0;
    double best_error = weights[0] * at - static_cast<double>(taken[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * at - static_cast<double>(taken[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    dataset_index[static_cast<size_t>(p)] = static_cast<int16_t>(best);
    dataset_sample_index[static_cast<size_t>(p)] = taken[best]++;
  }
}

MegatronSamples::MegatronSamples(const std::vector<MegatronPart>& parts, bool blend, int64_t num_samples,
                                 int64_t seq_len, uint32_t seed, std::string split, const MegatronCache& cache,
                                 double surplus)
    : seq_len_(seq_len), split_(std::move(split)) {
  if (parts.empty() || (!blend && parts.size() != 1))
    throw std::logic_error("MegatronSamples: one dataset, or a blend of at least one");
  if (parts.size() >= 32767) throw DataError("a blend of " + std::to_string(parts.size()) + " datasets: megatron-core "
                                             "blends fewer than 32767");
  std::vector<double> weights;
  for (const MegatronPart& p : parts) weights.push_back(p.weight);
  const std::vector<double> once = numpy_normalize(weights);
  int64_t blend_size = 0;
  for (size_t d = 0; d < parts.size(); ++d) {
    int64_t asked = num_samples;
    if (blend) {
      const double target = std::ceil(static_cast<double>(num_samples) * once[d]);
      blend_size += static_cast<int64_t>(target);
      asked = static_cast<int64_t>(std::ceil(target * (1 + surplus)));
    }
    std::vector<int32_t> sizes(parts[d].dataset->sequence_count());
    for (size_t s = 0; s < sizes.size(); ++s) sizes[s] = parts[d].dataset->sequence_length(s);
    try {
      const GptCacheKey key{parts[d].dataset->prefix(), split_,        asked,        seq_len,
                            seed,                       parts[d].begin, parts[d].end, parts[d].dataset->sequence_count()};
      std::optional<GptIndices> cached;
      if (!cache.dir.empty()) cached = read_gpt_cache(cache.dir, key, sizes);
      cached_ += cached.has_value();
      if (!cached) {
        cached = build_gpt_indices(sizes, parts[d].begin, parts[d].end, asked, seq_len, seed);
        if (!cache.dir.empty() && cache.write) {
          write_gpt_cache(cache.dir, key, {cache.split, cache.tokenizer}, *cached);
          ++written_;
        }
      }
      parts_.push_back({parts[d].dataset, std::move(*cached), parts[d].loss_mask});
    } catch (const DataError& e) {
      throw DataError(parts[d].dataset->prefix() + " (" + split_ + " split): " + e.what());
    }
  }
  if (!blend) {
    size_ = parts_[0].indices.samples();
    return;
  }
  size_ = blend_size;
  build_blending_indices(numpy_normalize(once), size_, dataset_index_, dataset_sample_index_);
  std::vector<int64_t> count(parts_.size(), 0);
  for (int16_t d : dataset_index_) ++count[static_cast<size_t>(d)];
  for (size_t d = 0; d < parts_.size(); ++d)
    if (count[d] > parts_[d].indices.samples())
      throw DataError("the " + split_ + " blend takes " + std::to_string(count[d]) + " samples from " +
                      parts_[d].dataset->prefix() + ", which has " + std::to_string(parts_[d].indices.samples()) +
                      " (megatron-core fails the same way: raise its mid_level_dataset_surplus)");
}

std::pair<size_t, int64_t> MegatronSamples::locate(int64_t position) const {
  if (position < 0 || position >= size_)
    throw DataError("sample " + std::to_string(position) + " of the " + split_ + " split: there are " +
                    std::to_string(size_) + " (Megatron's order builds as many as the run asks for)");
  if (dataset_index_.empty()) return {0, position};
  return {static_cast<size_t>(dataset_index_[static_cast<size_t>(position)]),
          dataset_sample_index_[static_cast<size_t>(position)]};
}

std::vector<int64_t> MegatronSamples::global_batch(int64_t step, int64_t global_batch_size) const {
  if (step < 0) throw DataError("step must be >= 0, got " + std::to_string(step));
  if (global_batch_size < 1) throw DataError("global batch size must be >= 1, got " + std::to_string(global_batch_size));
  std::vector<int64_t> batch;
  for (int64_t j = 0; j < global_batch_size; ++j) batch.push_back(step * global_batch_size + j);
  locate(batch.back());  // throws when the step lies beyond the samples built
  return batch;
}

std::vector<int64_t> MegatronSamples::micro_batch(int64_t step, int64_t global_batch_size, int64_t dp_rank, int64_t dp,
                                                  int64_t micro_index, int64_t micro_batch_size) const {
  check_micro_batch(global_batch_size, dp_rank, dp, micro_index, micro_batch_size);
  // MegatronPretrainingSampler: batches of dp * mbs consecutive positions; rank r's
  // micro-batch is the r-th mbs of one.
  const int64_t first = step * global_batch_size + micro_index * dp * micro_batch_size + dp_rank * micro_batch_size;
  std::vector<int64_t> out;
  for (int64_t j = 0; j < micro_batch_size; ++j) out.push_back(first + j);
  locate(out.back());
  return out;
}

DataError MegatronSamples::short_or_long(int64_t position) const {
  return DataError("sample " + std::to_string(position) + " of the " + split_ + " split is not seq_len + 1 = " +
                   std::to_string(seq_len_ + 1) + " tokens: an index cache in data.cache_dir built for other data?");
}

template <class Take>
void MegatronSamples::walk_sample(int64_t position, Take take) const {
  const auto [d, k] = locate(position);
  const Part& part = parts_[d];
  const GptIndices& g = part.indices;
  const auto s = static_cast<size_t>(g.shuffle_index[static_cast<size_t>(k)]);
  const int64_t first = g.sample_index[2 * s], first_offset = g.sample_index[2 * s + 1];
  const int64_t last = g.sample_index[2 * s + 2], last_offset = g.sample_index[2 * s + 3];
  int64_t n = 0;
  for (int64_t at = first; at <= last; ++at) {
    const auto seq = static_cast<uint64_t>(g.document_index[static_cast<size_t>(at)]);
    const int64_t from = at == first ? first_offset : 0;
    const int64_t to = at == last ? last_offset + 1 : part.dataset->sequence_length(seq);
    if (n + (to - from) > seq_len_ + 1) throw short_or_long(position);
    const uint64_t base = part.dataset->sequence_offset(seq);
    for (int64_t x = from; x < to; ++x) take(part, n++, base + static_cast<uint64_t>(x));
  }
  // Only a partial last sample (never built: drop_last_partial_sequence) would be short.
  if (n != seq_len_ + 1) throw short_or_long(position);
}

void MegatronSamples::copy_sample(int64_t position, int64_t* out) const {
  const TokenView* tokens = nullptr;
  TokenView view;
  walk_sample(position, [&](const Part& part, int64_t n, uint64_t at) {
    if (tokens == nullptr) tokens = &(view = part.dataset->tokens());
    out[n] = (*tokens)[at];
  });
}

bool MegatronSamples::has_loss_masks() const {
  for (const Part& p : parts_)
    if (p.loss_mask == nullptr) return false;
  return !parts_.empty();
}

void MegatronSamples::copy_sample_loss_mask(int64_t position, uint8_t* out) const {
  if (!has_loss_masks()) SampleSource::copy_sample_loss_mask(position, out);
  walk_sample(position, [&](const Part& part, int64_t n, uint64_t at) { out[n] = (*part.loss_mask)[at]; });
}

}  // namespace trident::data
