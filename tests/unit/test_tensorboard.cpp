// TensorBoard event files (metrics/tensorboard.h): CRC-32C against published
// vectors, the TFRecord framing, the hand-encoded Event bytes, and the file
// RunLog writes. tests/reference/test_tensorboard.py reads a real run's file
// with the tensorboard package.
#include "metrics/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "metrics/metrics.h"

namespace tb = trident::tensorboard;

namespace {

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<size_t>(i)]);
  return v;
}

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

// Splits a file's bytes into records, checking each record's length and both CRCs.
std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < file.size()) {
    EXPECT_GE(file.size() - at, 16u) << "truncated record at byte " << at;
    if (file.size() - at < 16) break;
    const uint64_t n = le(file, at, 8);
    EXPECT_EQ(le(file, at + 8, 4), tb::masked_crc32c(file.substr(at, 8)));
    const std::string data = file.substr(at + 12, n);
    EXPECT_EQ(le(file, at + 12 + n, 4), tb::masked_crc32c(data));
    out.push_back(data);
    at += 16 + n;
  }
  return out;
}

}  // namespace

TEST(TensorBoard, Crc32cKnownVectors) {
  EXPECT_EQ(tb::crc32c("123456789"), 0xE3069283u);  // the CRC catalogue's check value
  EXPECT_EQ(tb::crc32c(""), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xFF, and 0..31 ascending.
  EXPECT_EQ(tb::crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(tb::crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(tb::crc32c(ascending), 0x46DD794Eu);
}

TEST(TensorBoard, MaskedCrc) {
  const uint32_t c = tb::crc32c("123456789");
  EXPECT_EQ(tb::masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xA282EAD8u);
}

TEST(TensorBoard, RecordFraming) {
  const std::string data = "hello";
  const std::string r = tb::frame_record(data);
  ASSERT_EQ(r.size(), 8u + 4u + data.size() + 4u);
  EXPECT_EQ(r.substr(0, 8), bytes({5, 0, 0, 0, 0, 0, 0, 0}));  // u64 little-endian length
  EXPECT_EQ(le(r, 8, 4), tb::masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, 5), data);
  EXPECT_EQ(le(r, 17, 4), tb::masked_crc32c(data));
  EXPECT_EQ(tb::frame_record("").size(), 16u);
}

TEST(TensorBoard, FileVersionEventBytes) {
  const std::string e = tb::encode_file_version_event(1.5, "brain.Event:2");
  // wall_time: field 1, fixed64 (1.5 = 0x3FF8000000000000); file_version: field 3, length 13.
  EXPECT_EQ(e, bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x1A, 13}) + "brain.Event:2");
}

TEST(TensorBoard, ScalarsEventBytes) {
  const std::string e = tb::encode_scalars_event(1.5, 300, {{"loss", 2.0f}});
  const std::string value = bytes({0x0A, 4}) + "loss" + bytes({0x15, 0, 0, 0, 0x40});  // tag, simple_value 2.0f
  const std::string summary = bytes({0x0A, static_cast<int>(value.size())}) + value;    // Summary.value
  EXPECT_EQ(e, bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F,                               // wall_time
                      0x10, 0xAC, 0x02,                                                  // step 300, varint
                      0x2A, static_cast<int>(summary.size())}) +                         // Event.summary
                   summary);
}

TEST(TensorBoard, RunLogWritesOneRecordPerRow) {
  const auto dir = std::filesystem::temp_directory_path() / ("trident-tb-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string path;
  {
    trident::RunLog log(dir.string(), "t", -1, /*tensorboard=*/true);
    path = log.event_file();
    trident::StepMetrics m;
    m.step = 1;
    m.loss = 4.25;
    log.append(m);
    m.step = 2;
    m.eval_loss = 3.5;
    log.append(m);
  }
  EXPECT_EQ(std::filesystem::path(path).parent_path(), dir);
  EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  std::ifstream f(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto records = read_records(file);
  ASSERT_EQ(records.size(), 3u);  // file version, two steps
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  EXPECT_NE(records[1].find("loss"), std::string::npos);
  EXPECT_EQ(records[1].find("eval_loss"), std::string::npos);
  EXPECT_NE(records[2].find("eval_loss"), std::string::npos);
  // A resumed run (from step 1) writes a new file and never overwrites the first,
  // even within the same second.
  {
    trident::RunLog resumed(dir.string(), "t", 1, /*tensorboard=*/true);
    EXPECT_NE(resumed.event_file(), path);
    trident::StepMetrics m;
    m.step = 2;
    resumed.append(m);
    std::ifstream g(resumed.event_file(), std::ios::binary);
    const std::string second((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
    EXPECT_EQ(read_records(second).size(), 2u);
  }
  std::ifstream again(path, std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>()), file);
  // No tensorboard: no event file.
  trident::RunLog plain((dir / "plain").string(), "t");
  EXPECT_EQ(plain.event_file(), "");
  for (const auto& entry : std::filesystem::directory_iterator(dir / "plain"))
    EXPECT_EQ(entry.path().filename().string().find("tfevents"), std::string::npos);
  std::filesystem::remove_all(dir);
}
