// `trident plan profile` end to end through the built `trident`: a short
// profile of gpt-tiny is a file the planner's parser reads back, with the
// model's shape and positive costs, and `trident plan --profile` predicts a
// one-device step from it as the profile's own figures add up; another
// model's config is refused naming the difference; bad options name the
// option.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "planner/profile.h"
#include "tests/run_helpers.h"

namespace trident::testing {
namespace {

double json_number(const std::string& text, const std::string& key) {
  const size_t at = text.find("\"" + key + "\": ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + key.size() + 4));
}

TEST(PlanProfile, WritesAProfileThePlannerPredictsWith) {
  const std::string out = bin("test_plan_profile.toml");
  std::filesystem::remove(out);
  const std::string cfg = src("configs/gpt-tiny.toml");
  const RunResult r =
      run_command(bin("trident") + " plan profile --config " + cfg + " --mbs 2 --steps 4 --microbatches 2 --repeats 1 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + out), std::string::npos) << r.output;
  const plan::Profile p = plan::load_profile(out);
  EXPECT_EQ(p.arch, "gpt");
  EXPECT_EQ(p.layers, 8);
  EXPECT_EQ(p.hidden, 64);
  EXPECT_EQ(p.precision, "fp32");
  ASSERT_EQ(p.micro_batches(), std::vector<int>{2});
  const plan::MicroBatchProfile& m = p.at(2);
  EXPECT_GT(m.layer_forward_ms, 0.0);
  EXPECT_GT(m.layer_backward_ms[0], 0.0);
  EXPECT_GT(m.layer_backward_ms[2], 0.0);
  EXPECT_GT(m.weight_share, 0.0);
  EXPECT_LT(m.weight_share, 1.0);
  // The pieces add up to the whole: the layers hold most of it (8 of them) and the embedding the least.
  EXPECT_GT(8 * m.layer_forward_ms, m.head_forward_ms);
  EXPECT_LT(m.embedding_forward_ms, m.layer_forward_ms);

  // One device, 1f1b: 8 micro-batches (global batch 16 / 2) of the whole model's F and B, and the overhead.
  const std::string cluster = src("configs/clusters/dgx-a100.toml");
  const RunResult plan = run_command(bin("trident") + " plan --config " + cfg + " --cluster " + cluster +
                                     " --profile " + out + " --gpus 1 --layout mbs=2 --format json");
  ASSERT_EQ(plan.status, 0) << plan.output;
  const double expected = 1e-3 * (8 * (m.forward_ms(8) + m.backward_ms(0, 8)) + m.step_overhead_ms);
  EXPECT_NEAR(json_number(plan.output, "step_s"), expected, 1e-6 * expected) << plan.output;
  // A micro-batch size it has not measured, and another model, are refused naming what differs.
  RunResult bad = run_command(bin("trident") + " plan --config " + cfg + " --cluster " + cluster + " --profile " + out +
                              " --gpus 1 --layout mbs=4");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("has no micro-batch size 4 (it has 2)"), std::string::npos) << bad.output;
  bad = run_command(bin("trident") + " plan --config " + cfg + " --set model.hidden=128 --cluster " + cluster +
                    " --profile " + out + " --gpus 1 --layout mbs=2");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("measured on another model: hidden 64 there, 128 here"), std::string::npos) << bad.output;
}

TEST(PlanProfile, BadOptionsNameTheOption) {
  const std::string out = bin("test_plan_profile_bad.toml");
  const std::string cfg = src("configs/gpt-tiny.toml");
  RunResult r = run_command(bin("trident") + " plan profile --config " + cfg + " --out " + out + " --mbs 2,0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--mbs '2,0': '0' is not an integer >= 1"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " plan profile --config " + cfg + " --out " + out + " --mbs 2,2");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("2 given twice"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " plan profile --config " + cfg + " --out " + out + " --steps 2");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--steps 2: expected >= 3"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " plan profile --config " + cfg + " --out " + out + " --repeats 0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--repeats 0: expected >= 1"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " plan profile --config " + cfg);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--out is required"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " plan profile --config " + cfg + " --out /proc/x.toml");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("cannot write it"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " plan --config " + cfg + " --cluster " + src("configs/clusters/dgx-a100.toml") +
                  " --profile /nonexistent.toml --gpus 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("profile file '/nonexistent.toml': cannot open it"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace trident::testing
