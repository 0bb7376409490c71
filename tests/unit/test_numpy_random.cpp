// NumpyRandomState against numpy itself: tests/unit/numpy_random_reference.py prints
// numpy's legacy RandomState draws (raw outputs under integer and array seeds,
// randint over small, 32-bit and 64-bit ranges, shuffles of several sizes) and this
// test computes every line again in C++ and compares.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/errors.h"
#include "datasets/numpy_random.h"
#include "tests/run_helpers.h"

namespace td = trident::data;

namespace {

std::vector<std::string> numpy_lines() {
  const std::string cmd = std::string(TRIDENT_PYTHON) + " " + TRIDENT_SOURCE_DIR + "/tests/unit/numpy_random_reference.py";
  int status = -1;
  std::vector<std::string> lines = trident::testing::stdout_lines(cmd, &status);
  EXPECT_EQ(status, 0) << cmd << " failed";
  return lines;
}

template <class T>
std::string join(const std::string& tag, const std::vector<T>& v) {
  std::string s = tag + ":";
  for (const T& x : v) s += " " + std::to_string(x);
  return s;
}

std::vector<uint32_t> raw(td::NumpyRandomState rs) {
  std::vector<uint32_t> v(1300);
  for (auto& x : v) x = rs.next_uint32();
  return v;
}

// The line numpy_random_reference.py prints for `tag`, computed here.
std::string compute(const std::string& tag) {
  std::istringstream in(tag);
  std::string kind;
  in >> kind;
  if (kind == "raw") {
    uint64_t seed;
    in >> seed;
    return join(tag, raw(td::NumpyRandomState(static_cast<uint32_t>(seed))));
  }
  if (kind == "rawkey") {
    std::string keys;
    in >> keys;
    std::vector<uint32_t> key;
    std::istringstream k(keys);
    for (std::string part; std::getline(k, part, ',');) key.push_back(static_cast<uint32_t>(std::stoul(part)));
    return join(tag, raw(td::NumpyRandomState(key)));
  }
  if (kind == "randint") {
    uint64_t seed;
    int64_t lo, hi;
    in >> seed >> lo >> hi;
    td::NumpyRandomState rs(static_cast<uint32_t>(seed));
    std::vector<int64_t> v(40);
    for (auto& x : v) x = rs.randint(lo, hi);
    return join(tag, v);
  }
  if (kind == "shuffle") {
    uint64_t seed;
    int64_t n;
    in >> seed >> n;
    td::NumpyRandomState rs(static_cast<uint32_t>(seed));
    std::vector<int64_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n / 2 + 1));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int64_t>(i);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int64_t>(i);
    rs.shuffle(a);
    rs.shuffle(b);
    a.insert(a.end(), b.begin(), b.end());
    return join(tag, a);
  }
  return "unknown case " + tag;
}

}  // namespace

TEST(NumpyRandomState, EqualsNumpyDrawForDraw) {
  const std::vector<std::string> lines = numpy_lines();
  ASSERT_GT(lines.size(), 50u) << "the numpy reference printed " << lines.size() << " lines";
  for (const std::string& line : lines) {
    const std::string tag = line.substr(0, line.find(':'));
    const std::string mine = compute(tag);
    // Long lines: report the first differing word, not the whole line.
    if (mine != line) {
      std::istringstream a(line), b(mine);
      std::string wa, wb;
      size_t at = 0;
      while (a >> wa && b >> wb && wa == wb) ++at;
      ADD_FAILURE() << tag << ": word " << at << " is " << wb << " here, numpy has " << wa;
    }
  }
}

TEST(NumpyRandomState, BadArgumentsAreErrors) {
  td::NumpyRandomState rs(1);
  EXPECT_THROW(rs.randint(3, 3), td::DataError);
  EXPECT_THROW(td::NumpyRandomState(std::vector<uint32_t>{}), td::DataError);
  std::vector<int> empty;
  rs.shuffle(empty);  // numpy shuffles an empty array without a draw
  EXPECT_EQ(rs.next_uint32(), td::NumpyRandomState(1).next_uint32());
}
