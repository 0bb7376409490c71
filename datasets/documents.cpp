// Document boundaries, positions and loss masks of a sample; the loss-mask file
// (documents.h, NOTE [sample documents], NOTE [loss-mask file]).
#include "datasets/documents.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "datasets/errors.h"

namespace trident::data {

namespace {
constexpr char kMagic[8] = {'T', 'R', 'D', 'L', 'M', 'S', 'K', '1'};
}  // namespace

SampleDocuments sample_documents(const int64_t* sample, const uint8_t* mask, int64_t seq_len,
                                 const DocumentOptions& o) {
  SampleDocuments d;
  const auto L = static_cast<size_t>(seq_len);
  d.position_ids.resize(L);
  d.loss_mask.assign(L, 1.0f);
  d.cu_seqlens.push_back(0);
  int64_t start = 0;  // where the current document's positions count from
  for (size_t j = 0; j < L; ++j) {
    d.position_ids[j] = o.reset_position_ids ? static_cast<int64_t>(j) - start : static_cast<int64_t>(j);
    const bool eod = o.eod >= 0 && sample[j] == o.eod;
    if (eod && o.eod_mask_loss) d.loss_mask[j] = 0.0f;
    if (mask != nullptr && mask[j + 1] == 0) d.loss_mask[j] = 0.0f;
    if (eod && j + 1 < L) {
      start = static_cast<int64_t>(j) + 1;
      if (o.reset_attention_mask) d.cu_seqlens.push_back(static_cast<int32_t>(j + 1));
    }
  }
  d.cu_seqlens.push_back(static_cast<int32_t>(L));
  return d;
}

std::string loss_mask_path(const std::string& prefix) { return prefix + ".lossmask"; }

void write_loss_mask_file(const std::string& prefix, const std::vector<uint8_t>& mask) {
  const std::string path = loss_mask_path(prefix), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    uint8_t count[8];
    for (int b = 0; b < 8; ++b) count[b] = static_cast<uint8_t>(static_cast<uint64_t>(mask.size()) >> (8 * b));
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(count), 8);
    out.write(reinterpret_cast<const char*>(mask.data()), static_cast<std::streamsize>(mask.size()));
    if (!out) throw DataError("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

std::vector<uint8_t> read_loss_mask_file(const std::string& prefix, uint64_t tokens) {
  const std::string path = loss_mask_path(prefix);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw DataError(path + ": cannot read the loss-mask file data.completion_only_loss needs (`trident data prepare "
                           "--format jsonl` writes it for prompt/completion lines)");
  char magic[8];
  uint8_t count[8];
  if (!in.read(magic, 8) || !in.read(reinterpret_cast<char*>(count), 8) || std::memcmp(magic, kMagic, 8) != 0)
    throw DataError(path + ": not a loss-mask file (expected magic TRDLMSK1 and a token count)");
  uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | count[b];
  if (n != tokens)
    throw DataError(path + ": holds " + std::to_string(n) + " tokens' masks but " + prefix + ".bin has " +
                    std::to_string(tokens) + " tokens: the mask file does not match its token file");
  std::vector<uint8_t> mask(n);
  in.read(reinterpret_cast<char*>(mask.data()), static_cast<std::streamsize>(n));
  if (static_cast<uint64_t>(in.gcount()) != n || in.peek() != std::char_traits<char>::eof())
    throw DataError(path + ": its size is not 16 + " + std::to_string(n) + " bytes: the file is cut or has extra bytes");
  for (uint64_t i = 0; i < n; ++i)
    if (mask[i] > 1)
      throw DataError(path + ": byte " + std::to_string(i) + " is " + std::to_string(mask[i]) + " (expected 0 or 1)");
  return mask;
}

}  // namespace trident::data
