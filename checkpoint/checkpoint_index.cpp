// Index-file helpers of the checkpoint store: see checkpoint_index.h.
#include "checkpoint/checkpoint_index.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/escape.h"
#include "core/json.h"
#include "core/version.h"

namespace fs = std::filesystem;

namespace trident::ckpt {

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

namespace detail {

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
  for (int64_t x : v) a.push_back(json::number(x));
  return a;
}

json::Value meta_json(const Meta& m) {
  json::Value j = json::Value::object();
  j["step"] = json::number(m.step);
  j["trident_version"] = json::Value(m.trident_version.empty() ? kTridentVersion : m.trident_version);
  j["layout"] = json::Value(m.layout);
  j["config"] = json::Value(m.config_toml);
  json::Value extra = json::Value::object();
  for (const auto& [k, v] : m.extra) extra[k] = json::Value(v);
  j["extra"] = extra;
  return j;
}

Meta meta_from(const json::Value& j, const std::string& what) {
  Meta m;
  m.step = json::as_int(json::at(j, "step", what), what + ".step");
  m.trident_version = json::as_string(json::at(j, "trident_version", what), what + ".trident_version");
  m.layout = json::as_string(json::at(j, "layout", what), what + ".layout");
  m.config_toml = json::as_string(json::at(j, "config", what), what + ".config");
  for (const auto& [k, v] : json::as_object(json::at(j, "extra", what), what + ".extra"))
    m.extra[k] = json::as_string(v, what + "." + k);
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

void check_box(const std::string& name, const std::vector<int64_t>& full, const std::vector<int64_t>& off,
               const std::vector<int64_t>& ext, const std::string& who) {
  bool ok = off.size() == full.size() && ext.size() == full.size();
  for (size_t d = 0; ok && d < full.size(); ++d) ok = off[d] >= 0 && ext[d] >= 0 && off[d] + ext[d] <= full[d];
  if (!ok)
    throw CheckpointError(who + ": tensor " + name + ": box offset " + shape_text(off) + " extent " +
                          shape_text(ext) + " does not fit the full shape " + shape_text(full));
}

namespace {

// Where the last tensor or blob of an index ends in its .bin; offsets and sizes checked.
int64_t data_end(const json::Value& idx, const std::string& what) {
  int64_t end = 0;
  for (const char* list : {"entries", "blobs"})
    for (const json::Value& e : json::as_array(json::at(idx, list, what), what + " " + list)) {
      const std::string name = json::as_string(json::at(e, "name", what), what + " name");
      const int64_t at = json::as_int(json::at(e, "byte_offset", what), what + ": " + name + " byte_offset");
      const int64_t n = json::as_int(json::at(e, "nbytes", what), what + ": " + name + " nbytes");
      if (at < 0 || n < 0 || at > (int64_t{1} << 62) || n > (int64_t{1} << 62))
        throw CheckpointError(what + ": " + name + " has byte_offset " + std::to_string(at) + " and nbytes " +
                              std::to_string(n) + ", expected sizes >= 0 (the index is corrupted)");
      end = std::max(end, at + n);
    }
  return end;
}

// How many rank-XXXXX.json files a step directory holds.
int rank_files(const std::string& step_dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(step_dir, ec)) {
    const std::string fn = d.path().filename().string();
    if (fn.size() == 15 && fn.compare(0, 5, "rank-") == 0 && fn.compare(10, 5, ".json") == 0) ++n;
  }
  return n;
}

}  // namespace

void check_manifest_world(const std::string& step_dir, int64_t world, const std::string& manifest) {
  if (world < 1 || world > (1 << 20))
    throw CheckpointError(manifest + ": world = " + std::to_string(world) + ", expected an integer in [1, 1048576]");
  const std::string first = step_dir + "/" + rank_name(0) + ".json";
  if (!fs::exists(first)) return;  // checked_index names the missing file
  const json::Value idx = read_json(first);
  const int64_t theirs = json::as_int(json::at(idx, "world", first), first + " world");
  const int files = rank_files(step_dir);
  // The rank files agree among themselves (rank 0's world is how many there are):
  // the manifest is the odd one out.
  if (theirs != world && theirs == files)
    throw CheckpointError(manifest + ": world = " + std::to_string(world) + ", but the step's " +
                          std::to_string(files) + " rank file(s) were written for world " + std::to_string(theirs) +
                          " (the manifest was edited or belongs to another checkpoint)");
}

json::Value checked_index(const std::string& step_dir, int rank, int64_t step, int world) {
  const std::string base = step_dir + "/" + rank_name(rank);
  const json::Value idx = read_json(base + ".json");
  const std::string what = base + ".json";
  if (json::as_string(json::at(idx, "format", what), what + " format") != kFormat)
    throw CheckpointError(what + " is not a Trident checkpoint index");
  if (const int64_t version = json::as_int(json::at(idx, "format_version", what), what); version != kFormatVersion)
    throw CheckpointError(what + " has format_version " + std::to_string(version) + "; this Trident reads " +
                          std::to_string(kFormatVersion));
  const int64_t s = json::as_int(json::at(json::at(idx, "meta", what), "step", what), what + " meta.step");
  const int64_t w = json::as_int(json::at(idx, "world", what), what + " world");
  if (s != step || w != world)
    throw CheckpointError(what + " is from step " + std::to_string(s) + " with world " + std::to_string(w) +
                          ", expected step " + std::to_string(step) + " with world " + std::to_string(world));
  const std::string bin = base + ".bin";
  if (!fs::exists(bin)) throw CheckpointError("checkpoint file " + bin + " is missing");
  const int64_t recorded = json::as_int(json::at(idx, "bin_size", what), what + " bin_size");
  // The writer appends every tensor and blob, so the file ends where the last of
  // them does: a bin_size that says otherwise was edited, and trusting it would
  // misread a longer .bin as intact or call an intact one truncated.
  const int64_t end = data_end(idx, what);
  if (recorded != end)
    throw CheckpointError(what + ": bin_size = " + std::to_string(recorded) + ", but its tensors and blobs end at byte " +
                          std::to_string(end) + " (the index was edited or is corrupted)");
  const uint64_t want = static_cast<uint64_t>(recorded), have = fs::file_size(bin);
  if (have > want)
    throw CheckpointError("checkpoint file " + bin + " holds " + std::to_string(have) + " bytes, but " + what +
                          " says bin_size = " + std::to_string(want) + " (the file was appended to or replaced)");
  if (have < want) {
    std::string first = "its data";
    for (const json::Value& e : json::as_array(json::at(idx, "entries", what), what)) {
      const int64_t offset = json::as_int(json::at(e, "byte_offset", what), what);
      if (static_cast<uint64_t>(offset + json::as_int(json::at(e, "nbytes", what), what)) > have) {
        first = "tensor " + json::as_string(json::at(e, "name", what), what);
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

}  // namespace detail

std::string newest_step(const std::string& dir, bool* from_latest) {
  namespace fs = std::filesystem;
  if (from_latest) *from_latest = false;
  const std::string latest = dir + "/latest";
  if (fs::exists(latest)) {
    std::string name = read_file(latest);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (detail::step_of(name) < 0)
      throw CheckpointError(latest + " holds \"" + escaped_bytes(name) + "\", not a step-XXXXXXXX name");
    // A `latest` naming a step that is not there (deleted or never finished) is the broken
    // file itself: a resume would otherwise blame the step it names, or training.steps.
    if (!fs::exists(fs::path(dir) / name / "manifest.json"))
      throw CheckpointError(latest + " names " + name + ", but " + dir + "/" + name +
                            (fs::is_directory(fs::path(dir) / name) ? " has no manifest.json" : " does not exist") +
                            ": expected `latest` to name a complete step directory (fix or remove it; without it "
                            "a resume takes the newest complete step)");
    if (from_latest) *from_latest = true;
    return name;
  }
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  int64_t best = -1;
  std::string best_name;
  for (const auto& d : fs::directory_iterator(dir, ec)) {
    const std::string fn = d.path().filename().string();
    const int64_t s = detail::step_of(fn);
    if (s > best && fs::exists(d.path() / "manifest.json")) best = s, best_name = fn;
  }
  return best_name;
}

}  // namespace trident::ckpt
