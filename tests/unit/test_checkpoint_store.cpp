// The sharded store: save under one sharding, read under others bit-exactly
// (compared with the full tensors the test built), ZeRO-style flat ranges,
// checksum and truncation errors naming file and tensor, crash safety of the
// commit protocol, and keep-N pruning.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/checkpoint_store.h"
#include "tests/error_of.h"

namespace trident::ckpt {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string d = std::string(TRIDENT_BINARY_DIR) + "/test_ckpt_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A full tensor with distinct values, and its box [off, off + ext) copied out by plain loops.
struct Full {
  std::vector<int64_t> shape;
  std::vector<float> v;
  explicit Full(std::vector<int64_t> s, float base) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (int64_t i = 0; i < n; ++i) v.push_back(base + static_cast<float>(i) * 0.5f);
  }
  std::vector<float> box(const std::vector<int64_t>& off, const std::vector<int64_t>& ext) const {
    std::vector<float> out;
    std::vector<int64_t> idx(off.size(), 0);
    int64_t n = 1;
    for (int64_t e : ext) n *= e;
    for (int64_t k = 0; k < n; ++k) {
      int64_t rem = k, lin = 0;
      for (size_t d = off.size(); d-- > 0;) {
        idx[d] = rem % ext[d];
        rem /= ext[d];
      }
      for (size_t d = 0; d < off.size(); ++d) lin = lin * shape[d] + off[d] + idx[d];
      out.push_back(v[static_cast<size_t>(lin)]);
    }
    return out;
  }
};

std::vector<float> as_floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

const Full A({6, 4}, 0.0f), B({4, 8}, 100.0f), C({5, 3}, -50.0f), D({2, 3, 4}, 7.0f);

// World 4: A split in 2 along dim 0 (ranks 0, 1; rank 1 writes it last so the
// last byte of rank-00001.bin is A's), B split in 4 along dim 1, C flattened
// and cut into ZeRO-style ranges [0,4) [4,11) [11,15) on ranks 0..2.
void save(const std::string& dir, int64_t step, int keep, bool commit_it = true) {
  for (int r = 0; r < 4; ++r) {
    ShardWriter w(dir, step, r, 4);
    const auto b = B.box({0, 2 * r}, {4, 2});
    w.add("B", "F32", B.shape, {0, 2 * r}, {4, 2}, b.data());
    const int64_t scalar = 42 + step;
    if (r == 0) w.add("step_scalar", "I64", {}, {}, {}, &scalar);
    const int64_t cuts[] = {0, 4, 11, 15};
    if (r < 3) w.add_flat("C", "F32", C.shape, {0, 0}, {5, 3}, cuts[r], cuts[r + 1] - cuts[r], C.v.data() + cuts[r]);
    w.add_blob("rng", "rank " + std::to_string(r) + " state");
    if (r < 2) {
      const auto a = A.box({3 * r, 0}, {3, 4});
      w.add("A", "F32", A.shape, {3 * r, 0}, {3, 4}, a.data());
    }
    Meta m;
    m.config_toml = "[model]\nlayers = 2\n";
    m.layout = "tp=4";
    m.extra["lr_step"] = std::to_string(step);
    w.set_meta(m);
    w.finish();
  }
  if (commit_it) commit(dir, step, 4, keep);
}

template <class F>
std::string error_of(F f) {
  return testing::error_of<CheckpointError>(f);
}

TEST(CheckpointStore, Fnv1a64KnownVectors) {
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ULL);
}

TEST(CheckpointStore, ReadsAnyShardingBitExactly) {
  const std::string dir = fresh_dir("reshard");
  save(dir, 10, 2);
  Reader r(dir);
  EXPECT_EQ(r.step(), 10);
  EXPECT_EQ(r.world(), 4);
  EXPECT_EQ(r.meta().layout, "tp=4");
  EXPECT_EQ(r.meta().extra.at("lr_step"), "10");
  EXPECT_EQ(r.meta().config_toml, "[model]\nlayers = 2\n");
  EXPECT_FALSE(r.meta().trident_version.empty());
  // A, saved in 2 row blocks, read as 3.
  for (int64_t k = 0; k < 3; ++k)
    EXPECT_EQ(as_floats(r.read("A", "F32", A.shape, {2 * k, 0}, {2, 4})), A.box({2 * k, 0}, {2, 4})) << k;
  // B, saved in 4 column blocks, read as a sub-slice crossing two of them, and whole.
  EXPECT_EQ(as_floats(r.read("B", "F32", B.shape, {1, 3}, {2, 4})), B.box({1, 3}, {2, 4}));
  EXPECT_EQ(as_floats(r.read_full("B", "F32", B.shape)), B.v);
  // C, saved as flat ranges, read as boxes.
  EXPECT_EQ(as_floats(r.read_full("C", "F32", C.shape)), C.v);
  EXPECT_EQ(as_floats(r.read("C", "F32", C.shape, {1, 1}, {3, 2})), C.box({1, 1}, {3, 2}));
  const std::string s = r.read_full("step_scalar", "I64", {});
  int64_t scalar = 0;
  std::memcpy(&scalar, s.data(), 8);
  EXPECT_EQ(scalar, 52);
  EXPECT_EQ(r.blob(3, "rng"), "rank 3 state");
  EXPECT_FALSE(r.has_blob(4, "rng"));
  r.verify();
}

