// safetensors against a byte image built by hand from the format's spec
// (independent of our encoder), round trips, malformed files; and the JSON
// reader/writer they stand on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include <unistd.h>

#include <toml++/toml.h>

#include "core/json.h"
#include "tests/error_of.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_shards.h"
#include "core/atomic_file.h"

namespace trident {
namespace {

namespace st = safetensors;

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return s;
}

// Header JSON exactly as the spec describes it, padded with spaces to 8 bytes.
std::string hand_built() {
  std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]},)"
      R"("c":{"dtype":"F16","shape":[1,2],"data_offsets":[10,14]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string data = {
      '\x00', '\x00', '\x80', '\x3f',  // 1.0f
      '\x00', '\x00', '\x00', '\xc0',  // -2.0f
      '\x00', '\x3f',                  // bf16 0x3F00 = 0.5
      '\x00', '\x3c',                  // f16 0x3C00 = 1.0
      '\x01', '\x00',                  // f16 0x0001 = 2^-24 (smallest subnormal)
  };
  return le64(header.size()) + header + data;
}

TEST(Safetensors, DecodesAHandBuiltFile) {
  std::map<std::string, std::string> meta;
  const auto ts = st::decode(hand_built(), "hand", &meta);
  ASSERT_EQ(ts.size(), 3u);
  EXPECT_EQ(ts[0].name, "a");
  EXPECT_EQ(st::to_float(ts[0], "hand"), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(ts[1].dtype, "BF16");
  EXPECT_EQ(st::to_float(ts[1], "hand"), (std::vector<float>{0.5f}));
  EXPECT_EQ(ts[2].shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(st::to_float(ts[2], "hand"), (std::vector<float>{1.0f, std::ldexp(1.0f, -24)}));
  EXPECT_TRUE(meta.empty());
}

TEST(Safetensors, EncodesTheSameBytesAsTheSpec) {
  const auto ts = st::decode(hand_built(), "hand");
  EXPECT_EQ(st::encode(ts), hand_built());
}

TEST(Safetensors, RoundTripsWithMetadataThroughAFile) {
  const std::string path = std::string(TRIDENT_BINARY_DIR) + "/test_safetensors_rt.safetensors";
  std::vector<float> v(12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 1.0f;
  st::write_file(path, {st::from_float("w", {3, 4}, v.data())}, {{"format", "pt"}});
  std::map<std::string, std::string> meta;
  const auto back = st::read_file(path, &meta);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(st::to_float(back[0], path), v);
  EXPECT_EQ(meta.at("format"), "pt");
  const std::string raw = st::encode(back, meta);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "data must start 8-byte aligned";
  std::filesystem::remove(path);
}

TEST(Safetensors, MalformedFilesAreErrorsNamingTheTensor) {
  const std::string good = hand_built();
  try {
    st::decode(good.substr(0, good.size() - 1), "cut.safetensors");
    FAIL() << "a truncated file decoded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cut.safetensors: tensor c"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  EXPECT_THROW(st::decode(good.substr(0, 20), "short"), std::runtime_error);
  EXPECT_THROW(st::decode(le64(1000) + "{}", "long header"), std::runtime_error);
  std::string bad = good;
  bad.replace(bad.find("[0,8]"), 5, "[0,9]");  // 9 bytes cannot hold F32 [2]
  EXPECT_THROW(st::decode(bad, "bad offsets"), std::runtime_error);
}

TEST(Json, ParsesWritesAndKeepsIntegersExact) {
  const std::string text = R"({"a": [1, -2, 9007199254740993], "s": "x\"\u00e9\ud83d\ude00", "o": {"t": true, "n": null, "f": 1.5e-3}})";
  const json::Value v = json::parse(text, "t");
  EXPECT_EQ(json::as_int_array(json::at(v, "a", "t"), "a"), (std::vector<int64_t>{1, -2, 9007199254740993LL}));
  EXPECT_EQ(json::as_string(json::at(v, "s", "t"), "s"), "x\"\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_TRUE(json::as_bool(json::at(json::at(v, "o", "t"), "t", "o"), "t"));
  EXPECT_TRUE(json::at(json::at(v, "o", "t"), "n", "o").is_null());
  EXPECT_DOUBLE_EQ(json::as_double(json::at(json::at(v, "o", "t"), "f", "o"), "f"), 1.5e-3);
  EXPECT_THROW(json::as_int(json::at(json::at(v, "o", "t"), "f", "o"), "f"), json::JsonError);
  const json::Value again = json::parse(json::dump(v, 2), "again");
  EXPECT_EQ(json::dump(again), json::dump(v));
  EXPECT_EQ(json::dump(json::number(1e-5)), "1e-05");
}

TEST(Json, ErrorsNameSourceAndByte) {
  try {
    json::parse(R"({"a": [1, 2,]})", "f.json");
    FAIL();
  } catch (const json::JsonError& e) {
    EXPECT_NE(std::string(e.what()).find("f.json: invalid JSON at byte 12"), std::string::npos) << e.what();
  }
  EXPECT_THROW(json::parse(R"({"a": 1} x)", "f"), json::JsonError);
  EXPECT_THROW(json::parse(R"({"a": "unterminated)", "f"), json::JsonError);
  EXPECT_THROW(json::at(json::parse("{\"a\": 1}", "f"), "b", "f"), json::JsonError);
}

// Python's json takes a repeated key's last value, a first-match reader its first:
// the file means two things, so it is refused naming the key (nested objects too).
TEST(Json, RepeatedKeysAreErrors) {
  const std::string e = testing::error_of<json::JsonError>(
      [] { json::parse(R"({"model": {"n_layer": 2, "n_embd": 8, "n_layer": 4}})", "config.json"); });
  EXPECT_NE(e.find("config.json: invalid JSON at byte 10: the object starting here has the key \"n_layer\" twice"),
            std::string::npos)
      << e;
  EXPECT_NO_THROW(json::parse(R"({"a": {"x": 1}, "b": {"x": 2}})", "f"));  // the same key in two objects is fine
}

// Objects keep the file's member order (manifests and summaries read as
// written); an error in a multi-line file names its line and column too.
TEST(Json, KeepsMemberOrderAndNamesTheLineOfAnError) {
  const json::Value v = json::parse(R"({"zeta": 1, "alpha": {"y": 2, "b": 3}, "mid": [3, 1]})", "f");
  EXPECT_EQ(json::dump(v), R"({"zeta":1,"alpha":{"y":2,"b":3},"mid":[3,1]})");
  json::Value o = json::Value::object();
  o["step"] = json::number(int64_t{7});
  o["layout"] = "tp1";
  o["step"] = json::number(int64_t{8});  // replaced in place
  EXPECT_EQ(json::dump(o), R"({"step":8,"layout":"tp1"})");
  const std::string e =
      testing::error_of<json::JsonError>([] { json::parse("{\n  \"a\": 1,\n  \"b\": ]\n}", "m.json"); });
  EXPECT_NE(e.find("m.json: invalid JSON at byte 19: "), std::string::npos) << e;
  EXPECT_NE(e.find("(line 3, column 8)"), std::string::npos) << e;
}

// What JSON cannot hold or Trident will not read: non-finite numbers, integers
// beyond int64, nesting deeper than 64, text that is not UTF-8.
TEST(Json, RefusesWhatItCannotHold) {
  EXPECT_THROW(json::number(std::numeric_limits<double>::quiet_NaN()), json::JsonError);
  EXPECT_THROW(json::number(std::numeric_limits<double>::infinity()), json::JsonError);
  const json::Value big = json::parse(R"({"n": 9223372036854775808, "m": 9223372036854775807})", "f");
  EXPECT_EQ(json::as_int(json::at(big, "m", "f"), "m"), INT64_MAX);
  EXPECT_NE(testing::error_of<json::JsonError>([&] { json::as_int(json::at(big, "n", "f"), "n"); })
                .find("n: expected an integer that fits in 64 bits"),
            std::string::npos);
  EXPECT_NO_THROW(json::parse(std::string(64, '[') + std::string(64, ']'), "f"));
  EXPECT_NE(testing::error_of<json::JsonError>([] { json::parse(std::string(65, '[') + std::string(65, ']'), "d"); })
                .find("d: invalid JSON at byte 64: nesting deeper than 64"),
            std::string::npos);
  EXPECT_THROW(json::parse("[\"\xff\"]", "f"), json::JsonError);
  EXPECT_THROW(json::dump(json::Value(std::string("\xff"))), json::JsonError);
}

// quote() writes TOML basic strings too (the config writer): toml++ reads every
// control character, DEL, a quote and a backslash back as the same bytes.
TEST(Json, QuoteIsATomlBasicString) {
  std::string s = "q\"b\\ e\xc3\xa9";
  for (int c = 1; c < 0x20; ++c) s += static_cast<char>(c);
  s += '\x7f';
  const toml::table t = toml::parse("k = " + json::quote(s));
  EXPECT_EQ(t["k"].value<std::string>(), s);
  EXPECT_EQ(json::as_string(json::parse(json::quote(s), "q"), "q"), s);
}

// Hugging Face's sharding (checkpoint/safetensors_shards.h): a shard closes before a group that would
// take it past shard_bytes, a group larger than that still gets a shard of its own, the index names
// each tensor's file and counts the reserved bytes only; unsharded, one model.safetensors.
TEST(SafetensorsShards, SplitAsSavePretrainedDoesAndIndexEveryTensor) {
  const std::string dir = std::filesystem::temp_directory_path() / ("trident_shards_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<float> v(10, 1.0f);
  st::ShardWriter w(48);
  w.reserve(40), w.add(st::from_float("a", {10}, v.data()));
  w.reserve(40), w.add(st::from_float("b", {10}, v.data()));  // 80 > 48: a second shard
  w.add(st::from_float("b_extra", {2}, v.data()));            // not reserved: not in total_size
  w.reserve(8), w.add(st::from_float("c", {2}, v.data()));    // 48 fits
  w.reserve(80), w.add(st::from_float("d", {20}, v.data()));  // alone past the limit: a third
  EXPECT_EQ(w.write(dir), 5);
  const json::Value index = json::parse(read_file(dir + "/model.safetensors.index.json"), "index");
  EXPECT_EQ(json::as_int(json::at(json::at(index, "metadata", "i"), "total_size", "i"), "t"), 168);
  const json::Value& map = json::at(index, "weight_map", "i");
  EXPECT_EQ(json::as_string(json::at(map, "a", "i"), "a"), "model-00001-of-00003.safetensors");
  for (const char* t : {"b", "b_extra", "c"}) EXPECT_EQ(json::as_string(json::at(map, t, "i"), t), "model-00002-of-00003.safetensors");
  EXPECT_EQ(json::as_string(json::at(map, "d", "i"), "d"), "model-00003-of-00003.safetensors");
  EXPECT_EQ(st::read_file(dir + "/model-00002-of-00003.safetensors").size(), 3u);
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
  st::ShardWriter one(0);
  one.reserve(40), one.add(st::from_float("a", {10}, v.data()));
  one.reserve(40), one.add(st::from_float("b", {10}, v.data()));
  EXPECT_EQ(one.write(dir), 2);
  EXPECT_EQ(st::read_file(dir + "/model.safetensors").size(), 2u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trident
