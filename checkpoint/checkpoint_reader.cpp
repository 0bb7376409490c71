// Sharded tensor store, reading side: indexes every rank's entries by global
// name and assembles any requested box from the entries that cover it.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/atomic_file.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/checkpoint_store.h"
#include "core/json.h"
#include "checkpoint/safetensors.h"

namespace fs = std::filesystem;

namespace trident::ckpt {

using namespace detail;

namespace {

// The box entries a flat range [a, b) of a box of `extent` consists of, in
// row-major order, as (offset, extent) relative to the box. At most 2·ndim - 1
// boxes: a partial leading row (recursively), whole rows, a partial trailing row.
void decompose(const std::vector<int64_t>& extent, size_t dim, int64_t a, int64_t b, std::vector<int64_t> prefix,
               std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& out) {
  if (a >= b) return;
  const size_t nd = extent.size();
  int64_t inner = 1;
  for (size_t d = dim + 1; d < nd; ++d) inner *= extent[d];
  auto emit = [&](int64_t row0, int64_t rows) {  // whole rows [row0, row0 + rows) of dim
    std::vector<int64_t> off = prefix, ext(prefix.size(), 1);
    off.push_back(row0);
    ext.push_back(rows);
    for (size_t d = dim + 1; d < nd; ++d) off.push_back(0), ext.push_back(extent[d]);
    out.emplace_back(off, ext);
  };
  auto partial = [&](int64_t row, int64_t lo, int64_t hi) {  // part [lo, hi) of one row
    std::vector<int64_t> p = prefix;
    p.push_back(row);
    decompose(extent, dim + 1, lo, hi, p, out);
  };
  int64_t r0 = a / inner;
  const int64_t r1 = (b - 1) / inner;
  if (r0 == r1) {  // within one row of this dimension
    if (a % inner == 0 && b - a == inner) return emit(r0, 1);
    return partial(r0, a - r0 * inner, b - r0 * inner);  // inner > 1 here, so dim + 1 < ndim
  }
  if (a % inner != 0) partial(r0, a - r0 * inner, inner), ++r0;
  const int64_t end_row = b / inner;  // rows [r0, end_row) are whole
  if (end_row > r0) emit(r0, end_row - r0);
  if (b % inner != 0) partial(end_row, 0, b - end_row * inner);
}

// Copies the part of `src` (holding box src_off/src_ext) that lies inside the
// box dst_off/dst_ext into dst. Returns the number of elements copied.
int64_t copy_intersection(const char* src, const std::vector<int64_t>& src_off, const std::vector<int64_t>& src_ext,
                          char* dst, const std::vector<int64_t>& dst_off, const std::vector<int64_t>& dst_ext,
                          size_t esize) {
  const size_t nd = src_off.size();
  std::vector<int64_t> lo(nd), hi(nd);
  for (size_t d = 0; d < nd; ++d) {
    lo[d] = std::max(src_off[d], dst_off[d]);
    hi[d] = std::min(src_off[d] + src_ext[d], dst_off[d] + dst_ext[d]);
    if (lo[d] >= hi[d]) return 0;
  }
  if (nd == 0) {
    std::memcpy(dst, src, esize);
    return 1;
  }
  std::vector<int64_t> sstride(nd, 1), dstride(nd, 1);
  for (size_t d = nd - 1; d > 0; --d) {
    sstride[d - 1] = sstride[d] * src_ext[d];
    dstride[d - 1] = dstride[d] * dst_ext[d];
  }
  const int64_t run = hi[nd - 1] - lo[nd - 1];  // innermost dimension: one memcpy
  std::vector<int64_t> idx(lo);
  int64_t copied = 0;
  while (true) {
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < nd; ++d) {
      s += (idx[d] - src_off[d]) * sstride[d];
      t += (idx[d] - dst_off[d]) * dstride[d];
    }
    std::memcpy(dst + t * esize, src + s * esize, static_cast<size_t>(run) * esize);
    copied += run;
    size_t d = nd - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
      if (d == 0) return copied;
    }
    if (nd == 1) return copied;
  }
}

}  // namespace

// ---- reader -----------------------------------------------------------------

