// Reading the index caches megatron-core writes for a GPTDataset
// (`<md5>-GPTDataset-<split>-{description.txt,document_index.npy,sample_index.npy,
// shuffle_index.npy}` in its path_to_cache, gpt_dataset.py), so a Megatron user's
// caches are read instead of built again (data.cache_dir).
//
// NOTE [Megatron index caches]
// The file names carry the md5 of the description, a JSON object whose members
// include the tokenizer's identifiers, which Trident cannot know; so a cache is
// found by its description instead: class "GPTDataset", the dataset_path (compared
// as canonical paths), num_samples, index_split ("train", "valid"), random_seed,
// sequence_length, and the split_matrix's book-ends for the split, cut into
// sequences as megatron-core cuts them (int(round(share * n))). The three arrays
// are .npy files (version 1 to 3, little-endian int32, int64 or uint32, C order)
// and are checked against each other and the dataset before they are used.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/data/megatron_samples.h"

namespace trident::data {

// What a cache must have been built for.
struct GptCacheKey {
  std::string dataset_path;   // the dataset's PREFIX
  std::string index_split;    // "train" | "valid"
  int64_t num_samples = 0;
  int64_t sequence_length = 0;
  uint32_t random_seed = 0;
  uint64_t begin = 0, end = 0;  // the split's sequences
  uint64_t sequences = 0;       // the dataset's sequence count
};

// The indices of the cache in `dir` built for `key`, or nothing when none is.
// Throws DataError naming the file when a matching cache cannot be read or its
// arrays do not fit together or the dataset.
std::optional<GptIndices> read_gpt_cache(const std::string& dir, const GptCacheKey& key,
                                         const std::vector<int32_t>& sizes);

// A .npy file's 1-D or 2-D integer array (int32, int64 or uint32), as int64.
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<int64_t> values;
};
NpyArray read_npy(const std::string& path);

}  // namespace trident::data
