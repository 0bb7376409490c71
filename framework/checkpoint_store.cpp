// Sharded tensor store: NOTE [checkpoint format] and [checkpoint atomicity] in
// checkpoint_store.h.
#include "framework/checkpoint_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "framework/atomic_file.h"
#include "framework/json.h"
#include "framework/safetensors.h"
#include "framework/version.h"

namespace fs = std::filesystem;

namespace trident::ckpt {
namespace {

constexpr const char* kFormat = "trident-checkpoint";
constexpr int64_t kFormatVersion = 1;
constexpr uint64_t kAlign = 64;  // entries start 64-byte aligned in a .bin

std::string rank_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank-%05d", rank);
  return buf;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t parse_hex(const std::string& s, const std::string& what) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw CheckpointError(what + ": checksum \"" + s + "\" is not 16 hex digits");
  return std::stoull(s, nullptr, 16);
}

int64_t volume(const std::vector<int64_t>& extent) {
  int64_t n = 1;
  for (int64_t e : extent) n *= e;
  return n;
}

json::Value int_array(const std::vector<int64_t>& v) {
  json::Value a = json::Value::array();
  for (int64_t x : v) a.push(json::Value::number(x));
  return a;
}

json::Value meta_json(const Meta& m) {
  json::Value j = json::Value::object();
  j.set("step", json::Value::number(m.step));
  j.set("trident_version", json::Value::string(m.trident_version.empty() ? kTridentVersion : m.trident_version));
  j.set("layout", json::Value::string(m.layout));
  j.set("config", json::Value::string(m.config_toml));
  json::Value extra = json::Value::object();
  for (const auto& [k, v] : m.extra) extra.set(k, json::Value::string(v));
  j.set("extra", extra);
  return j;
}

Meta meta_from(const json::Value& j, const std::string& what) {
  Meta m;
  m.step = j.at("step", what).as_int(what + ".step");
  m.trident_version = j.at("trident_version", what).as_string(what + ".trident_version");
  m.layout = j.at("layout", what).as_string(what + ".layout");
  m.config_toml = j.at("config", what).as_string(what + ".config");
  for (const auto& [k, v] : j.at("extra", what).as_object(what + ".extra")) m.extra[k] = v.as_string(what + "." + k);
  return m;
}

// The file's JSON, with any parse or shape error naming the file.
json::Value read_json(const std::string& path) {
  if (!fs::exists(path)) throw CheckpointError("checkpoint file " + path + " is missing");
  try {
    return json::parse(read_file(path), path);
  } catch (const json::JsonError& e) {
    throw CheckpointError(std::string(e.what()) + " (truncated or corrupted checkpoint index)");
  }
}

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

void check_box(const std::string& name, const std::vector<int64_t>& full, const std::vector<int64_t>& off,
               const std::vector<int64_t>& ext, const std::string& who) {
  bool ok = off.size() == full.size() && ext.size() == full.size();
  for (size_t d = 0; ok && d < full.size(); ++d) ok = off[d] >= 0 && ext[d] >= 0 && off[d] + ext[d] <= full[d];
  if (!ok)
    throw CheckpointError(who + ": tensor " + name + ": box offset " + shape_text(off) + " extent " +
                          shape_text(ext) + " does not fit the full shape " + shape_text(full));
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

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
  e.set("name", json::Value::string(name));
  e.set("dtype", json::Value::string(dtype));
  e.set("full_shape", int_array(full_shape));
  e.set("offset", int_array(offset));
  e.set("extent", int_array(extent));
  e.set("flat_begin", json::Value::number(flat_begin));
  e.set("flat_count", json::Value::number(flat_count));
  e.set("byte_offset", json::Value::number(static_cast<int64_t>(impl_->append(data, nbytes))));
  e.set("nbytes", json::Value::number(static_cast<int64_t>(nbytes)));
  e.set("fnv1a64", json::Value::string(hex(fnv1a64(data, nbytes))));
  impl_->entries.push(e);
}

void ShardWriter::add_blob(const std::string& name, const std::string& bytes) {
  if (impl_->finished) throw std::logic_error("ShardWriter::add_blob after finish");
  json::Value b = json::Value::object();
  b.set("name", json::Value::string(name));
  b.set("byte_offset", json::Value::number(static_cast<int64_t>(impl_->append(bytes.data(), bytes.size()))));
  b.set("nbytes", json::Value::number(static_cast<int64_t>(bytes.size())));
  b.set("fnv1a64", json::Value::string(hex(fnv1a64(bytes.data(), bytes.size()))));
  impl_->blobs.push(b);
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
  index.set("format", json::Value::string(kFormat));
  index.set("format_version", json::Value::number(kFormatVersion));
  index.set("rank", json::Value::number(static_cast<int64_t>(impl_->rank)));
  index.set("world", json::Value::number(static_cast<int64_t>(impl_->world)));
  index.set("bin_size", json::Value::number(static_cast<int64_t>(bin_size)));
  index.set("meta", meta_json(impl_->meta));
  index.set("entries", impl_->entries);
  index.set("blobs", impl_->blobs);
  write_file_atomic(impl_->base + ".json", json::dump(index, 1) + "\n");
}

// ---- commit -----------------------------------------------------------------

namespace {

// The rank's index after checking it belongs to this step and world and that
// its .bin has the size the index records.
json::Value checked_index(const std::string& step_dir, int rank, int64_t step, int world) {
  const std::string base = step_dir + "/" + rank_name(rank);
  const json::Value idx = read_json(base + ".json");
  const std::string what = base + ".json";
  if (idx.at("format", what).as_string(what + " format") != kFormat)
    throw CheckpointError(what + " is not a Trident checkpoint index");
  if (idx.at("format_version", what).as_int(what) != kFormatVersion)
    throw CheckpointError(what + " has format_version " + std::to_string(idx.at("format_version", what).as_int(what)) +
                          "; this Trident reads " + std::to_string(kFormatVersion));
  const int64_t s = idx.at("meta", what).at("step", what).as_int(what + " meta.step");
  const int64_t w = idx.at("world", what).as_int(what + " world");
  if (s != step || w != world)
    throw CheckpointError(what + " is from step " + std::to_string(s) + " with world " + std::to_string(w) +
                          ", expected step " + std::to_string(step) + " with world " + std::to_string(world));
  const std::string bin = base + ".bin";
  if (!fs::exists(bin)) throw CheckpointError("checkpoint file " + bin + " is missing");
  const uint64_t want = static_cast<uint64_t>(idx.at("bin_size", what).as_int(what)), have = fs::file_size(bin);
  if (have < want) {
    std::string first = "its data";
    for (const json::Value& e : idx.at("entries", what).as_array(what)) {
      if (static_cast<uint64_t>(e.at("byte_offset", what).as_int(what) + e.at("nbytes", what).as_int(what)) > have) {
        first = "tensor " + e.at("name", what).as_string(what);
        break;
      }
    }
    throw CheckpointError("checkpoint file " + bin + " is truncated: " + std::to_string(have) + " of " +
                          std::to_string(want) + " bytes; " + first + " is cut off");
  }
  return idx;
}

// Step number of a "step-XXXXXXXX" directory name, or -1.
int64_t step_of(const std::string& name) {
  if (name.size() != 13 || name.compare(0, 5, "step-") != 0) return -1;
  if (name.find_first_not_of("0123456789", 5) != std::string::npos) return -1;
  return std::stoll(name.substr(5));
}

}  // namespace

void commit(const std::string& dir, int64_t step, int world, int keep) {
  if (keep < 1) throw CheckpointError("checkpoint.keep = " + std::to_string(keep) + ": expected an integer >= 1");
  const std::string name = step_dir_name(step), sd = dir + "/" + name;
  json::Value meta;
  for (int r = 0; r < world; ++r) {
    json::Value idx = checked_index(sd, r, step, world);
    if (r == 0) meta = idx.at("meta", sd);
  }
  // Files of ranks beyond this world (an earlier, crashed attempt) and temp files.
  for (const auto& f : fs::directory_iterator(sd)) {
    const std::string fn = f.path().filename().string();
    int r = -1;
    const bool stray_rank = std::sscanf(fn.c_str(), "rank-%d.", &r) == 1 && r >= world;
    if (stray_rank || (fn.size() > 4 && fn.compare(fn.size() - 4, 4, ".tmp") == 0)) fs::remove(f.path());
  }
  json::Value manifest = json::Value::object();
  manifest.set("format", json::Value::string(kFormat));
  manifest.set("format_version", json::Value::number(kFormatVersion));
  manifest.set("world", json::Value::number(static_cast<int64_t>(world)));
  manifest.set("meta", meta);
  write_file_atomic(sd + "/manifest.json", json::dump(manifest, 1) + "\n");
  write_file_atomic(dir + "/latest", name + "\n");  // the commit point

  // Prune: the step `latest` names first, then complete steps newest first; keep `keep`.
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

// ---- reader -----------------------------------------------------------------

Reader::Reader(const std::string& path) {
  step_dir_ = path;
  if (fs::exists(path + "/latest")) {
    std::string name = read_file(path + "/latest");
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (step_of(name) < 0) throw CheckpointError(path + "/latest holds \"" + name + "\", not a step-XXXXXXXX name");
    step_dir_ = path + "/" + name;
  } else if (!fs::exists(path + "/manifest.json")) {
    throw CheckpointError(path + " is not a checkpoint: it has neither `latest` nor manifest.json" +
                          std::string(fs::exists(path) ? "" : " (it does not exist)"));
  }
  const std::string mpath = step_dir_ + "/manifest.json";
  const json::Value manifest = read_json(mpath);
  world_ = static_cast<int>(manifest.at("world", mpath).as_int(mpath + " world"));
  meta_ = meta_from(manifest.at("meta", mpath), mpath + " meta");
  for (int r = 0; r < world_; ++r) {
    const json::Value idx = checked_index(step_dir_, r, meta_.step, world_);
    const std::string file = step_dir_ + "/" + rank_name(r) + ".bin", what = step_dir_ + "/" + rank_name(r) + ".json";
    for (const json::Value& j : idx.at("entries", what).as_array(what)) {
      EntryInfo e;
      e.file = file;
      e.name = j.at("name", what).as_string(what);
      const std::string ew = what + ": tensor " + e.name;
      e.dtype = j.at("dtype", ew).as_string(ew);
      e.full_shape = j.at("full_shape", ew).as_int_array(ew);
      e.offset = j.at("offset", ew).as_int_array(ew);
      e.extent = j.at("extent", ew).as_int_array(ew);
      e.flat_begin = j.at("flat_begin", ew).as_int(ew);
      e.flat_count = j.at("flat_count", ew).as_int(ew);
      e.byte_offset = static_cast<uint64_t>(j.at("byte_offset", ew).as_int(ew));
      e.nbytes = static_cast<uint64_t>(j.at("nbytes", ew).as_int(ew));
      e.checksum = parse_hex(j.at("fnv1a64", ew).as_string(ew), ew);
      check_box(e.name, e.full_shape, e.offset, e.extent, what);
      auto& list = entries_[e.name];
      if (!list.empty() && (list[0].full_shape != e.full_shape || list[0].dtype != e.dtype))
        throw CheckpointError("tensor " + e.name + " is " + list[0].dtype + " " + shape_text(list[0].full_shape) +
                              " in " + list[0].file + " but " + e.dtype + " " + shape_text(e.full_shape) + " in " + file);
      list.push_back(std::move(e));
    }
    for (const json::Value& j : idx.at("blobs", what).as_array(what)) {
      EntryInfo b;
      b.file = file;
      b.name = j.at("name", what).as_string(what);
      b.byte_offset = static_cast<uint64_t>(j.at("byte_offset", what).as_int(what));
      b.nbytes = static_cast<uint64_t>(j.at("nbytes", what).as_int(what));
      b.checksum = parse_hex(j.at("fnv1a64", what).as_string(what), what);
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