Reader::Reader(const std::string& path) {
  step_dir_ = path;
  if (!fs::exists(path + "/manifest.json")) {
    const std::string name = newest_step(path);
    if (name.empty())
      throw CheckpointError(path + " is not a checkpoint: it has neither `latest` nor manifest.json, and no complete step" +
                            std::string(fs::exists(path) ? "" : " (it does not exist)"));
    step_dir_ = path + "/" + name;
  }
  const std::string mpath = step_dir_ + "/manifest.json";
  const json::Value manifest = read_json(mpath);
  const int64_t world = json::as_int(json::at(manifest, "world", mpath), mpath + " world");
  meta_ = meta_from(json::at(manifest, "meta", mpath), mpath + " meta");
  check_manifest_world(step_dir_, world, mpath);
  world_ = static_cast<int>(world);
  for (int r = 0; r < world_; ++r) {
    const json::Value idx = checked_index(step_dir_, r, meta_.step, world_);
    const std::string file = step_dir_ + "/" + rank_name(r) + ".bin", what = step_dir_ + "/" + rank_name(r) + ".json";
    for (const json::Value& j : json::as_array(json::at(idx, "entries", what), what)) {
      EntryInfo e;
      e.file = file;
      e.name = json::as_string(json::at(j, "name", what), what);
      const std::string ew = what + ": tensor " + e.name;
      e.dtype = json::as_string(json::at(j, "dtype", ew), ew);
      e.full_shape = json::as_int_array(json::at(j, "full_shape", ew), ew);
      e.offset = json::as_int_array(json::at(j, "offset", ew), ew);
      e.extent = json::as_int_array(json::at(j, "extent", ew), ew);
      e.flat_begin = json::as_int(json::at(j, "flat_begin", ew), ew);
      e.flat_count = json::as_int(json::at(j, "flat_count", ew), ew);
      e.byte_offset = static_cast<uint64_t>(json::as_int(json::at(j, "byte_offset", ew), ew));
      e.nbytes = static_cast<uint64_t>(json::as_int(json::at(j, "nbytes", ew), ew));
      e.checksum = parse_hex(json::as_string(json::at(j, "fnv1a64", ew), ew), ew);
      check_box(e.name, e.full_shape, e.offset, e.extent, what);
      auto& list = entries_[e.name];
      if (!list.empty() && (list[0].full_shape != e.full_shape || list[0].dtype != e.dtype))
        throw CheckpointError("tensor " + e.name + " is " + list[0].dtype + " " + shape_text(list[0].full_shape) +
                              " in " + list[0].file + " but " + e.dtype + " " + shape_text(e.full_shape) + " in " + file);
      list.push_back(std::move(e));
    }
    for (const json::Value& j : json::as_array(json::at(idx, "blobs", what), what)) {
      EntryInfo b;
      b.file = file;
      b.name = json::as_string(json::at(j, "name", what), what);
      b.byte_offset = static_cast<uint64_t>(json::as_int(json::at(j, "byte_offset", what), what));
      b.nbytes = static_cast<uint64_t>(json::as_int(json::at(j, "nbytes", what), what));
      b.checksum = parse_hex(json::as_string(json::at(j, "fnv1a64", what), what), what);
      blobs_[{r, b.name}] = b;
    }
  }
}

std::vector<std::string> Reader::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : entries_) out.push_back(n);
  return out;
}

const std::vector<int64_t>& Reader::full_shape(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw CheckpointError("checkpoint " + step_dir_ + " has no tensor " + name);
  return it->second[0].full_shape;
}

const std::string& Reader::dtype(const std::string& name) const {
  full_shape(name);
  return entries_.at(name)[0].dtype;
}

size_t Reader::slices(const std::string& name) const {
  full_shape(name);
  return entries_.at(name).size();
}

