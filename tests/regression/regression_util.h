// Helpers shared by the regression drivers: run gpt-tiny under some layout in
// a fresh temp dir, read its per-step metrics, and compare them with the
// single-process reference (bit for bit, or to a relative tolerance).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "../run_helpers.h"

namespace trident::testing {

// The contract is stated over at least 20 steps; never run fewer.
constexpr int kRegressionSteps = 20;

// A bf16 run against the bf16 single process under TP or DP: relative
// tolerances on the loss and on the gradient norm (why these: the head of
// test_bf16_regression.cpp).
constexpr double kBf16LossTol = 1e-3, kBf16NormTol = 2e-2;

// A unique directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    std::string tmpl = (std::filesystem::temp_directory_path() / ("trident-" + tag + "-XXXXXX")).string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// One finished training run: what the processes printed and what rank 0 logged.
struct TrainRun {
  RunResult result;
  std::vector<StepRow> rows;
  std::string command;
  std::string dir;  // its logging.dir: metrics.jsonl, rank-R.json
};

// Trains `config` (gpt-tiny unless given) for `steps` (kRegressionSteps unless given) steps on `nproc` ranks
// (through `trident launch` when nproc > 1) with extra `--set` overrides,
// logging into `dir`. --master-port 0 lets runs of parallel ctest jobs coexist.
// `env`: variables set for the run ("NAME=value ...", e.g. a forced ATEN_CPU_CAPABILITY).
inline TrainRun train_tiny(const std::string& dir, int nproc, const std::vector<std::string>& sets,
                           const std::string& config = "configs/gpt-tiny.toml", int steps = kRegressionSteps,
                           const std::string& env = "") {
  std::ostringstream cmd;
  if (!env.empty()) cmd << "env " << env << " ";
  if (nproc > 1) cmd << bin("trident") << " launch --nproc-per-node " << nproc << " --master-port 0 -- ";
  cmd << bin("trident") << " train --config " << src(config)
      << " --set training.steps=" << steps << " --set logging.dir=" << dir
      << " --set logging.progress=false"
      // MFU is not under test: a given peak skips the start-up matmul timing.
      << " --set training.peak_tflops=1";
  for (const auto& s : sets) cmd << " --set '" << s << "'";
  // Every pipeline runs under NCCL's point-to-point rules (no tags, one
  // stream, a receive holding it: NOTE [NCCL rules on the CPU] in
  // parallel/nccl_rules.h), unless the run names its backend.
  const bool pipelined = std::any_of(sets.begin(), sets.end(), [](const std::string& s) {
    return s.rfind("parallel.pp=", 0) == 0 && s != "parallel.pp=1";
  });
  const bool backend_named = std::any_of(sets.begin(), sets.end(), [](const std::string& s) {
    return s.rfind("parallel.backend=", 0) == 0;
  });
  if (pipelined && !backend_named) cmd << " --set parallel.backend=nccl-rules";
  TrainRun run;
  run.dir = dir;
  run.command = cmd.str();
  run.result = run_command(run.command);
  run.rows = read_metrics(dir + "/metrics.jsonl");
  return run;
}

// Checks a run finished and logged every one of its `steps`, with its output in the message.
inline ::testing::AssertionResult completed(const TrainRun& run, int steps = kRegressionSteps) {
  if (run.result.status != 0)
    return ::testing::AssertionFailure() << "exit status " << run.result.status << " from\n  " << run.command
                                         << "\noutput:\n" << run.result.output;
  if (static_cast<int>(run.rows.size()) != steps)
    return ::testing::AssertionFailure() << run.rows.size() << " metrics rows, expected " << steps
                                         << " from\n  " << run.command;
  return ::testing::AssertionSuccess();
}

// Every step's `key` (loss, grad_norm) equal to the reference within a
// relative `rel_tol`; rel_tol = 0 demands the very same double. Names the
// first step that differs.
inline ::testing::AssertionResult steps_match(const std::vector<StepRow>& ref, const std::vector<StepRow>& got,
                                              const std::string& key, double rel_tol) {
  if (ref.size() != got.size())
    return ::testing::AssertionFailure() << got.size() << " steps vs " << ref.size() << " in the reference";
  for (size_t i = 0; i < ref.size(); ++i) {
    const auto r = ref[i].find(key), g = got[i].find(key);
    if (r == ref[i].end() || g == got[i].end())
      return ::testing::AssertionFailure() << "step " << i + 1 << " has no '" << key << "'";
    const double a = r->second, b = g->second;
    const bool ok = rel_tol == 0 ? a == b : std::fabs(a - b) <= rel_tol * std::fabs(a);
    if (!ok) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "first difference at step %zu: %s %.17g vs reference %.17g (rel %.3g)", i + 1,
                    key.c_str(), b, a, std::fabs(a - b) / std::fabs(a));
      return ::testing::AssertionFailure() << buf;
    }
  }
  return ::testing::AssertionSuccess();
}

