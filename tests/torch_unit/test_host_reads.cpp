// NOTE [host reads] (framework/host_read.h): a training step reads device
// tensors on the host only where named. A 2-stage pipeline trains 4 steps,
// every second one logged; each rank's summary says how often each kind of
// read happened in one step: a non-logged step reads the gradient norm once
// (clipping and the non-finite guard need it) and nothing else; a logged step
// adds the reduced loss once.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <string>

#include "../run_helpers.h"

namespace trident::testing {
namespace {

std::map<std::string, int64_t> reads_of(const json::Value& summary, const std::string& kind) {
  std::map<std::string, int64_t> out;
  for (const auto& [what, n] : summary.at("host_reads", "rank summary").at(kind, "host_reads").as_object(kind))
    out[what] = n.as_int(what);
  return out;
}

TEST(HostReads, OneNamedReadPerStepAndTheLossOnLoggedSteps) {
  char tmpl[] = "/tmp/trident-host-reads-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const RunResult r = run_command(bin("trident") + " launch --nproc-per-node 2 --master-port 0 -- " + bin("trident") +
                                  " train --config " + src("configs/gpt-tiny.toml") +
                                  " --set parallel.pp=2 --set parallel.backend=nccl-rules --set training.steps=4"
                                  " --set logging.log_interval=2 --set training.eval_interval=0"
                                  " --set training.peak_tflops=1 --set logging.dir=" + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto summaries = rank_summaries(dir);
  ASSERT_EQ(summaries.size(), 2u);
  const std::map<std::string, int64_t> norm_only{{"gradient norm", 1}};
  const std::map<std::string, int64_t> norm_and_loss{{"gradient norm", 1}, {"loss", 1}};
  for (const json::Value& s : summaries) {
    EXPECT_EQ(reads_of(s, "other_step"), norm_only) << json::dump(s, 2);
    EXPECT_EQ(reads_of(s, "logged_step"), norm_and_loss) << json::dump(s, 2);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trident::testing
