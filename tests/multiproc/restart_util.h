// Helpers for the restart tests (test_restarts.cpp): a wall-clock bound that
// fails naming the test, and the comparison of two runs' final checkpoints.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../regression/regression_util.h"

namespace trident::testing {

// Runs `cmd` under coreutils' timeout: past `seconds` it is killed, and the
// failure names `what` (the test) and the bound instead of hanging ctest.
inline RunResult run_bounded(const std::string& what, int seconds, const std::string& cmd) {
  RunResult r = run_command("timeout --signal=TERM --kill-after=10 " + std::to_string(seconds) + " " + cmd);
  if (r.status == 124 || r.status == 137)
    ADD_FAILURE() << what << ": exceeded its wall-clock bound of " << seconds << " s (killed):\n  " << cmd
                  << "\noutput:\n" << r.output;
  return r;
}

// Whether two checkpoints of the same layout hold bit-identical training
// state: every rank's tensor entries (parameters and AdamW's moments: NOTE
// [training checkpoint contents]) with the same index records and the same
// bytes, and the same AdamW step count. The rng.cpu blob is left out: libtorch
// seeds the default CPU generator anew in every process and nothing in these
// runs draws from it (no dropout), so two uninterrupted runs differ there too.
// Names the first tensor that differs.
inline ::testing::AssertionResult same_checkpoint(const std::string& a, const std::string& b, int world) {
  for (int r = 0; r < world; ++r) {
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05d", r);
    const std::string ja = slurp(a + "/" + name + ".json"), jb = slurp(b + "/" + name + ".json");
    if (ja.empty() || jb.empty())
      return ::testing::AssertionFailure() << "missing " << name << ".json in " << (ja.empty() ? a : b);
    const std::string ba = slurp(a + "/" + name + ".bin"), bb = slurp(b + "/" + name + ".bin");
    const json::Value ia = json::parse(ja, a), ib = json::parse(jb, b);
    const auto& ea = json::as_array(json::at(ia, "entries", a), "entries");
    const auto& eb = json::as_array(json::at(ib, "entries", b), "entries");
    if (ea.size() != eb.size() || ea.empty())
      return ::testing::AssertionFailure() << name << ": " << ea.size() << " vs " << eb.size() << " entries";
    for (size_t i = 0; i < ea.size(); ++i) {
      const std::string what = json::as_string(json::at(ea[i], "name", a), "name");
      if (json::dump(ea[i]) != json::dump(eb[i]))
        return ::testing::AssertionFailure() << name << ": entry " << what << " differs: " << json::dump(ea[i])
                                             << " vs " << json::dump(eb[i]);
      const auto off = static_cast<size_t>(json::as_int(json::at(ea[i], "byte_offset", a), "byte_offset"));
      const auto n = static_cast<size_t>(json::as_int(json::at(ea[i], "nbytes", a), "nbytes"));
      if (off + n > ba.size() || off + n > bb.size() || ba.compare(off, n, bb, off, n) != 0)
        return ::testing::AssertionFailure() << name << ": the bytes of " << what << " differ";
    }
    const std::string xa = json::dump(json::at(json::at(ia, "meta", a), "extra", a));
    const std::string xb = json::dump(json::at(json::at(ib, "meta", b), "extra", b));
    if (xa != xb) return ::testing::AssertionFailure() << name << ": meta.extra " << xa << " vs " << xb;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace trident::testing
