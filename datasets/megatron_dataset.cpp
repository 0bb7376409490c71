// Megatron indexed datasets, read memory-mapped (see NOTE [Megatron index format]).
#include "datasets/megatron_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cfenv>
#include <cmath>
#include <cstring>
#include <sstream>

#include "core/data_values.h"
#include "datasets/errors.h"

namespace trident::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kHeaderBytes = 34;

template <typename T>
T get(const void* base, uint64_t offset) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(base) + offset, sizeof v);
  return v;
}

struct DType {
  const char* name;
  uint32_t bytes;
};

// Megatron's DType codes (indexed_dataset.py).
DType dtype_of(uint8_t code) {
  switch (code) {
    case 1: return {"uint8", 1};
    case 2: return {"int8", 1};
    case 3: return {"int16", 2};
    case 4: return {"int32", 4};
    case 5: return {"int64", 8};
    case 6: return {"float64", 8};
    case 7: return {"float32", 4};
    case 8: return {"uint16", 2};
    default: return {nullptr, 0};
  }
}

}  // namespace

void MegatronDataset::open(const std::string& path, Mapping& m) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw DataError("cannot open Megatron dataset file " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError("cannot stat " + path + ": " + std::strerror(err));
  }
  m.bytes = static_cast<size_t>(st.st_size);
  if (m.bytes == 0) {
    ::close(fd);
    return;  // nothing to map; the checks below say what is missing
  }
  void* p = ::mmap(nullptr, m.bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (p == MAP_FAILED) throw DataError("cannot mmap " + path + ": " + std::strerror(map_err));
  m.data = p;
}

void MegatronDataset::release() {
  for (Mapping* m : {&idx_, &bin_})
    if (m->data != nullptr) ::munmap(m->data, m->bytes);
  idx_ = bin_ = Mapping{};
}

MegatronDataset::MegatronDataset(const std::string& prefix)
    : prefix_(prefix), idx_path_(prefix + ".idx"), bin_path_(prefix + ".bin") {
  try {
    open(idx_path_, idx_);
    const std::string idx = "Megatron index " + idx_path_;
    if (idx_.bytes < kHeaderBytes)
      throw DataError(idx + " is truncated: " + std::to_string(idx_.bytes) + " bytes, shorter than the " +
                      std::to_string(kHeaderBytes) + "-byte header");
    if (std::memcmp(idx_.data, kMagic, sizeof kMagic) != 0)
      throw DataError(idx + " has a wrong magic (expected \"MMIDIDX\\0\\0\": not a Megatron indexed dataset)");
    const auto version = get<uint64_t>(idx_.data, 9);
    if (version != 1) throw DataError(idx + " has version " + std::to_string(version) + " (expected 1)");
    dtype_code_ = get<uint8_t>(idx_.data, 17);
    const DType dt = dtype_of(dtype_code_);
    if (dt.name == nullptr) throw DataError(idx + " has an unknown dtype code " + std::to_string(dtype_code_));
    if (dtype_code_ != 8 && dtype_code_ != 4)
      throw DataError(idx + " holds " + dt.name + " tokens (dtype code " + std::to_string(dtype_code_) +
                      "); Trident reads uint16 (8) and int32 (4)");
    dtype_bytes_ = dt.bytes;
    sequences_ = get<uint64_t>(idx_.data, 18);
    document_indices_ = get<uint64_t>(idx_.data, 26);
    // Sizes compared by division so that a corrupt huge count cannot overflow.
    const uint64_t body = idx_.bytes - kHeaderBytes;
    const bool fits = sequences_ <= body / 12 && document_indices_ <= (body - sequences_ * 12) / 8;
    const uint64_t rest = fits ? body - sequences_ * 12 - document_indices_ * 8 : 0;
    if (!fits || rest != 0) {
      throw DataError(idx + " is truncated or corrupt: its header says " + std::to_string(sequences_) +
                      " sequences and " + std::to_string(document_indices_) + " document indices (" +
                      (fits ? std::to_string(idx_.bytes - rest) : std::string("more")) + " bytes) but the file has " +
                      std::to_string(idx_.bytes) + " bytes" +
                      (fits && rest == sequences_ ? " (the sequence modes of a multimodal index: not supported)" : ""));
    }
    if (document_indices_ == 0) throw DataError(idx + " has no document indices (expected at least the leading 0)");
    // The sequences lie back to back from byte 0 (what _IndexWriter writes).
    uint64_t at = 0;
    for (uint64_t i = 0; i < sequences_; ++i) {
      const int32_t len = sequence_length(i);
      const int64_t ptr = sequence_pointer(i);
      if (len < 0) throw DataError(idx + ": sequence " + std::to_string(i) + " has length " + std::to_string(len));
      if (ptr < 0 || static_cast<uint64_t>(ptr) != at)
        throw DataError(idx + ": sequence " + std::to_string(i) + " starts at byte " + std::to_string(ptr) +
                        " of the .bin, expected " + std::to_string(at) + " (sequences must lie back to back)");
      at += static_cast<uint64_t>(len) * dtype_bytes_;
    }
    int64_t prev = 0;
    for (uint64_t d = 0; d < document_indices_; ++d) {
      const int64_t v = document_index(d);
      if ((d == 0 && v != 0) || v < prev || static_cast<uint64_t>(v) > sequences_)
        throw DataError(idx + ": document index " + std::to_string(d) + " is " + std::to_string(v) +
                        " (expected a non-decreasing list from 0 to the sequence count " + std::to_string(sequences_) +
                        ")");
      prev = v;
    }
    if (static_cast<uint64_t>(prev) != sequences_)
      throw DataError(idx + ": the last document index is " + std::to_string(prev) + ", not the sequence count " +
                      std::to_string(sequences_));

    open(bin_path_, bin_);
    if (bin_.bytes != at)
      throw DataError("Megatron data file " + bin_path_ + " has " + std::to_string(bin_.bytes) + " bytes but " +
                      idx_path_ + " describes " + std::to_string(at) + " (" + std::to_string(at / dtype_bytes_) + " " +
                      dt.name + " tokens)" + (bin_.bytes < at ? ": truncated" : ""));
    token_count_ = at / dtype_bytes_;
    if (token_count_ == 0) throw DataError("Megatron data file " + bin_path_ + " holds no tokens");
    if (dtype_code_ == 4) {
      for (uint64_t i = 0; i < token_count_; ++i) {
        const auto v = get<int32_t>(bin_.data, i * 4);
        if (v < 0)
          throw DataError("Megatron data file " + bin_path_ + " has token id " + std::to_string(v) + " at index " +
                          std::to_string(i));
      }
    }
  } catch (...) {
    release();
    throw;
  }
}