// The largest relative difference of `key` over all steps (for the log: how
// much of a tolerance a run uses).
inline double max_rel_diff(const std::vector<StepRow>& ref, const std::vector<StepRow>& got, const std::string& key) {
  double worst = 0;
  for (size_t i = 0; i < std::min(ref.size(), got.size()); ++i) {
    const double a = ref[i].at(key), b = got[i].at(key);
    worst = std::max(worst, std::fabs(a - b) / std::fabs(a));
  }
  return worst;
}

// Loss and grad norm of every step against the reference.
inline ::testing::AssertionResult matches_reference(const std::vector<StepRow>& ref, const TrainRun& run,
                                                    double rel_tol) {
  if (auto c = completed(run); !c) return c;
  for (const char* key : {"loss", "grad_norm"})
    if (auto m = steps_match(ref, run.rows, key, rel_tol); !m) return m << "\n  in " << run.command;
  if (rel_tol > 0)
    std::cout << "max relative difference over " << ref.size() << " steps: loss "
              << max_rel_diff(ref, run.rows, "loss") << ", grad_norm " << max_rel_diff(ref, run.rows, "grad_norm")
              << std::endl;
  return ::testing::AssertionSuccess();
}

// NOTE [reference cache]
// ctest runs every test in a process of its own, so a static alone would
// retrain the reference once per test. The reference is a function of the
// executables (`trident` and `trident-torch`, which trains: the project's
// libraries are linked in statically), the config file and the overrides,
// so it is also cached in the build dir under a hash of them all: rebuilding
// either executable or editing gpt-tiny.toml changes the key. Runs that
// failed are never cached.
inline uint64_t fnv1a(uint64_t h, const std::string& bytes) {
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ULL;
  return h;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A run of `config` (gpt-tiny unless given) on `nproc` ranks with `sets`, from the cache or trained now.
// Its run directory (metrics.jsonl, output.txt) stays in the cache, so other
// tests and `trident compare` can read it.
struct CachedRun {
  TrainRun run;
  std::string dir;
};

inline CachedRun cached_run(int nproc, const std::vector<std::string>& sets,
                            const std::string& config = "configs/gpt-tiny.toml", const std::string& env = "") {
  uint64_t h = 14695981039346656037ULL;
  h = fnv1a(h, slurp(bin("trident")));
  h = fnv1a(h, slurp(bin("trident-torch")));
  h = fnv1a(h, slurp(src(config)));
  if (config != "configs/gpt-tiny.toml") h = fnv1a(h, config);
  for (const auto& s : sets) h = fnv1a(h, s + "\n");
  h = fnv1a(h, std::to_string(kRegressionSteps));
  if (nproc > 1) h = fnv1a(h, "nproc=" + std::to_string(nproc));
  if (!env.empty()) h = fnv1a(h, "env=" + env);
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(h));
  const std::filesystem::path root = std::filesystem::path(TRIDENT_BINARY_DIR) / "regression-cache";
  const std::filesystem::path entry = root / key;
  CachedRun out;
  out.dir = entry.string();
  if (std::filesystem::exists(entry / "output.txt")) {
    out.run.command = "(cached run " + entry.string() + ")";
    out.run.result.status = 0;
    out.run.result.output = slurp((entry / "output.txt").string());
    out.run.rows = read_metrics((entry / "metrics.jsonl").string());
    out.run.dir = out.dir;
    return out;
  }
  std::filesystem::create_directories(root);
  std::string tmp = (root / (std::string(key) + ".tmp-XXXXXX")).string();
  if (!mkdtemp(tmp.data())) throw std::runtime_error("mkdtemp failed for " + tmp);
  out.run = train_tiny(tmp, nproc, sets, config, kRegressionSteps, env);
  std::error_code ec;
  if (completed(out.run)) {
    std::ofstream(tmp + "/output.txt", std::ios::binary) << out.run.result.output;
    // Atomic publish; if a parallel test got there first, keep its entry.
    std::filesystem::rename(tmp, entry, ec);
  } else {
    out.dir = tmp + ".failed";
  }
  out.run.dir = out.dir;
  std::filesystem::remove_all(tmp, ec);
  return out;
}

// The single-process gpt-tiny run with `sets`, from the cache or trained now.
inline TrainRun cached_reference(const std::vector<std::string>& sets = {}) { return cached_run(1, sets).run; }

}  // namespace trident::testing
