// megatron-core's GPTDataset index caches, read (NOTE [Megatron index caches]).
#include "core/data/megatron_cache.h"

#include <cfenv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/data/errors.h"
#include "core/json.h"

namespace trident::data {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw DataError("cannot read " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The value of 'key' in a .npy header dict ("{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }").
std::string header_field(const std::string& header, const std::string& key, const std::string& path) {
  const size_t at = header.find("'" + key + "':");
  if (at == std::string::npos) throw DataError(path + ": .npy header has no '" + key + "'");
  size_t from = at + key.size() + 3;
  while (from < header.size() && header[from] == ' ') ++from;
  const char open = header[from];
  const char close = open == '\'' ? '\'' : open == '(' ? ')' : ',';
  const size_t end = header.find(close, from + 1);
  if (end == std::string::npos) throw DataError(path + ": malformed .npy header " + header);
  return open == '\'' || open == '(' ? header.substr(from + 1, end - from - 1) : header.substr(from, end - from);
}

// Python's int(round(x)) for x >= 0 (ties to even), as megatron_split uses it.
uint64_t round_even(double x) {
  const int mode = std::fegetround();
  std::fesetround(FE_TONEAREST);
  const double r = std::nearbyint(x);
  std::fesetround(mode);
  return static_cast<uint64_t>(r);
}

bool same_path(const std::string& a, const std::string& b) {
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  return !ea && !eb ? ca == cb : a == b;
}

// Whether the description megatron-core wrote is of a cache built for `key`.
bool describes(const json::Value& d, const GptCacheKey& key) {
  const auto str = [&d](const char* k) {
    const json::Value* v = json::find(d, k);
    return v != nullptr && v->is_string() ? json::as_string(*v, k) : std::string();
  };
  const auto num = [&d](const char* k) -> int64_t {
    const json::Value* v = json::find(d, k);
    return v != nullptr && v->is_number() ? json::as_int(*v, k) : -1;
  };
  if (str("class") != "GPTDataset" || str("index_split") != key.index_split) return false;
  if (num("num_samples") != key.num_samples || num("sequence_length") != key.sequence_length ||
      num("random_seed") != static_cast<int64_t>(key.random_seed) || !same_path(str("dataset_path"), key.dataset_path))
    return false;
  const json::Value* m = json::find(d, "split_matrix");
  if (m == nullptr || !m->is_array()) return false;
  const size_t row = key.index_split == "train" ? 0 : 1;
  if (json::as_array(*m, "split_matrix").size() <= row) return false;
  const json::Value& r = json::as_array(*m, "split_matrix")[row];
  if (!r.is_array() || json::as_array(r, "split_matrix row").size() != 2) return false;
  const auto n = static_cast<double>(key.sequences);
  return round_even(json::as_double(json::as_array(r, "")[0], "") * n) == key.begin &&
         round_even(json::as_double(json::as_array(r, "")[1], "") * n) == key.end;
}

void check(bool ok, const std::string& base, const std::string& what) {
  if (!ok) throw DataError("Megatron index cache " + base + "-*: " + what);
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  const std::string b = read_all(path);
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) throw DataError(path + ": not a .npy file");
  const int major = static_cast<unsigned char>(b[6]);
  size_t len = 0, start = 0;
  if (major == 1) {
    len = static_cast<unsigned char>(b[8]) | static_cast<size_t>(static_cast<unsigned char>(b[9])) << 8;
    start = 10;
  } else {
    if (b.size() < 12) throw DataError(path + ": truncated .npy header");
    for (int i = 0; i < 4; ++i) len |= static_cast<size_t>(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    start = 12;
  }
  if (start + len > b.size()) throw DataError(path + ": truncated .npy header");
  const std::string header = b.substr(start, len);
  const std::string descr = header_field(header, "descr", path);
  if (header_field(header, "fortran_order", path) != "False")
    throw DataError(path + ": a Fortran-order array; expected C order");
  NpyArray a;
  std::istringstream shape(header_field(header, "shape", path));
  for (std::string dim; std::getline(shape, dim, ',');)
    if (dim.find_first_not_of(' ') != std::string::npos) a.shape.push_back(std::stoll(dim));
  int64_t count = 1;
  for (int64_t d : a.shape) count *= d;
  const size_t width = descr == "<i4" || descr == "<u4" ? 4 : descr == "<i8" ? 8 : 0;
  if (width == 0) throw DataError(path + ": dtype " + descr + "; expected <i4, <u4 or <i8");
  const size_t data = start + len;
  if (b.size() - data != static_cast<size_t>(count) * width)
    throw DataError(path + ": holds " + std::to_string(b.size() - data) + " bytes of data for " +
                    std::to_string(count) + " elements of " + descr);
  a.values.resize(static_cast<size_t>(count));
  for (size_t i = 0; i < a.values.size(); ++i) {
    const char* p = b.data() + data + i * width;
    if (descr == "<i4") {
      int32_t v;
      std::memcpy(&v, p, 4);
      a.values[i] = v;
    } else if (descr == "<u4") {
      uint32_t v;
      std::memcpy(&v, p, 4);
      a.values[i] = v;
    } else {
      std::memcpy(&a.values[i], p, 8);
    }
  }
  return a;
}

std::optional<GptIndices> read_gpt_cache(const std::string& dir, const GptCacheKey& key,
                                         const std::vector<int32_t>& sizes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw DataError("data.cache_dir = \"" + dir + "\" is not a directory");
  const std::string suffix = "-GPTDataset-" + key.index_split + "-description.txt";
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    json::Value d;
    try {
      d = json::parse(read_all(entry.path().string()), entry.path().string());
    } catch (const json::JsonError&) {
      continue;  // not a description megatron-core wrote
    }
    if (!d.is_object() || !describes(d, key)) continue;
    const std::string base = (fs::path(dir) / name.substr(0, name.size() - std::string("-description.txt").size())).string();
    const NpyArray doc = read_npy(base + "-document_index.npy"), smp = read_npy(base + "-sample_index.npy"),
                   shf = read_npy(base + "-shuffle_index.npy");
    const auto docs = static_cast<int64_t>(key.end - key.begin);
    check(doc.shape.size() == 1 && docs > 0 && doc.shape[0] % docs == 0 && doc.shape[0] > 0, base,
          "the document index is not whole epochs of the split's " + std::to_string(docs) + " sequences");
    GptIndices g;
    g.epochs = doc.shape[0] / docs;
    for (uint64_t s = key.begin; s < key.end; ++s) g.tokens_per_epoch += sizes[s];
    for (int64_t v : doc.values) {
      check(v >= static_cast<int64_t>(key.begin) && v < static_cast<int64_t>(key.end), base,
            "document index entry " + std::to_string(v) + " outside the split");
      g.document_index.push_back(static_cast<int32_t>(v));
    }
    check(smp.shape.size() == 2 && smp.shape[1] == 2 && smp.shape[0] >= 2, base, "the sample index is not (S + 1) x 2");
    const int64_t samples = smp.shape[0] - 1;
    for (int64_t r = 0; r <= samples; ++r) {
      const int64_t at = smp.values[static_cast<size_t>(2 * r)], off = smp.values[static_cast<size_t>(2 * r + 1)];
      check(at >= 0 && at < doc.shape[0] && off >= 0 && off < std::max<int64_t>(1, sizes[static_cast<size_t>(
                                                                   doc.values[static_cast<size_t>(at)])]),
            base, "sample index row " + std::to_string(r) + " points outside the documents");
    }
    g.sample_index = smp.values;
    check(shf.shape.size() == 1 && shf.shape[0] == samples && samples >= key.num_samples, base,
          "the shuffle index does not cover the " + std::to_string(samples) + " samples");
    for (int64_t v : shf.values) check(v >= 0 && v < samples, base, "shuffle index entry " + std::to_string(v));
    g.shuffle_index = shf.values;
    return g;
  }
  return std::nullopt;
}

}  // namespace trident::data
