// Megatron-LM's indexed datasets (`PREFIX.bin` + `PREFIX.idx`, "MMIDIDX"), read
// memory-mapped: `data.format = "megatron"`.
//
// NOTE [Megatron index format] (megatron/core/datasets/indexed_dataset.py,
// _IndexWriter; little-endian):
//   offset  0  char[9]  magic "MMIDIDX\0\0";  offset 9  u64  version (1)
//   offset 17  u8       dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//                       6 float64, 7 float32, 8 uint16
//   offset 18  u64      sequence count S;  offset 26  u64  document index count D (documents + 1)
//   offset 34  int32[S] sequence lengths, in tokens
//              int64[S] sequence pointers: byte offsets into PREFIX.bin
//              int64[D] document indices: each document's first sequence, from 0 up to S
//   (a multimodal index adds int8[S] sequence modes: not read here)
// PREFIX.bin is the sequences' tokens in the dtype, back to back. Trident reads uint16 and
// int32 files (Megatron's preprocess_data.py's for vocabularies below and above 65500) and
// trains on the sequences in order (of one split, see megatron_split); the sample order of
// datasets/README.md applies to it. MegatronWriter writes the files as preprocess_data.py
// does without --split-sentences: one sequence per document.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "datasets/token_file.h"

namespace trident::data {

// Maps PREFIX.idx and PREFIX.bin and checks everything at open: the header, the
// index's size, that the sequences lie back to back and fill PREFIX.bin, the
// document indices, and no negative token id. Throws DataError naming the file and
// what is wrong.
class MegatronDataset {
 public:
  explicit MegatronDataset(const std::string& prefix);
  ~MegatronDataset();
  MegatronDataset(const MegatronDataset&) = delete;
  MegatronDataset& operator=(const MegatronDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  uint8_t dtype_code() const { return dtype_code_; }
  uint64_t sequence_count() const { return sequences_; }
  uint64_t document_count() const { return document_indices_ - 1; }
  // Read from the mapped index (its arrays are not aligned: offset 34).
  int32_t sequence_length(uint64_t i) const;
  int64_t sequence_pointer(uint64_t i) const;
  int64_t document_index(uint64_t i) const;  // i = 0 .. document_count()
  // Where sequence i starts in tokens(), in tokens.
  uint64_t sequence_offset(uint64_t i) const { return static_cast<uint64_t>(sequence_pointer(i)) / dtype_bytes_; }
  // Every sequence's tokens, back to back (the whole of PREFIX.bin).
  TokenView tokens() const;
  // The tokens of sequences [first, last), back to back (a split's stream).
  TokenView tokens(uint64_t first, uint64_t last, const std::string& source) const;
  std::vector<uint32_t> sequence(uint64_t i) const;
  // Throws naming PREFIX.bin, the position and the id of the first token >= vocab_size.
  void check_vocab(int64_t vocab_size) const;

 private:
  struct Mapping {
    void* data = nullptr;
    size_t bytes = 0;
  };
  void open(const std::string& path, Mapping& m);
  void release();
  std::string prefix_, idx_path_, bin_path_;
  Mapping idx_, bin_;
  uint8_t dtype_code_ = 0;
  uint32_t dtype_bytes_ = 0;
  uint64_t sequences_ = 0, document_indices_ = 0, token_count_ = 0;
};

// Writes PREFIX.bin as documents arrive and PREFIX.idx at finish(), one sequence per
// document, in the dtype Megatron picks for the vocabulary (DType.optimal_dtype:
// uint16 below 65500, else int32). Throws DataError naming the file when it cannot
// be written or a token is >= vocab_size. A writer destroyed before finish()
// leaves no PREFIX.idx.
class MegatronWriter {
 public:
  MegatronWriter(const std::string& prefix, uint32_t vocab_size);
  ~MegatronWriter();
  MegatronWriter(const MegatronWriter&) = delete;
  MegatronWriter& operator=(const MegatronWriter&) = delete;

  void add_document(const std::vector<uint32_t>& tokens);
  void finish();
  uint8_t dtype_code() const { return dtype_code_; }
  uint64_t documents() const { return lengths_.size(); }
  uint64_t tokens() const { return tokens_; }

 private:
  std::string prefix_;
  uint32_t vocab_size_;
  uint8_t dtype_code_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  uint64_t tokens_ = 0;
  std::vector<unsigned char> buffer_;
};

// data.split's shares (split_problem in core/data_values.h: the rule the config
// checks), throwing DataError naming the text when they are not valid.
std::array<double, 3> parse_split(const std::string& text);

// NOTE [Megatron split]
// The [begin, end) ranges of train, valid and test over `elements` sequences,
// as megatron-core cuts a GPT dataset (blended_megatron_dataset_builder.py,
// _build_megatron_dataset_splits; for GPT the elements are the index's
// sequences, numel_low_level_dataset, which are its documents when each
// document is one sequence, as preprocess_data.py and `trident data prepare`
// write them): the book-ends are the running sums 0, w0, w0 + w1, w0 + w1 + w2
// (convert_split_vector_to_split_matrix), a split whose book-ends do not
// increase is absent (an empty range here), and a present split is
// [int(round(lo * n)), int(round(hi * n))) with Python's round: half to even.
std::array<std::array<uint64_t, 2>, 3> megatron_split(const std::array<double, 3>& split, uint64_t elements);

}  // namespace trident::data
