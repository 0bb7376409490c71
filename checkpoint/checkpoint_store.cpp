// Sharded tensor store, writing side: NOTE [checkpoint format] and
// [checkpoint atomicity] in checkpoint_store.h. The reader is in checkpoint_reader.cpp.
#include "checkpoint/checkpoint_store.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <future>

#include "core/atomic_file.h"
#include "checkpoint/checkpoint_index.h"
#include "core/json.h"
#include "checkpoint/safetensors.h"

namespace fs = std::filesystem;

namespace trident::ckpt {

using namespace detail;

namespace {
constexpr uint64_t kAlign = 64;  // entries start 64-byte aligned in a .bin
}  // namespace

// ---- writer -----------------------------------------------------------------

struct ShardWriter::Impl {
  std::string step_dir, base;  // base: step_dir/rank-RRRRR
  int rank = 0, world = 0;
  int64_t step = 0;
  std::unique_ptr<AtomicFile> bin;
  json::Value entries = json::Value::array(), blobs = json::Value::array();
  Meta meta;
  bool finished = false;

  uint64_t append(const void* data, size_t n) {
    static const char zeros[kAlign] = {};
    const uint64_t pad = (kAlign - bin->size() % kAlign) % kAlign;
    bin->write(zeros, pad);
    const uint64_t at = bin->size();
    bin->write(data, n);
    return at;
  }
};

ShardWriter::ShardWriter(const std::string& dir, int64_t step, int rank, int world) : impl_(new Impl) {
  if (rank < 0 || rank >= world)
    throw CheckpointError("ShardWriter: rank " + std::to_string(rank) + " is outside world " + std::to_string(world));
  const std::string name = step_dir_name(step);
  std::error_code ec;
  if (fs::exists(dir + "/latest") && read_file(dir + "/latest") == name + "\n")
    throw CheckpointError(dir + "/" + name + " is the checkpoint `latest` names; it is never rewritten in place");
  impl_->step_dir = dir + "/" + name;
  fs::create_directories(impl_->step_dir, ec);
  if (ec) throw CheckpointError("cannot create " + impl_->step_dir + ": " + ec.message());
  impl_->base = impl_->step_dir + "/" + rank_name(rank);
  impl_->rank = rank;
  impl_->world = world;
  impl_->step = step;
  impl_->meta.step = step;
  // Rewriting a complete but not-latest step: it stops being complete until
  // commit() writes a new manifest, so a crash now cannot leave a mix of old and
  // new rank files that claims to be whole.
  fs::remove(impl_->step_dir + "/manifest.json", ec);
  impl_->bin = std::make_unique<AtomicFile>(impl_->base + ".bin");
}

ShardWriter::~ShardWriter() = default;

void ShardWriter::add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& full_shape,
                      const std::vector<int64_t>& offset, const std::vector<int64_t>& extent, const void* data) {
  add_flat(name, dtype, full_shape, offset, extent, 0, volume(extent), data);
}

void ShardWriter::add_flat(const std::string& name, const std::string& dtype, const std::vector<int64_t>& full_shape,
                           const std::vector<int64_t>& offset, const std::vector<int64_t>& extent, int64_t flat_begin,
                           int64_t flat_count, const void* data) {
  if (impl_->finished) throw std::logic_error("ShardWriter::add after finish");
  check_box(name, full_shape, offset, extent, impl_->base + ".bin");
  if (flat_begin < 0 || flat_count < 0 || flat_begin + flat_count > volume(extent))
    throw CheckpointError("tensor " + name + ": flat range [" + std::to_string(flat_begin) + ", " +
                          std::to_string(flat_begin + flat_count) + ") is outside its box of " +
                          std::to_string(volume(extent)) + " elements");
  const size_t nbytes = static_cast<size_t>(flat_count) * safetensors::dtype_size(dtype);
  json::Value e = json::Value::object();
  e["name"] = json::Value(name);
  e["dtype"] = json::Value(dtype);
  e["full_shape"] = int_array(full_shape);
  e["offset"] = int_array(offset);
  e["extent"] = int_array(extent);
  e["flat_begin"] = json::number(flat_begin);
  e["flat_count"] = json::number(flat_count);
  // The checksum (byte-wise FNV-1a, ~1 GB/s) of a large tensor is computed on
  // a second thread while the first copies it into the file.
  constexpr size_t kHashAside = 4 << 20;
  std::future<uint64_t> sum;
  if (nbytes >= kHashAside) sum = std::async(std::launch::async, [data, nbytes] { return fnv1a64(data, nbytes); });
  e["byte_offset"] = json::number(static_cast<int64_t>(impl_->append(data, nbytes)));
  e["nbytes"] = json::number(static_cast<int64_t>(nbytes));
  e["fnv1a64"] = json::Value(hex(sum.valid() ? sum.get() : fnv1a64(data, nbytes)));
  impl_->entries.push_back(e);
}