TEST(CheckpointStore, FlatRangesOfA3dTensorReadAsEveryBox) {
  const std::string dir = fresh_dir("flat3d");
  std::mt19937 gen(5);
  const std::vector<int64_t> cuts = {0, 1, 5, 6, 13, 17, 24};  // ranges crossing rows and planes
  const int world = static_cast<int>(cuts.size()) - 1;
  for (int r = 0; r < world; ++r) {
    ShardWriter w(dir, 1, r, world);
    w.add_flat("D", "F32", D.shape, {0, 0, 0}, {2, 3, 4}, cuts[r], cuts[r + 1] - cuts[r], D.v.data() + cuts[r]);
    w.finish();
  }
  commit(dir, 1, world, 2);
  Reader rd(dir);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> off(3), ext(3);
    for (size_t d = 0; d < 3; ++d) {
      off[d] = std::uniform_int_distribution<int64_t>(0, D.shape[d] - 1)(gen);
      ext[d] = std::uniform_int_distribution<int64_t>(1, D.shape[d] - off[d])(gen);
    }
    ASSERT_EQ(as_floats(rd.read("D", "F32", D.shape, off, ext)), D.box(off, ext)) << trial;
  }
}

TEST(CheckpointStore, ShapeDtypeMissingAndCoverageErrorsNameTheTensor) {
  const std::string dir = fresh_dir("errors");
  save(dir, 10, 2);
  Reader r(dir);
  const std::string shape = error_of([&] { r.read_full("A", "F32", {6, 5}); });
  EXPECT_NE(shape.find("tensor A has shape [6, 4]"), std::string::npos) << shape;
  EXPECT_NE(shape.find("[6, 5] is expected"), std::string::npos) << shape;
  EXPECT_NE(error_of([&] { r.read_full("A", "F16", A.shape); }).find("tensor A is F32"), std::string::npos);
  EXPECT_NE(error_of([&] { r.read_full("Z", "F32", {1}); }).find("has no tensor Z"), std::string::npos);

  const std::string half = fresh_dir("half");
  {
    ShardWriter w(half, 1, 0, 1);
    const auto a = A.box({0, 0}, {3, 4});
    w.add("A", "F32", A.shape, {0, 0}, {3, 4}, a.data());
    w.finish();
  }
  commit(half, 1, 1, 2);
  const std::string cover = error_of([&] { Reader(half).read_full("A", "F32", A.shape); });
  EXPECT_NE(cover.find("tensor A: the shards in"), std::string::npos) << cover;
  EXPECT_NE(cover.find("cover 12 of the 24 elements"), std::string::npos) << cover;
}

TEST(CheckpointStore, IdenticalReplicasAreReadOnceDifferentOnesAreAnError) {
  const std::string dir = fresh_dir("replicas");
  std::vector<float> other = A.v;
  other[5] += 1.0f;
  for (int r = 0; r < 3; ++r) {  // ranks 0 and 1 are DP replicas; rank 2 differs
    ShardWriter w(dir, 1, r, 3);
    w.add("A", "F32", A.shape, {0, 0}, {6, 4}, r < 2 ? A.v.data() : other.data());
    w.finish();
  }
  commit(dir, 1, 3, 2);
  const std::string e = error_of([&] { Reader(dir).read_full("A", "F32", A.shape); });
  EXPECT_NE(e.find("rank-00002.bin hold the same slice with different values"), std::string::npos) << e;

  const std::string ok = fresh_dir("replicas_ok");
  for (int r = 0; r < 2; ++r) {
    ShardWriter w(ok, 1, r, 2);
    w.add("A", "F32", A.shape, {0, 0}, {6, 4}, A.v.data());
    w.finish();
  }
  commit(ok, 1, 2, 2);
  EXPECT_EQ(as_floats(Reader(ok).read_full("A", "F32", A.shape)), A.v);
}

