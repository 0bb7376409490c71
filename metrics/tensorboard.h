// TensorBoard event files written without TensorFlow or protobuf (pure C++):
// the TFRecord framing and the few fields of the Event protobuf that scalars
// need, encoded by hand. NOTE [event file format] in tensorboard.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trident::tensorboard {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses it:
// crc32c("123456789") = 0xE3069283.
uint32_t crc32c(std::string_view data);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xA282EAD8.
uint32_t masked_crc32c(std::string_view data);
// One TFRecord: u64 length, masked crc of the length, data, masked crc of the data
// (integers little-endian).
std::string frame_record(std::string_view data);

using Scalars = std::vector<std::pair<std::string, float>>;
// A serialized Event: wall_time, step, and either file_version (the first record of
// a file, "brain.Event:2") or a summary of simple_value scalars.
std::string encode_file_version_event(double wall_time, const std::string& version);
std::string encode_scalars_event(double wall_time, int64_t step, const Scalars& scalars);

// dir/events.out.tfevents.<unix seconds>.<host>, its first record the file
// version; each add() is one flushed record of one step's scalars.
class EventWriter {
 public:
  explicit EventWriter(const std::string& dir);  // throws naming the file if it cannot write
  void add(int64_t step, const Scalars& scalars);
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace trident::tensorboard
