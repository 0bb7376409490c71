// safetensors encode/decode: see safetensors.h.
#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "core/atomic_file.h"
#include "core/json.h"
#include "core/model_checks.h"

namespace trident::safetensors {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw ModelInputError(source + ": " + what);
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

size_t dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL") return 1;
  throw ModelInputError("unknown safetensors dtype \"" + d + "\"");
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string encode(const std::vector<Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
  json::Value header = json::Value::object();
  if (!metadata.empty()) {
    json::Value meta = json::Value::object();
    for (const auto& [k, v] : metadata) meta[k] = json::Value(v);
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors) {
    const uint64_t expect = static_cast<uint64_t>(numel(t.shape)) * dtype_size(t.dtype);
    if (t.data.size() != expect)
      throw std::logic_error("safetensors::encode: " + t.name + " has " + std::to_string(t.data.size()) +
                             " bytes but dtype x shape needs " + std::to_string(expect));
    if (t.name == "__metadata__" || json::find(header, t.name))
      throw std::logic_error("safetensors::encode: duplicate or reserved tensor name " + t.name);
    json::Value e = json::Value::object();
    e["dtype"] = json::Value(t.dtype);
    json::Value shape = json::Value::array();
    for (int64_t d : t.shape) shape.push_back(json::number(d));
    e["shape"] = shape;
    e["data_offsets"] = json::Value::array({json::number(static_cast<int64_t>(offset)),
                                            json::number(static_cast<int64_t>(offset + expect))});
    header[t.name] = e;
    offset += expect;
  }
  std::string text = json::dump(header);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  out += text;
  out.reserve(out.size() + offset);
  for (const Tensor& t : tensors) out += t.data;
  return out;
}

std::vector<Tensor> decode(const std::string& bytes, const std::string& source,
                           std::map<std::string, std::string>* metadata) {
  if (bytes.size() < 8) fail(source, "file of " + std::to_string(bytes.size()) + " bytes is shorter than the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8)
    fail(source, "header length " + std::to_string(n) + " runs past the end of the file (" +
                     std::to_string(bytes.size()) + " bytes): truncated or not a safetensors file");
  const json::Value header = json::parse(bytes.substr(8, n), source + " (safetensors header)");
  const uint64_t data_start = 8 + n, data_size = bytes.size() - data_start;
  std::vector<Tensor> out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, e] : json::as_object(header, source + ": header")) {
    if (name == "__metadata__") {
      for (const auto& [k, v] : json::as_object(e, source + ": __metadata__"))
        if (metadata) (*metadata)[k] = json::as_string(v, source + ": __metadata__." + k);
      continue;
    }
    const std::string what = source + ": tensor " + name;
    Tensor t;
    t.name = name;
    t.dtype = json::as_string(json::at(e, "dtype", what), what + " dtype");
    t.shape = json::as_int_array(json::at(e, "shape", what), what + " shape");
    const std::vector<int64_t> off = json::as_int_array(json::at(e, "data_offsets", what), what + " data_offsets");
    size_t esize = 0;
    try {
      esize = dtype_size(t.dtype);
    } catch (const std::exception& ex) {
      fail(what, ex.what());
    }
    for (int64_t d : t.shape)
      if (d < 0) fail(what, "negative dimension in shape " + shape_text(t.shape));
    if (off.size() != 2 || off[0] < 0 || off[1] < off[0]) fail(what, "data_offsets must be [begin, end] with begin <= end");
    const uint64_t b = static_cast<uint64_t>(off[0]), end = static_cast<uint64_t>(off[1]);
    const uint64_t need = static_cast<uint64_t>(numel(t.shape)) * esize;
    if (end - b != need)
      fail(what, "holds " + std::to_string(end - b) + " bytes but " + t.dtype + " " + shape_text(t.shape) +
                     " needs " + std::to_string(need));
    if (end > data_size)
      fail(what, "data ends at byte " + std::to_string(data_start + end) + " but the file has " +
                     std::to_string(bytes.size()) + " bytes: truncated");
    t.data = bytes.substr(data_start + b, need);
    ranges.emplace_back(b, end);
    out.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail(source, "tensors overlap in the data section");
  return out;
}

void write_file(const std::string& path, const std::vector<Tensor>& tensors,
                const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, encode(tensors, metadata));
}

std::vector<Tensor> read_file(const std::string& path, std::map<std::string, std::string>* metadata) {
  return decode(trident::read_file(path), path, metadata);
}

void check_finite(const std::vector<float>& values, const std::string& name, const std::string& source) {
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]))
      throw ModelInputError(source + ": tensor " + name + " holds a non-finite value (" +
                               std::to_string(values[i]) + " at flat index " + std::to_string(i) +
                               "): expected finite weights");
}

std::vector<float> to_float(const Tensor& t, const std::string& source) {
  const size_t n = static_cast<size_t>(numel(t.shape));
  std::vector<float> out(n);
  if (t.dtype == "F32") {
    std::memcpy(out.data(), t.data.data(), n * 4);
  } else if (t.dtype == "BF16") {
    // bfloat16 is the top half of a float32.
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits = 0;
      std::memcpy(reinterpret_cast<char*>(&bits) + 2, t.data.data() + 2 * i, 2);
      std::memcpy(&out[i], &bits, 4);
    }
  } else if (t.dtype == "F16") {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h = 0;
      std::memcpy(&h, t.data.data() + 2 * i, 2);
      const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
      uint32_t bits;
      if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (mant << 13);  // inf / nan
      } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
      } else if (mant == 0) {
        bits = sign;
      } else {  // subnormal half: mant * 2^-24, normal as a float
        int e = -1;
        uint32_t m = mant;
        do {
          m <<= 1;
          ++e;
        } while ((m & 0x400) == 0);
        bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((m & 0x3FF) << 13);
      }
      std::memcpy(&out[i], &bits, 4);
    }
  } else {
    fail(source, "tensor " + t.name + " has dtype " + t.dtype + "; expected F32, F16 or BF16");
  }
  return out;
}

Tensor from_float(std::string name, std::vector<int64_t> shape, const float* values) {
  Tensor t{std::move(name), "F32", std::move(shape), {}};
  t.data.assign(reinterpret_cast<const char*>(values), static_cast<size_t>(numel(t.shape)) * 4);
  return t;
}

}  // namespace trident::safetensors