MegatronDataset::~MegatronDataset() { release(); }

int32_t MegatronDataset::sequence_length(uint64_t i) const { return get<int32_t>(idx_.data, kHeaderBytes + i * 4); }

int64_t MegatronDataset::sequence_pointer(uint64_t i) const {
  return get<int64_t>(idx_.data, kHeaderBytes + sequences_ * 4 + i * 8);
}

int64_t MegatronDataset::document_index(uint64_t i) const {
  return get<int64_t>(idx_.data, kHeaderBytes + sequences_ * 12 + i * 8);
}

TokenView MegatronDataset::tokens() const { return TokenView(bin_.data, token_count_, dtype_bytes_, bin_path_); }

TokenView MegatronDataset::tokens(uint64_t first, uint64_t last, const std::string& source) const {
  if (first > last || last > sequences_)
    throw DataError("sequences [" + std::to_string(first) + ", " + std::to_string(last) + ") of " + idx_path_ +
                    ": out of range (it has " + std::to_string(sequences_) + ")");
  if (first == last) return TokenView(bin_.data, 0, dtype_bytes_, source);
  const uint64_t begin = static_cast<uint64_t>(sequence_pointer(first)) / dtype_bytes_;
  const uint64_t end =
      static_cast<uint64_t>(sequence_pointer(last - 1)) / dtype_bytes_ + static_cast<uint64_t>(sequence_length(last - 1));
  return TokenView(static_cast<const unsigned char*>(bin_.data) + begin * dtype_bytes_, end - begin, dtype_bytes_,
                   source);
}

std::vector<uint32_t> MegatronDataset::sequence(uint64_t i) const {
  const TokenView t = tokens();
  const uint64_t first = static_cast<uint64_t>(sequence_pointer(i)) / dtype_bytes_;
  std::vector<uint32_t> out(static_cast<size_t>(sequence_length(i)));
  for (size_t k = 0; k < out.size(); ++k) out[k] = t[first + k];
  return out;
}

void MegatronDataset::check_vocab(int64_t vocab_size) const {
  const TokenView t = tokens();
  for (size_t i = 0; i < t.size(); ++i)
    if (static_cast<int64_t>(t[i]) >= vocab_size)
      throw DataError("Megatron data file " + bin_path_ + " has token id " + std::to_string(t[i]) + " at index " +
                      std::to_string(i) + ", not below model.vocab_size = " + std::to_string(vocab_size));
}

