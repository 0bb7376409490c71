// A model written as Hugging Face writes one (save_pretrained): its tensors,
// in order, in DIR/model.safetensors, or, sharded, in
// model-0000K-of-0000N.safetensors files of at most about shard_bytes each
// plus model.safetensors.index.json ({"metadata": {"total_size": bytes},
// "weight_map": {tensor: file}}). Pure C++ (no libtorch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace trident::safetensors {

class ShardWriter {
 public:
  explicit ShardWriter(int64_t shard_bytes) : shard_bytes_(shard_bytes), shards_(1) {}
  // Room for `bytes` more, counted in total_size: the next shard starts where they would take a
  // non-empty one past shard_bytes (a shard holds at least one such group, whatever its size).
  void reserve(int64_t bytes);
  // A tensor into the current shard (its bytes counted only where reserve() counted them).
  void add(Tensor t) { shards_.back().push_back(std::move(t)); }
  // Writes the files into `dir` (which must exist), each with {"format": "pt"}; returns the tensors written.
  int write(const std::string& dir) const;

 private:
  int64_t shard_bytes_;  // <= 0: one file, unsharded
  std::vector<std::vector<Tensor>> shards_;
  int64_t in_shard_ = 0, total_ = 0;
};

}  // namespace trident::safetensors