TEST(CheckpointStore, CorruptedByteIsAChecksumErrorNamingFileAndTensor) {
  const std::string dir = fresh_dir("corrupt");
  save(dir, 10, 2);
  const std::string bin = dir + "/step-00000010/rank-00001.bin";
  {
    std::fstream f(bin, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0x10));
  }
  Reader r(dir);  // indexes still parse
  EXPECT_EQ(as_floats(r.read_full("B", "F32", B.shape)), B.v) << "other tensors stay readable";
  const std::string e = error_of([&] { r.read_full("A", "F32", A.shape); });
  EXPECT_NE(e.find("rank-00001.bin: A fails its checksum"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { r.verify(); }).find("fails its checksum"), std::string::npos);
}

TEST(CheckpointStore, TruncatedFilesAreErrorsNamingFileAndTensor) {
  const std::string dir = fresh_dir("truncated");
  save(dir, 10, 2);
  const std::string bin = dir + "/step-00000010/rank-00001.bin";
  fs::resize_file(bin, fs::file_size(bin) - 3);
  const std::string e = error_of([&] { Reader r(dir); });
  EXPECT_NE(e.find("rank-00001.bin is truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor A is cut off"), std::string::npos) << e;

  const std::string idx = dir + "/step-00000010/rank-00002.json";
  fs::resize_file(idx, fs::file_size(idx) / 2);
  fs::resize_file(bin, fs::file_size(bin) + 3);
  const std::string j = error_of([&] { Reader r(dir); });
  EXPECT_NE(j.find("rank-00002.json"), std::string::npos) << j;
}

TEST(CheckpointStore, ACrashBeforeCommitLeavesThePreviousCheckpointLoadable) {
  const std::string dir = fresh_dir("crash");
  save(dir, 10, 2);
  // Step 20: ranks 0..2 finish, rank 3 dies mid-write (its writer is destroyed
  // unfinished) and a temp file of the `latest` marker is left behind.
  for (int r = 0; r < 4; ++r) {
    ShardWriter w(dir, 20, r, 4);
    const auto b = B.box({0, 2 * r}, {4, 2});
    w.add("B", "F32", B.shape, {0, 2 * r}, {4, 2}, b.data());
    if (r < 3) w.finish();
  }
  EXPECT_FALSE(fs::exists(dir + "/step-00000020/rank-00003.bin"));
  EXPECT_FALSE(fs::exists(dir + "/step-00000020/rank-00003.bin.tmp")) << "an unfinished writer cleans up";
  std::ofstream(dir + "/step-00000020/rank-00003.bin.tmp") << "partial";
  std::ofstream(dir + "/latest.tmp") << "step-00000020\n";
  Reader r(dir);
  EXPECT_EQ(r.step(), 10);
  EXPECT_EQ(as_floats(r.read_full("A", "F32", A.shape)), A.v);
  const std::string e = error_of([&] { commit(dir, 20, 4, 2); });
  EXPECT_NE(e.find("rank-00003.json is missing"), std::string::npos) << e;
  EXPECT_EQ(Reader(dir).step(), 10) << "a failed commit does not move latest";
  // Rewriting the step `latest` names is refused.
  EXPECT_NE(error_of([&] { ShardWriter w(dir, 10, 0, 4); }).find("never rewritten in place"), std::string::npos);
  // The next complete save commits and sweeps the debris.
  save(dir, 30, 2);
  EXPECT_EQ(Reader(dir).step(), 30);
  EXPECT_FALSE(fs::exists(dir + "/step-00000020"));
  EXPECT_TRUE(fs::exists(dir + "/step-00000010"));
}

TEST(CheckpointStore, KeepsTheNewestKCheckpoints) {
  const std::string dir = fresh_dir("keep");
  save(dir, 10, 2);
  save(dir, 20, 2);
  save(dir, 30, 2);
  EXPECT_FALSE(fs::exists(dir + "/step-00000010"));
  EXPECT_TRUE(fs::exists(dir + "/step-00000020/manifest.json"));
  EXPECT_TRUE(fs::exists(dir + "/step-00000030/manifest.json"));
  EXPECT_EQ(Reader(dir + "/step-00000020").step(), 20) << "a kept step directory opens directly";
  {  // Rewriting step 20 (not the latest) unmarks it until a commit; `latest` is untouched.
    ShardWriter w(dir, 20, 0, 4);
  }
  EXPECT_NE(error_of([&] { Reader r(dir + "/step-00000020"); }).find("neither `latest` nor manifest.json"),
            std::string::npos);
  EXPECT_EQ(Reader(dir).step(), 30);
  save(dir, 20, 3);
  EXPECT_EQ(Reader(dir).step(), 20) << "latest follows the last commit";
  save(dir, 30 + 1, 2);
  EXPECT_FALSE(fs::exists(dir + "/step-00000020")) << "keep 2: 31 and 30 stay";
  EXPECT_TRUE(fs::exists(dir + "/step-00000030"));
  save(dir, 40, 1);
  EXPECT_FALSE(fs::exists(dir + "/step-00000030"));
  EXPECT_FALSE(fs::exists(dir + "/step-00000031"));
  EXPECT_EQ(Reader(dir).step(), 40);
  EXPECT_NE(error_of([&] { commit(dir, 40, 4, 0); }).find("checkpoint.keep = 0"), std::string::npos);
}

