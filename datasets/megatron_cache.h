// The index caches megatron-core keeps for a GPTDataset
// (`<md5>-GPTDataset-<split>-{description.txt,document_index.npy,sample_index.npy,
// shuffle_index.npy}` in its path_to_cache, gpt_dataset.py): read, so a Megatron
// user's caches are not built again, and written when data.cache_dir holds none,
// so megatron-core loads Trident's instead of building its own.
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
// NOTE [Megatron cache writes]
// Written (when no cache matches), they are what megatron-core writes for the same
// GPTDataset, byte for byte: the description is its unique_description,
// json.dumps(indent=4) of class, dataset_path (data.path or the data.paths entry, as
// given), num_samples, index_split, random_seed, sequence_length, split (data.split, as
// given), split_matrix (its book-ends, the first 0 an integer, a split without share
// null) and tokenizer (data.cache_tokenizer: Trident's tokenizers are not megatron-core's);
// files are named by its md5. The arrays are numpy.save 1.0 files in C order: document
// index int32, sample index int32 (int64 once the document index passes 2^31 - 1 entries,
// as helpers.build_sample_idx chooses), shuffle index uint32 (int64 from 2^32 - 2 samples).
// Each goes to a temp file named for its process and is renamed into place, description
// last: a reader that finds it finds whole arrays (read_gpt_cache starts from it), and two
// writers of one cache write identical bytes, never sharing a temp file. Only global rank 0
// writes, as in megatron-core; a folder that cannot be written, when a cache must be, is
// an error naming the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/data_values.h"
#include "datasets/megatron_samples.h"

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

// What a written cache's description holds beyond the key.
struct GptCacheText {
  std::string split;      // data.split as given, e.g. "969,30,1"
  std::string tokenizer;  // data.cache_tokenizer: a JSON object, the tokenizer's unique_identifiers
};

// megatron-core's unique_description of the GPTDataset `key` describes.
// Throws DataError when text.split or text.tokenizer cannot be read.
std::string gpt_cache_description(const GptCacheKey& key, const GptCacheText& text);

// Writes the cache of `g` (built for `key`) into `dir` as megatron-core would,
// returning the files' common prefix (dir/<md5>-GPTDataset-<split>). Throws
// DataError naming the file that cannot be written.
std::string write_gpt_cache(const std::string& dir, const GptCacheKey& key, const GptCacheText& text,
                            const GptIndices& g);

// The bytes of numpy.save (format 1.0) of a C-order array: descr "<i4", "<u4"
// or "<i8", `data` holding the product of `shape` elements of that width.
std::string npy_bytes(const std::string& descr, const std::vector<int64_t>& shape, const void* data);

// What data.cache_tokenizer's value lacks to be a tokenizer's unique_identifiers
// (the config's rule, core/data_values.h).
using trident::cache_tokenizer_problem;

// Python's repr() of a float, and the hex md5 of bytes (hashlib.md5().hexdigest()).
std::string python_float_repr(double v);
std::string md5_hex(const std::string& bytes);

}  // namespace trident::data
