// Test helpers for running the built binaries (trident, workers) as child
// processes and reading what a training run wrote. Header-only, no libtorch.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.h"

namespace trident::testing {

struct RunResult {
  int status = -1;  // exit status, or 128 + signal
  std::string output;  // stdout and stderr together
};

// Runs a shell command line, capturing stdout+stderr.
inline RunResult run_command(const std::string& cmd) {
  RunResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// Runs a shell command line and returns its standard output's lines (its
// standard error discarded: the caller parses the output); `status` gets the
// exit status, or 128 + signal.
inline std::vector<std::string> stdout_lines(const std::string& cmd, int* status) {
  std::vector<std::string> lines;
  *status = -1;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return lines;
  std::string out;
  std::array<char, 1 << 14> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

inline std::string bin(const std::string& name) { return std::string(TRIDENT_BINARY_DIR) + "/" + name; }
inline std::string src(const std::string& path) { return std::string(TRIDENT_SOURCE_DIR) + "/" + path; }
// A scratch path prefix of this process: the suite runs tests two at a time, each
// test in a process of its own, and two tests of one file writing the same fixed
// folder would read each other's files.
inline std::string temp_dir() { return ::testing::TempDir() + "p" + std::to_string(::getpid()) + "_"; }

// One step of metrics.jsonl: the numeric fields by name (a tiny reader for
// the flat objects RunLog writes).
using StepRow = std::map<std::string, double>;

inline std::vector<StepRow> read_metrics(const std::string& path) {
  std::vector<StepRow> rows;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    StepRow row;
    size_t i = 0;
    while ((i = line.find('"', i)) != std::string::npos) {
      const size_t j = line.find('"', i + 1);
      const std::string key = line.substr(i + 1, j - i - 1);
      size_t k = j + 2;  // after ":
      size_t e = line.find_first_of(",}", k);
      const std::string val = line.substr(k, e - k);
      row[key] = val == "null" ? NAN : std::stod(val);
      i = e;
    }
    rows.push_back(row);
  }
  return rows;
}

// Every rank's logging.dir/rank-R.json of a finished `trident train` run
// (NOTE [rank summary] in framework/recorder.cpp), in rank order; stops
// at the first rank without one.
inline std::vector<json::Value> rank_summaries(const std::string& dir) {
  std::vector<json::Value> out;
  for (int r = 0;; ++r) {
    const std::string path = dir + "/rank-" + std::to_string(r) + ".json";
    std::ifstream f(path, std::ios::binary);
    if (!f) return out;
    out.push_back(json::parse({std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()}, path));
  }
}

// An integer field of a rank summary.
inline int64_t field(const json::Value& summary, const std::string& key) {
  return json::as_int(json::at(summary, key, "rank summary"), key);
}

}  // namespace trident::testing