// A number in an index or manifest changed by hand: the error names the edited
// file and the number, not an intact neighbour (issue 30).
void set_json_number(const std::string& path, const std::string& key, int64_t value) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string tag = "\"" + key + "\": ";
  const size_t at = text.find(tag);
  ASSERT_NE(at, std::string::npos) << path << " has no " << key;
  const size_t from = at + tag.size(), to = text.find_first_not_of("0123456789", from);
  text.replace(from, to - from, std::to_string(value));
  std::ofstream(path) << text;
}

TEST(CheckpointStore, AnEditedBinSizeIsNamed) {
  for (const int64_t delta : {-8, 8}) {
    const std::string dir = fresh_dir("binsize");
    save(dir, 10, 2);
    const std::string idx = dir + "/step-00000010/rank-00001.json", bin = dir + "/step-00000010/rank-00001.bin";
    const int64_t size = static_cast<int64_t>(fs::file_size(bin));
    set_json_number(idx, "bin_size", size + delta);
    const std::string e = error_of([&] { Reader r(dir); });
    EXPECT_NE(e.find("rank-00001.json: bin_size = " + std::to_string(size + delta) +
                     ", but its tensors and blobs end at byte " + std::to_string(size)),
              std::string::npos) << e;
  }
  // An intact index and a .bin with bytes appended: the .bin is named.
  const std::string dir = fresh_dir("binsize");
  save(dir, 10, 2);
  const std::string bin = dir + "/step-00000010/rank-00002.bin";
  const auto size = fs::file_size(bin);
  fs::resize_file(bin, size + 5);
  const std::string e = error_of([&] { Reader r(dir); });
  EXPECT_NE(e.find("rank-00002.bin holds " + std::to_string(size + 5) + " bytes, but "), std::string::npos) << e;
  EXPECT_NE(e.find("says bin_size = " + std::to_string(size)), std::string::npos) << e;
}

TEST(CheckpointStore, AManifestEditedToAnotherWorldIsNamed) {
  for (const int64_t world : {2, 8}) {
    const std::string dir = fresh_dir("manifestworld");
    save(dir, 10, 2);  // world 4
    const std::string manifest = dir + "/step-00000010/manifest.json";
    set_json_number(manifest, "world", world);
    const std::string e = error_of([&] { Reader r(dir); });
    EXPECT_NE(e.find("step-00000010/manifest.json: world = " + std::to_string(world) +
                     ", but the step's 4 rank file(s) were written for world 4"),
              std::string::npos) << e;
  }
}

// `latest` lost (deleted by hand, an old disk): a resume still finds the newest
// complete step, never an incomplete newer one; a garbled `latest` is shown escaped.
TEST(CheckpointStore, WithoutLatestTheNewestCompleteStepLoads) {
  const std::string dir = fresh_dir("nolatest");
  save(dir, 10, 3);
  save(dir, 20, 3);
  save(dir, 30, 3, /*commit_it=*/false);  // every rank file written, never committed: no manifest.json
  fs::remove(dir + "/latest");
  bool from_latest = true;
  EXPECT_EQ(newest_step(dir, &from_latest), "step-00000020");
  EXPECT_FALSE(from_latest);
  EXPECT_EQ(Reader(dir).step(), 20);
  EXPECT_EQ(newest_step(dir + "/none"), "");
  std::ofstream(dir + "/latest", std::ios::binary) << std::string("step-0000\0" "002\n", 14);
  const std::string e = error_of([&] { newest_step(dir); });
  EXPECT_NE(e.find("/latest holds \"step-0000\\x00002\", not a step-XXXXXXXX name"), std::string::npos) << e;
  std::ofstream(dir + "/latest") << "step-00000010\n";
  EXPECT_EQ(newest_step(dir, &from_latest), "step-00000010");
  EXPECT_TRUE(from_latest);
  // A `latest` naming a step that is not there, or one never committed: the file is named.
  std::ofstream(dir + "/latest") << "step-00000099\n";
  const std::string missing = error_of([&] { newest_step(dir); });
  EXPECT_NE(missing.find("/latest names step-00000099, but " + dir + "/step-00000099 does not exist"), std::string::npos)
      << missing;
  std::ofstream(dir + "/latest") << "step-00000030\n";
  const std::string uncommitted = error_of([&] { Reader r(dir); });
  EXPECT_NE(uncommitted.find("/latest names step-00000030, but " + dir + "/step-00000030 has no manifest.json"),
            std::string::npos) << uncommitted;
}

}  // namespace
}  // namespace trident::ckpt
