// `trident plan calibrate` end to end through the built `trident`: a short
// calibration writes a cluster file that the planner's own parser reads back
// with positive, physically possible figures, that `trident plan` plans
// with, that predicts an all-reduce timed here independently within 2x, and
// whose header names the command that wrote it; bad options fail naming the
// option.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <ATen/ATen.h>

#include "parallel/thread_group.h"
#include "planner/cluster.h"
#include "tests/run_helpers.h"

namespace trident::testing {
namespace {

// A `bytes` all-reduce between 2 rank processes that each run a 192^3 matmul
// before every call, as a tensor-parallel layer does: per round, 20 pairs of
// matmul and all-reduce and 20 matmuls alone, the difference per call; the
// median of 7 rounds on rank 0's clock, in us.
double busy_all_reduce_us(int64_t bytes) {
  const std::vector<std::string> out = run_process_group("timed", 2, std::chrono::milliseconds(120000), [&](Group& g) {
    const at::Tensor a = at::randn({192, 192}), b = at::randn({192, 192});
    at::Tensor sink = at::zeros({192, 192}), t = at::ones({bytes / 4});
    auto run = [&](bool reduce) {
      barrier(g);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 20; ++i) {
        sink.add_(at::mm(a, b));
        if (reduce) all_reduce(g, t);
      }
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 20;
    };
    std::vector<double> per_call;
    for (int round = -1; round < 7; ++round) {
      const double alone = run(false), with = run(true);
      if (round >= 0) per_call.push_back(with - alone);
    }
    std::sort(per_call.begin(), per_call.end());
    return std::to_string(per_call[per_call.size() / 2]);
  });
  return std::stod(out.at(0));
}

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

  // The file predicts a collective it was not measured on: a 2 MiB all-reduce between 2 ranks that
  // compute between calls, timed here by other code (below; the calibration times 16 KiB and 4 MiB
  // ones). A ring of 2 moves the message once over the link in 2 steps, plus one call:
  // bytes / bandwidth + 2 x latency_us + collective_us.
  const double bytes = 2 << 20;
  const double predicted_us = bytes / (c.intra_bandwidth_gbs * 1e9) * 1e6 + 2 * c.intra_latency_us + c.intra_collective_us;
  // On a machine shared with other work a burst of load can land on the timing alone (seen once in 8
  // runs on 2 cores at load 9): up to 3 timings, the first within 2x passes. A gross bound only: the
  // calibrated figures themselves swing by 2-5x with the load.
  double timed_us = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    timed_us = busy_all_reduce_us(static_cast<int64_t>(bytes));
    std::printf("2 MiB all-reduce between 2 computing ranks: timed %.0f us, the cluster file predicts %.0f us\n",
                timed_us, predicted_us);
    if (predicted_us < 2 * timed_us && predicted_us > timed_us / 2) break;
  }
  EXPECT_LT(predicted_us, 2 * timed_us);
  EXPECT_GT(predicted_us, timed_us / 2);

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