void ShardWriter::add_blob(const std::string& name, const std::string& bytes) {
  if (impl_->finished) throw std::logic_error("ShardWriter::add_blob after finish");
  json::Value b = json::Value::object();
  b["name"] = json::Value(name);
  b["byte_offset"] = json::number(static_cast<int64_t>(impl_->append(bytes.data(), bytes.size())));
  b["nbytes"] = json::number(static_cast<int64_t>(bytes.size()));
  b["fnv1a64"] = json::Value(hex(fnv1a64(bytes.data(), bytes.size())));
  impl_->blobs.push_back(b);
}

void ShardWriter::set_meta(const Meta& meta) {
  impl_->meta = meta;
  impl_->meta.step = impl_->step;
}

void ShardWriter::finish() {
  if (impl_->finished) throw std::logic_error("ShardWriter::finish twice");
  impl_->finished = true;
  const uint64_t bin_size = impl_->bin->size();
  impl_->bin->commit();
  json::Value index = json::Value::object();
  index["format"] = json::Value(kFormat);
  index["format_version"] = json::number(kFormatVersion);
  index["rank"] = json::number(static_cast<int64_t>(impl_->rank));
  index["world"] = json::number(static_cast<int64_t>(impl_->world));
  index["bin_size"] = json::number(static_cast<int64_t>(bin_size));
  index["meta"] = meta_json(impl_->meta);
  index["entries"] = impl_->entries;
  index["blobs"] = impl_->blobs;
  write_file_atomic(impl_->base + ".json", json::dump(index, 1) + "\n");
}

void commit(const std::string& dir, int64_t step, int world, int keep) {
  if (keep < 1) throw CheckpointError("checkpoint.keep = " + std::to_string(keep) + ": expected an integer >= 1");
  const std::string name = step_dir_name(step), sd = dir + "/" + name;
  json::Value meta;
  for (int r = 0; r < world; ++r) {
    json::Value idx = checked_index(sd, r, step, world);
    if (r == 0) meta = json::at(idx, "meta", sd);
  }
  // Files of ranks beyond this world (an earlier, crashed attempt) and temp files.
  for (const auto& f : fs::directory_iterator(sd)) {
    const std::string fn = f.path().filename().string();
    int r = -1;
    const bool stray_rank = std::sscanf(fn.c_str(), "rank-%d.", &r) == 1 && r >= world;
    if (stray_rank || (fn.size() > 4 && fn.compare(fn.size() - 4, 4, ".tmp") == 0)) fs::remove(f.path());
  }
  json::Value manifest = json::Value::object();
  manifest["format"] = json::Value(kFormat);
  manifest["format_version"] = json::number(kFormatVersion);
  manifest["world"] = json::number(static_cast<int64_t>(world));
  manifest["meta"] = meta;
  write_file_atomic(sd + "/manifest.json", json::dump(manifest, 1) + "\n");
  write_file_atomic(dir + "/latest", name + "\n");  // the commit point

  // Prune: the step just committed stays, and the newest keep - 1 other complete steps.
  std::vector<std::pair<int64_t, fs::path>> complete;
  for (const auto& d : fs::directory_iterator(dir)) {
    const int64_t s = step_of(d.path().filename().string());
    if (s < 0 || !d.is_directory() || s == step) continue;
    if (fs::exists(d.path() / "manifest.json")) complete.emplace_back(s, d.path());
    else fs::remove_all(d.path());  // an unfinished save
  }
  std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; i < complete.size(); ++i)
    if (static_cast<int>(i) + 1 >= keep) fs::remove_all(complete[i].second);
  fsync_dir(dir);
}

}  // namespace trident::ckpt
