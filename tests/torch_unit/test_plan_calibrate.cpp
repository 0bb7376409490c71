// `trident plan calibrate` end to end through the built `trident`: a short
// calibration writes a cluster file that the planner's own parser reads back
// with positive, physically possible figures, that `trident plan` plans
// with, and whose header names the command that wrote it; bad options fail
// naming the option.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "planner/cluster.h"
#include "tests/run_helpers.h"

namespace trident::testing {
namespace {

TEST(PlanCalibrate, WritesAClusterFileThePlannerReads) {
  const std::string out = bin("test_plan_calibrate.toml");
  std::filesystem::remove(out);
  const std::string cmd = bin("trident") + " plan calibrate --out " + out + " --repeats 3 --max-size-mib 4 --devices 4";
  const RunResult r = run_command(cmd);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + out), std::string::npos) << r.output;

  const plan::Cluster c = plan::load_cluster(out);
  EXPECT_EQ(c.name, "local");
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.devices_per_node, 4);
  // One CPU thread: between 0.1 GFLOP/s and 10 TFLOP/s; memory and loopback links well inside what hardware does.
  EXPECT_GT(c.peak_tflops_fp32, 1e-4);
  EXPECT_LT(c.peak_tflops_fp32, 10.0);
  EXPECT_EQ(c.peak_tflops_bf16, 0.0);
  EXPECT_EQ(c.gemm_efficiency, 1.0);
  EXPECT_GT(c.memory_bandwidth_gbs, 0.1);
  EXPECT_LT(c.memory_bandwidth_gbs, 5000.0);
  EXPECT_GT(c.intra_bandwidth_gbs, 1e-3);
  EXPECT_LT(c.intra_bandwidth_gbs, 1000.0);
  EXPECT_GE(c.intra_latency_us, 0.0);
  EXPECT_LT(c.intra_latency_us, 1e5);
  EXPECT_GE(c.intra_collective_us, 0.0);
  EXPECT_LT(c.intra_collective_us, 1e6);
  EXPECT_GT(c.intra_pipeline_latency_us, 0.0);  // a transfer between computing ranks takes some time
  EXPECT_LT(c.intra_pipeline_latency_us, 1e6);
  EXPECT_GT(c.compute_slots_per_node, 0.0);  // the cores over the slowdown of all computing at once
  EXPECT_LE(c.compute_slots_per_node, static_cast<double>(std::thread::hardware_concurrency()) + 1e-9);
  EXPECT_GT(c.action_overhead_us, 0.1);
  EXPECT_LT(c.action_overhead_us, 1e5);
  EXPECT_GT(c.device_memory_gib, 0.0);

  std::ifstream f(out);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_NE(text.str().find("# This machine, measured by `trident plan calibrate --out " + out), std::string::npos)
      << text.str();
  for (const char* kind : {"all_reduce", "all_gather", "p2p"})
    EXPECT_NE(text.str().find(std::string("#   ") + kind), std::string::npos) << kind;
  for (const char* said : {"# pipeline_latency_us: ", "# latency_us and collective_us written: ", "# compute_slots_per_node: "})
    EXPECT_NE(text.str().find(said), std::string::npos) << said;

  const RunResult p = run_command(bin("trident") + " plan --config " + src("configs/gpt-tiny.toml") + " --cluster " +
                                  out + " --gpus 2 --layout pp=2,mbs=2 --format json");
  ASSERT_EQ(p.status, 0) << p.output;
  EXPECT_NE(p.output.find("\"step_s\": "), std::string::npos) << p.output;
}

TEST(PlanCalibrate, BadOptionsNameTheOption) {
  const std::string out = bin("test_plan_calibrate_bad.toml");
  RunResult r = run_command(bin("trident") + " plan calibrate --out " + out + " --ranks 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--ranks 1: expected >= 2"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " plan calibrate --out " + out + " --max-size-mib 0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--max-size-mib 0: expected (0, 1024]"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " plan calibrate");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--out is required"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " plan calibrate --out /proc/x.toml");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("cannot write it"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace trident::testing