MegatronWriter::MegatronWriter(const std::string& prefix, uint32_t vocab_size)
    : prefix_(prefix), vocab_size_(vocab_size), dtype_code_(vocab_size < 65500 ? 8 : 4) {
  const std::string bin = prefix + ".bin";
  std::remove((prefix + ".idx").c_str());  // no stale index beside a new .bin
  bin_ = std::fopen(bin.c_str(), "wb");
  if (bin_ == nullptr) throw DataError("cannot write Megatron data file " + bin + ": " + std::strerror(errno));
}

MegatronWriter::~MegatronWriter() {
  if (bin_ != nullptr) std::fclose(bin_);
}

void MegatronWriter::add_document(const std::vector<uint32_t>& tokens) {
  if (bin_ == nullptr) throw DataError("Megatron writer for " + prefix_ + ": add_document after finish");
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    throw DataError("a document of " + std::to_string(tokens.size()) + " tokens exceeds the int32 sequence length of " +
                    prefix_ + ".idx");
  const size_t width = dtype_code_ == 8 ? 2 : 4;
  buffer_.resize(tokens.size() * width);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t t = tokens[i];
    if (t >= vocab_size_)
      throw DataError("token id " + std::to_string(t) + " written to " + prefix_ + ".bin is not below the vocab size " +
                      std::to_string(vocab_size_));
    // Little-endian, as numpy writes on the machines Megatron runs on.
    for (size_t b = 0; b < width; ++b) buffer_[i * width + b] = static_cast<unsigned char>(t >> (8 * b));
  }
  if (!buffer_.empty() && std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) != buffer_.size())
    throw DataError("cannot write Megatron data file " + prefix_ + ".bin: " + std::strerror(errno));
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  tokens_ += tokens.size();
}

void MegatronWriter::finish() {
  const std::string bin = prefix_ + ".bin", idx = prefix_ + ".idx";
  if (bin_ == nullptr) throw DataError("Megatron writer for " + prefix_ + ": finish called twice");
  const int closed = std::fclose(bin_);
  bin_ = nullptr;
  if (closed != 0) throw DataError("cannot write Megatron data file " + bin + ": " + std::strerror(errno));
  // NOTE [Megatron index format]: header, lengths, pointers, document indices.
  std::string out(kMagic, sizeof kMagic);
  auto put = [&out](const auto& v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  const uint64_t version = 1, count = lengths_.size(), doc_indices = count + 1;
  put(version);
  put(dtype_code_);
  put(count);
  put(doc_indices);
  for (int32_t len : lengths_) put(len);
  const int64_t width = dtype_code_ == 8 ? 2 : 4;
  int64_t pointer = 0;
  for (int32_t len : lengths_) {
    put(pointer);
    pointer += static_cast<int64_t>(len) * width;
  }
  for (uint64_t d = 0; d <= count; ++d) put(static_cast<int64_t>(d));
  std::FILE* f = std::fopen(idx.c_str(), "wb");
  if (f == nullptr) throw DataError("cannot write Megatron index " + idx + ": " + std::strerror(errno));
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !ok) throw DataError("cannot write Megatron index " + idx + ": " + std::strerror(errno));
}

std::array<double, 3> parse_split(const std::string& text) {
  std::array<double, 3> shares{};
  if (const std::string problem = split_problem(text, &shares); !problem.empty()) throw DataError(problem);
  return shares;
}

std::array<std::array<uint64_t, 2>, 3> megatron_split(const std::array<double, 3>& split, uint64_t elements) {
  // Python's int(round(x)) for x >= 0: to nearest, ties to even (the default FE_TONEAREST of nearbyint).
  const auto round_even = [](double x) {
    const int mode = std::fegetround();
    std::fesetround(FE_TONEAREST);
    const double r = std::nearbyint(x);
    std::fesetround(mode);
    return static_cast<uint64_t>(r);
  };
  std::array<std::array<uint64_t, 2>, 3> out{};
  double lo = 0;
  for (size_t i = 0; i < 3; ++i) {
    const double hi = lo + split[i];
    if (hi > lo) {
      out[i] = {round_even(lo * static_cast<double>(elements)), round_even(hi * static_cast<double>(elements))};
    }
    lo = hi;
  }
  return out;
}

}  // namespace trident::data
