// megatron-core's GPTDataset index caches, read and written (NOTE [Megatron index caches], [Megatron cache writes]).
#include "datasets/megatron_cache.h"

#include <unistd.h>

#include <array>
#include <cctype>
#include <cfenv>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "core/atomic_file.h"
#include "datasets/errors.h"
#include "datasets/megatron_dataset.h"
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


// A JSON string as Python's json.dumps writes it (ensure_ascii): ", \ and the
// short escapes, other control characters and everything past ASCII as \uXXXX
// (UTF-16 surrogate pairs above U+FFFF).
std::string python_json_string(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  const auto u = [](std::string& out, unsigned v) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += hex[(v >> shift) & 0xf];
  };
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) u(out, c); else out += static_cast<char>(c);
      }
      continue;
    }
    // UTF-8 (json::parse checked it): the code point, then \u escapes.
    const int n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    unsigned cp = c & (n == 4 ? 0x07u : n == 3 ? 0x0fu : 0x1fu);
    for (int k = 1; k < n && i + static_cast<size_t>(k) < s.size(); ++k)
      cp = cp << 6 | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3fu);
    i += static_cast<size_t>(n);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      u(out, 0xd800 + (cp >> 10));
      u(out, 0xdc00 + (cp & 0x3ff));
    } else {
      u(out, cp);
    }
  }
  return out + "\"";
}

// Python's json.dumps(v, indent=4) at nesting `level` (separators "," and ": ").
std::string python_json(const json::Value& v, int level) {
  const std::string in((level + 1) * 4, ' '), out(level * 4, ' ');
  if (v.is_object()) {
    if (v.empty()) return "{}";
    std::string s = "{";
    bool first = true;
    for (const auto& [k, m] : v.items()) {
      s += (first ? "\n" : ",\n") + in + python_json_string(k) + ": " + python_json(m, level + 1);
      first = false;
    }
    return s + "\n" + out + "}";
  }
  if (v.is_array()) {
    if (v.empty()) return "[]";
    std::string s = "[";
    bool first = true;
    for (const json::Value& m : v) {
      s += (first ? "\n" : ",\n") + in + python_json(m, level + 1);
      first = false;
    }
    return s + "\n" + out + "]";
  }
  if (v.is_string()) return python_json_string(v.get<std::string>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_null()) return "null";
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return python_float_repr(v.get<double>());
}

json::Value parse_tokenizer(const std::string& text) {
  const std::string problem = cache_tokenizer_problem(text);
  if (!problem.empty()) throw DataError("data.cache_tokenizer = " + json::quote(text) + ": " + problem);
  return json::parse(text, "data.cache_tokenizer");
}

// A name for this process's temp files, unique among the writers of one folder
// (several hosts may share it).
std::string writer_tag() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  std::string h;
  for (const char* p = host; *p != 0; ++p) h += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
  return ".tmp-" + h + "-" + std::to_string(::getpid());
}