std::string Reader::load(const EntryInfo& e) const {
  std::string data(e.nbytes, '\0');
  const int fd = ::open(e.file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw CheckpointError("cannot open checkpoint file " + e.file + ": " + std::strerror(errno));
  uint64_t done = 0;
  while (done < e.nbytes) {
    const ssize_t n = ::pread(fd, data.data() + done, e.nbytes - done, static_cast<off_t>(e.byte_offset + done));
    if (n <= 0) {
      ::close(fd);
      throw CheckpointError("checkpoint file " + e.file + " is truncated: " + e.name + " is cut off");
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  const uint64_t sum = fnv1a64(data.data(), data.size());
  if (sum != e.checksum)
    throw CheckpointError("checkpoint file " + e.file + ": " + e.name + " fails its checksum (FNV-1a 64 " + hex(sum) +
                          ", index says " + hex(e.checksum) + "): the file is corrupted");
  return data;
}

std::string Reader::read(const std::string& name, const std::string& dtype, const std::vector<int64_t>& full_shape,
                         const std::vector<int64_t>& offset, const std::vector<int64_t>& extent) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw CheckpointError("checkpoint " + step_dir_ + " has no tensor " + name);
  const EntryInfo& first = it->second[0];
  if (first.full_shape != full_shape)
    throw CheckpointError("tensor " + name + " has shape " + shape_text(first.full_shape) + " in checkpoint " +
                          step_dir_ + " but " + shape_text(full_shape) + " is expected");
  if (first.dtype != dtype)
    throw CheckpointError("tensor " + name + " is " + first.dtype + " in checkpoint " + step_dir_ + " but " + dtype +
                          " is expected");
  check_box(name, full_shape, offset, extent, "read");
  const size_t esize = safetensors::dtype_size(dtype);
  const int64_t want = volume(extent);
  std::string out(static_cast<size_t>(want) * esize, '\0');

  // Every piece (sub-box of an entry) that meets the requested box; identical
  // entries (replicas) are read once after checking they agree.
  struct Piece {
    std::vector<int64_t> lo, hi;
    const EntryInfo* entry;
  };
  std::vector<Piece> pieces;
  std::vector<const EntryInfo*> used;
  int64_t covered = 0;
  for (const EntryInfo& e : it->second) {
    bool duplicate = false;
    for (const EntryInfo* u : used) {
      if (u->offset == e.offset && u->extent == e.extent && u->flat_begin == e.flat_begin &&
          u->flat_count == e.flat_count) {
        if (u->checksum != e.checksum)
          throw CheckpointError("tensor " + name + ": " + u->file + " and " + e.file +
                                " hold the same slice with different values");
        duplicate = true;
      }
    }
    if (duplicate) continue;
    used.push_back(&e);
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes;
    if (e.extent.empty()) {
      if (e.flat_count == 1) boxes.emplace_back();  // a scalar: one empty box
    } else {
      decompose(e.extent, 0, e.flat_begin, e.flat_begin + e.flat_count, {}, boxes);
    }
    std::string data;  // loaded on first use
    int64_t start = 0;  // element index of this box within the entry's data
    for (auto& [boff, bext] : boxes) {
      std::vector<int64_t> goff(boff.size());
      for (size_t d = 0; d < boff.size(); ++d) goff[d] = boff[d] + e.offset[d];
      bool meets = true;
      Piece piece{std::vector<int64_t>(goff.size()), std::vector<int64_t>(goff.size()), &e};
      for (size_t d = 0; d < goff.size(); ++d) {
        piece.lo[d] = std::max(goff[d], offset[d]);
        piece.hi[d] = std::min(goff[d] + bext[d], offset[d] + extent[d]);
        meets = meets && piece.lo[d] < piece.hi[d];
      }
      if (meets) {
        for (const Piece& q : pieces) {
          bool overlap = true;
          for (size_t d = 0; d < goff.size(); ++d) overlap = overlap && piece.lo[d] < q.hi[d] && q.lo[d] < piece.hi[d];
          if (overlap)
            throw CheckpointError("tensor " + name + ": shards in " + q.entry->file + " and " + e.file +
                                  " overlap without being identical");
        }
        if (data.empty()) data = load(e);
        covered += copy_intersection(data.data() + start * esize, goff, bext, out.data(), offset, extent, esize);
        pieces.push_back(std::move(piece));
      }
      start += volume(bext);
    }
  }
  if (covered != want)
    throw CheckpointError("tensor " + name + ": the shards in " + step_dir_ + " cover " + std::to_string(covered) +
                          " of the " + std::to_string(want) + " elements of box offset " + shape_text(offset) +
                          " extent " + shape_text(extent));
  return out;
}

std::string Reader::read_full(const std::string& name, const std::string& dtype,
                              const std::vector<int64_t>& full_shape) const {
  return read(name, dtype, full_shape, std::vector<int64_t>(full_shape.size(), 0), full_shape);
}

bool Reader::has_blob(int rank, const std::string& name) const { return blobs_.count({rank, name}) > 0; }

std::string Reader::blob(int rank, const std::string& name) const {
  auto it = blobs_.find({rank, name});
  if (it == blobs_.end())
    throw CheckpointError("checkpoint " + step_dir_ + " has no blob " + name + " for rank " + std::to_string(rank));
  return load(it->second);
}

void Reader::verify() const {
  for (const auto& [_, list] : entries_)
    for (const EntryInfo& e : list) load(e);
  for (const auto& [_, b] : blobs_) load(b);
}

}  // namespace trident::ckpt
