#include "checkpoint/safetensors_shards.h"

#include <cstdio>

#include "core/atomic_file.h"
#include "core/json.h"

namespace trident::safetensors {

void ShardWriter::reserve(int64_t bytes) {
  if (shard_bytes_ > 0 && in_shard_ > 0 && in_shard_ + bytes > shard_bytes_) shards_.emplace_back(), in_shard_ = 0;
  in_shard_ += bytes;
  total_ += bytes;
}

int ShardWriter::write(const std::string& dir) const {
  if (shard_bytes_ <= 0) {
    write_file(dir + "/model.safetensors", shards_[0], {{"format", "pt"}});
    return static_cast<int>(shards_[0].size());
  }
  int n = 0;
  json::Value map = json::Value::object();
  for (size_t k = 0; k < shards_.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards_.size());
    write_file(dir + "/" + name, shards_[k], {{"format", "pt"}});
    for (const Tensor& t : shards_[k]) map[t.name] = json::Value(name), ++n;
  }
  json::Value index = json::Value::object();
  json::Value meta = json::Value::object();
  meta["total_size"] = json::number(total_);
  index["metadata"] = meta;
  index["weight_map"] = map;
  write_file_atomic(dir + "/model.safetensors.index.json", json::dump(index, 2) + "\n");
  return n;
}

}  // namespace trident::safetensors
