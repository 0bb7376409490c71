// A layout-agnostic sharded tensor store for checkpoints. Pure C++ (bytes and
// shapes; checkpoint/checkpoint_tensors.h adapts at::Tensor).
//
// NOTE [checkpoint format]
//   DIR/latest                         "step-00000100\n": the checkpoint to load
//   DIR/step-00000100/manifest.json    written by commit(): the step is complete
//   DIR/step-00000100/rank-00003.bin   rank 3's raw little-endian tensor bytes and blobs
//   DIR/step-00000100/rank-00003.json  rank 3's index: for every entry its global name,
//                                      dtype, full shape, offset and extent of the box it
//                                      holds, [flat range], byte range and FNV-1a 64 checksum;
//                                      blobs (RNG state, data position) the same way; meta
// Every entry is a slice of a global tensor named as in the model (e.g.
// "layers.3.attn.qkv.weight"): the box [offset, offset + extent) of a tensor of
// full_shape, or elements [flat_begin, flat_begin + flat_count) of that box in
// row-major order (a ZeRO shard of a flattened parameter). A reader of any other
// layout asks for the box it needs and gets it assembled from whichever entries
// cover it, so resharding needs no conversion step.
//
// NOTE [checkpoint atomicity]
//   Each rank writes rank-R.bin then rank-R.json, each as temp file + fsync +
//   rename (atomic_file.h); the .json lands last, so its presence means the
//   .bin is whole. After a barrier, rank 0's commit() checks every rank's
//   index, writes manifest.json, and only then moves DIR/latest (again temp +
//   fsync + rename) and prunes old steps. A crash at any point before the
//   rename of `latest` leaves `latest` naming the previous complete step.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace trident::ckpt {

// A caller error: a missing, truncated or corrupted file, a tensor of another
// shape, a slice no shard covers. Names the file and/or tensor.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// 64-bit FNV-1a of a byte range (continue a running hash by passing it as h).
constexpr uint64_t kFnvOffset = 14695981039346656037ULL;
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnvOffset);

// What a checkpoint records besides tensors.
struct Meta {
  int64_t step = 0;
  std::string config_toml;                   // the effective config (to_toml)
  std::string layout;                        // e.g. "tp=2 pp=2 dp=1" (informational)
  std::string trident_version;               // filled by the writer when empty
  std::map<std::string, std::string> extra;  // small scalars, e.g. {"lr_step": "100"}
};

std::string step_dir_name(int64_t step);  // "step-00000100"

// Writes one rank's share of a checkpoint. Entries stream into the temp .bin as
// they are added; finish() makes them durable. Destroying an unfinished writer
// leaves no rank file behind (only the previous checkpoint stays valid).
class ShardWriter {
 public:
  // Throws when `step` is the step DIR/latest names: overwriting the loadable
  // checkpoint in place would break NOTE [checkpoint atomicity].
  ShardWriter(const std::string& dir, int64_t step, int rank, int world);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // The box [offset, offset + extent) of global tensor `name` (full shape
  // `full_shape`), `data` its row-major elements in `dtype` (safetensors names:
  // "F32", "I64", ...). A scalar has empty shapes.
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& full_shape,
           const std::vector<int64_t>& offset, const std::vector<int64_t>& extent, const void* data);
  // Elements [flat_begin, flat_begin + flat_count) of that box in row-major order.
  void add_flat(const std::string& name, const std::string& dtype, const std::vector<int64_t>& full_shape,
                const std::vector<int64_t>& offset, const std::vector<int64_t>& extent, int64_t flat_begin,
                int64_t flat_count, const void* data);
  // Opaque per-rank bytes (RNG state, data position).
  void add_blob(const std::string& name, const std::string& bytes);
  void set_meta(const Meta& meta);
  // fsync + rename rank-R.bin, then rank-R.json. No adds after this.
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Rank 0, after every rank's finish() (a barrier): checks each rank's files,
// writes manifest.json, moves DIR/latest to this step, then removes all but the
// `keep` newest complete steps (the one `latest` names always stays) and any
// incomplete step directories left by crashed saves.
void commit(const std::string& dir, int64_t step, int world, int keep);

// The step directory a resume loads from DIR: the one DIR/latest names, or,
// when `latest` is gone (deleted by hand, lost with a node's disk), the newest
// step holding manifest.json (complete; NOTE [checkpoint atomicity]). "" when
// DIR holds no complete step. A `latest` that names no step directory throws,
// showing its bytes escaped. `from_latest` (optional) says which of the two.
std::string newest_step(const std::string& dir, bool* from_latest = nullptr);

// One stored entry, as the reader indexes it.
struct EntryInfo {
  std::string name, dtype, file;  // file: the .bin holding it
  std::vector<int64_t> full_shape, offset, extent;
  int64_t flat_begin = 0, flat_count = 0;  // flat_count = volume of the box unless a flat range
  uint64_t byte_offset = 0, nbytes = 0, checksum = 0;
};

class Reader {
 public:
  // `path`: a checkpoint directory (newest_step()) or one step directory.
  // Reads every rank's index; a missing or unparsable file, or a .bin shorter
  // than its index says, throws naming the file (and the first tensor cut off).
  explicit Reader(const std::string& path);

  int64_t step() const { return meta_.step; }
  int world() const { return world_; }
  const Meta& meta() const { return meta_; }
  const std::string& step_dir() const { return step_dir_; }

  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  std::vector<std::string> names() const;
  // Full shape and dtype as stored (throws naming the tensor when absent).
  const std::vector<int64_t>& full_shape(const std::string& name) const;
  const std::string& dtype(const std::string& name) const;
  size_t slices(const std::string& name) const;  // stored entries of `name` (replicas included)

  // The row-major bytes of box [offset, offset + extent) of `name`. Throws
  // CheckpointError naming the tensor and both shapes when the stored full shape
  // (or dtype) differs from the one asked for; naming the file and tensor on a
  // checksum mismatch; when the stored shards do not cover the box; and when two
  // shards holding the same elements disagree.
  std::string read(const std::string& name, const std::string& dtype, const std::vector<int64_t>& full_shape,
                   const std::vector<int64_t>& offset, const std::vector<int64_t>& extent) const;
  std::string read_full(const std::string& name, const std::string& dtype,
                        const std::vector<int64_t>& full_shape) const;

  bool has_blob(int rank, const std::string& name) const;
  std::string blob(int rank, const std::string& name) const;  // checksum-verified

  // Reads every entry and blob and checks its checksum (throws on the first bad one).
  void verify() const;

 private:
  std::string load(const EntryInfo& e) const;  // the entry's bytes, checksum-verified

  std::string step_dir_;
  int world_ = 0;
  Meta meta_;
  std::map<std::string, std::vector<EntryInfo>> entries_;
  std::map<std::pair<int, std::string>, EntryInfo> blobs_;
};

}  // namespace trident::ckpt
