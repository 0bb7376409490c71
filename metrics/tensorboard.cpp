// TensorBoard event files: see tensorboard.h.
//
// NOTE [event file format]
// An event file is a sequence of TFRecords (tensorflow/core/lib/io/record_writer.cc):
//   u64 length | u32 masked_crc32c(length bytes) | data[length] | u32 masked_crc32c(data)
// little-endian, where masked(c) = ((c >> 15) | (c << 17)) + 0xA282EAD8 (mod 2^32) and
// crc32c is CRC-32C (Castagnoli). Each record's data is a serialized tensorboard.Event
// (tensorboard/compat/proto/event.proto, summary.proto); the fields used here:
//   Event          wall_time  double  field 1  (wire type 1: tag 0x09, 8 bytes)
//                  step       int64   field 2  (varint: tag 0x10)
//                  file_version string field 3 (length-delimited: tag 0x1A), "brain.Event:2"
//                  summary    Summary field 5  (length-delimited: tag 0x2A)
//   Summary        value      repeated Value field 1 (tag 0x0A)
//   Summary.Value  tag        string  field 1  (tag 0x0A)
//                  simple_value float field 2  (wire type 5: tag 0x15, 4 bytes)
// The first record of a file carries file_version; TensorBoard reads the rest as scalar
// summaries. tests/reference/test_tensorboard.py reads Trident's files with tensorboard itself.
#include "metrics/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace trident::tensorboard {
namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_bytes_field(std::string& out, uint8_t tag, std::string_view bytes) {
  out.push_back(static_cast<char>(tag));
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  uint64_t bits = 0;
  std::memcpy(&bits, &wall_time, sizeof bits);
  e.push_back(0x09);  // wall_time, field 1, fixed64
  put_le(e, bits, 8);
  if (step != 0) {  // proto3: a zero int64 is not written
    e.push_back(0x10);  // step, field 2, varint (int64: two's complement)
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  const auto& t = crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = t[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string frame_record(std::string_view data) {
  std::string out, len;
  put_le(len, data.size(), 8);
  out += len;
  put_le(out, masked_crc32c(len), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

std::string encode_file_version_event(double wall_time, const std::string& version) {
  std::string e = event_header(wall_time, 0);
  put_bytes_field(e, 0x1A, version);  // file_version, field 3
  return e;
}

std::string encode_scalars_event(double wall_time, int64_t step, const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes_field(v, 0x0A, tag);  // Value.tag, field 1
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    v.push_back(0x15);  // Value.simple_value, field 2, fixed32
    put_le(v, bits, 4);
    put_bytes_field(summary, 0x0A, v);  // Summary.value, field 1
  }
  std::string e = event_header(wall_time, step);
  put_bytes_field(e, 0x2A, summary);  // Event.summary, field 5
  return e;
}

EventWriter::EventWriter(const std::string& dir) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const double t = now_s();
  const std::string base = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(t)) + "." + host;
  path_ = base;
  // A run resumed within the same second on the same host: never overwrite a file.
  for (int i = 1; std::filesystem::exists(path_); ++i) path_ = base + "." + std::to_string(i);
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot write TensorBoard event file '" + path_ + "'");
  write(encode_file_version_event(t, "brain.Event:2"));
}

void EventWriter::add(int64_t step, const Scalars& scalars) { write(encode_scalars_event(now_s(), step, scalars)); }

void EventWriter::write(const std::string& event) {
  out_ << frame_record(event);
  out_.flush();
  if (!out_) throw std::runtime_error("cannot write TensorBoard event file '" + path_ + "'");
}

}  // namespace trident::tensorboard