void write_atomic(const std::string& path, const std::string& bytes) {
  try {
    AtomicFile f(path, writer_tag());
    f.write(bytes.data(), bytes.size());
    f.commit();
  } catch (const std::runtime_error& e) {
    throw DataError(std::string("writing megatron-core's index cache: ") + e.what());
  }
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

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";  // json.dumps' spelling
  // The shortest digits that read back as v (repr's), and where the point goes.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const bool negative = mant[0] == '-';
  if (negative) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  const int exponent = std::stoi(sci.substr(e + 1));
  const int point = exponent + 1;  // digits before the decimal point
  const int n = static_cast<int>(digits.size());
  std::string out = negative ? "-" : "";
  if (point > -4 && point <= 16) {  // float_repr_style "short": fixed notation in this range
    if (point <= 0) return out + "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    if (point >= n) return out + digits + std::string(static_cast<size_t>(point - n), '0') + ".0";
    return out + digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  const int x = point - 1;
  const std::string xd = std::to_string(std::abs(x));
  return out + "e" + (x < 0 ? "-" : "+") + (xd.size() < 2 ? "0" : "") + xd;
}

std::string md5_hex(const std::string& bytes) {
  // RFC 1321.
  static const std::array<uint32_t, 64> K = [] {
    std::array<uint32_t, 64> k{};
    for (size_t i = 0; i < 64; ++i)
      k[i] = static_cast<uint32_t>(std::floor(std::fabs(std::sin(static_cast<long double>(i + 1))) * 4294967296.0L));
    return k;
  }();
  static const int S[4][4] = {{7, 12, 17, 22}, {5, 9, 14, 20}, {4, 11, 16, 23}, {6, 10, 15, 21}};
  uint32_t h[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
  std::string m = bytes;
  const uint64_t bits = static_cast<uint64_t>(bytes.size()) * 8;
  m += static_cast<char>(0x80);
  while (m.size() % 64 != 56) m += '\0';
  for (int i = 0; i < 8; ++i) m += static_cast<char>((bits >> (8 * i)) & 0xff);
  const auto rotl = [](uint32_t x, int c) { return (x << c) | (x >> (32 - c)); };
  for (size_t block = 0; block < m.size(); block += 64) {
    uint32_t w[16];
    for (size_t j = 0; j < 16; ++j) {
      w[j] = 0;
      for (size_t b = 0; b < 4; ++b)
        w[j] |= static_cast<uint32_t>(static_cast<unsigned char>(m[block + 4 * j + b])) << (8 * b);
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    for (size_t i = 0; i < 64; ++i) {
      uint32_t f;
      size_t g;
      if (i < 16) {
        f = (b & c) | (~b & d);
        g = i;
      } else if (i < 32) {
        f = (d & b) | (~d & c);
        g = (5 * i + 1) % 16;
      } else if (i < 48) {
        f = b ^ c ^ d;
        g = (3 * i + 5) % 16;
      } else {
        f = c ^ (b | ~d);
        g = (7 * i) % 16;
      }
      const uint32_t t = d;
      d = c;
      c = b;
      b = b + rotl(a + f + K[i] + w[g], S[i / 16][i % 4]);
      a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t x : h)
    for (int byte = 0; byte < 4; ++byte) {
      const unsigned v = (x >> (8 * byte)) & 0xff;
      out += hex[v >> 4];
      out += hex[v & 0xf];
    }
  return out;
}

std::string gpt_cache_description(const GptCacheKey& key, const GptCacheText& text) {
  // convert_split_vector_to_split_matrix: book-ends from the running sums (the
  // first an integer 0), null where a split has no share.
  const std::array<double, 3> shares = parse_split(text.split);
  json::Value matrix = json::Value::array();
  double lo = 0;
  for (size_t i = 0; i < 3; ++i) {
    const double hi = lo + shares[i];
    if (hi <= lo) {
      matrix.push_back(nullptr);
    } else {
      json::Value row = json::Value::array();
      row.push_back(i == 0 ? json::Value(int64_t{0}) : json::Value(lo));
      row.push_back(json::Value(hi));
      matrix.push_back(std::move(row));
    }
    lo = hi;
  }
  json::Value d = json::Value::object();
  d["class"] = "GPTDataset";
  d["dataset_path"] = key.dataset_path;
  d["num_samples"] = key.num_samples;
  d["index_split"] = key.index_split;
  d["random_seed"] = static_cast<int64_t>(key.random_seed);
  d["sequence_length"] = key.sequence_length;
  d["split"] = text.split;
  d["split_matrix"] = std::move(matrix);
  d["tokenizer"] = parse_tokenizer(text.tokenizer);
  return python_json(d, 0);
}

std::string npy_bytes(const std::string& descr, const std::vector<int64_t>& shape, const void* data) {
  const size_t width = descr == "<i4" || descr == "<u4" ? 4 : descr == "<i8" ? 8 : 0;
  if (width == 0) throw std::logic_error("npy_bytes: dtype " + descr);
  std::string dims;
  int64_t count = 1;
  for (int64_t d : shape) {
    dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    count *= d;
  }
  if (shape.size() == 1) dims += ",";
  // numpy's _write_array_header: the dict's keys sorted, room for the first
  // axis to grow to 21 digits, then spaces and a newline to a multiple of 64.
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  if (!shape.empty()) header += std::string(21 - std::to_string(shape[0]).size(), ' ');
  const size_t hlen = header.size() + 1;
  const size_t pad = 64 - ((6 + 2 + 2 + hlen) % 64);
  header += std::string(pad, ' ') + "\n";
  if (header.size() > 65535) throw std::logic_error("npy_bytes: header too long");
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, ".npy files are written little-endian");
  out.append(static_cast<const char*>(data), static_cast<size_t>(count) * width);
  return out;
}

std::string write_gpt_cache(const std::string& dir, const GptCacheKey& key, const GptCacheText& text,
                            const GptIndices& g) {
  const std::string description = gpt_cache_description(key, text);
  const std::string base = (fs::path(dir) / (md5_hex(description) + "-GPTDataset-" + key.index_split)).string();
  const auto docs = static_cast<int64_t>(g.document_index.size());
  const int64_t rows = static_cast<int64_t>(g.sample_index.size()) / 2, samples = g.samples();
  // The arrays first, the description last: it is what marks a cache whole.
  write_atomic(base + "-document_index.npy", npy_bytes("<i4", {docs}, g.document_index.data()));
  if (docs <= std::numeric_limits<int32_t>::max()) {
    std::vector<int32_t> narrow(g.sample_index.begin(), g.sample_index.end());
    write_atomic(base + "-sample_index.npy", npy_bytes("<i4", {rows, 2}, narrow.data()));
  } else {
    write_atomic(base + "-sample_index.npy", npy_bytes("<i8", {rows, 2}, g.sample_index.data()));
  }
  if (samples < static_cast<int64_t>(std::numeric_limits<uint32_t>::max()) - 1) {
    std::vector<uint32_t> narrow(g.shuffle_index.begin(), g.shuffle_index.end());
    write_atomic(base + "-shuffle_index.npy", npy_bytes("<u4", {samples}, narrow.data()));
  } else {
    write_atomic(base + "-shuffle_index.npy", npy_bytes("<i8", {samples}, g.shuffle_index.data()));
  }
  write_atomic(base + "-description.txt", description);
  return base;
}

}  // namespace trident::data
