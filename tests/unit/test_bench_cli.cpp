// `trident bench throughput` end to end through the built binary: p is capped
// at the usable cores unless --max-ranks asks for more (a message per skipped
// p, an error for a bad value or when nothing is left), and a p = 1 run's MFU
// is a fraction of the peak (the peak is one thread's best matmul timing, so
// a slow start-up timing cannot push MFU past 1); an MoE config's rows add
// its expert balance.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/run_helpers.h"

namespace trident::testing {
namespace {

namespace fs = std::filesystem;

bool have_torch_build() { return fs::exists(bin("trident-torch")); }

std::string bench(const std::string& args, const std::string& out) {
  fs::remove_all(out);
  return "cd " + src("") + " && " + bin("trident") + " bench throughput --config " + src("configs/gpt-tiny.toml") +
         " --set model.layers=2 --set model.seq_len=16 --set model.hidden=64 --set model.heads=4" +
         " --schedules 1f1b --microbatches 2 --steps 2 --out " + out + " " + args;
}

TEST(BenchCli, ThroughputRejectsABadMaxRanks) {
  if (!have_torch_build()) GTEST_SKIP() << "no trident-torch in " << TRIDENT_BINARY_DIR;
  for (const char* bad : {"0", "-3"}) {
    const RunResult r = run_command(bench(std::string("--stages 1 --max-ranks=") + bad, bin("test_bench_bad")));
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("--max-ranks must be at least 1, got " + std::string(bad)), std::string::npos) << r.output;
  }
  const RunResult r = run_command(bench("--stages 4096", bin("test_bench_none")));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("every --stages value exceeds --max-ranks"), std::string::npos) << r.output;
}

TEST(BenchCli, ThroughputCapsRanksAtTheCoresAndKeepsMfuAFraction) {
  if (!have_torch_build()) GTEST_SKIP() << "no trident-torch in " << TRIDENT_BINARY_DIR;
  const std::string out = bin("test_bench_cap");
  const RunResult r = run_command(bench("--stages 1,4096", out));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("p = 4096 skipped: more ranks than --max-ranks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pass --max-ranks 4096 to run it anyway (contention-bound)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("contention-bound"), std::string::npos) << r.output;
  std::ifstream csv(out + "/throughput.csv");
  std::string header, row, extra;
  ASSERT_TRUE(std::getline(csv, header));
  ASSERT_TRUE(std::getline(csv, row)) << "no case ran";
  EXPECT_FALSE(std::getline(csv, extra)) << "p = 4096 was not capped: " << extra;
  EXPECT_EQ(header.rfind("schedule,p,m,v,tokens_per_s,mfu,", 0), 0u) << header;
  EXPECT_EQ(header.find("moe_"), std::string::npos) << header;  // a dense model's sweep
  std::stringstream cells(row);
  std::string schedule, p, m, v, tok, mfu;
  for (std::string* cell : {&schedule, &p, &m, &v, &tok, &mfu}) std::getline(cells, *cell, ',');
  EXPECT_EQ(p, "1") << row;
  const double f = std::stod(mfu);
  EXPECT_GT(f, 0) << row;
  EXPECT_LE(f, 1) << row;
}

// NOTE [MoE stats]: an MoE config's rows carry the run's expert balance (the load, the dropped
// share past capacity, the correction bias's range); a dense config's CSV has no such columns.
TEST(BenchCli, ThroughputOfAnMoeConfigReportsTheExpertBalance) {
  if (!have_torch_build()) GTEST_SKIP() << "no trident-torch in " << TRIDENT_BINARY_DIR;
  const std::string out = bin("test_bench_moe");
  fs::remove_all(out);
  const RunResult r = run_command("cd " + src("") + " && " + bin("trident") + " bench throughput --config " +
                                  src("configs/deepseek-v3-tiny.toml") +
                                  " --set model.moe_capacity_factor=1.0 --schedules 1f1b --stages 1 --microbatches 2"
                                  " --steps 3 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* said : {"moe-load ", "dropped ", "bias-range "})
    EXPECT_NE(r.output.find(said), std::string::npos) << said << "\n" << r.output;
  std::ifstream csv(out + "/throughput.csv");
  std::string header, row;
  ASSERT_TRUE(std::getline(csv, header));
  ASSERT_TRUE(std::getline(csv, row));
  const std::string moe = ",moe_load_max,moe_dropped_max,moe_bias_range_max";
  ASSERT_EQ(header.substr(header.size() - moe.size()), moe) << header;
  std::vector<std::string> cells;
  std::stringstream in(row);
  for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
  ASSERT_GE(cells.size(), 3u) << row;
  const double load = std::stod(cells[cells.size() - 3]), dropped = std::stod(cells[cells.size() - 2]),
               range = std::stod(cells.back());
  EXPECT_GE(load, 1.0) << row;  // the busiest expert over the mean
  EXPECT_GT(dropped, 0.0) << row;
  EXPECT_LT(dropped, 1.0) << row;
  EXPECT_GT(range, 0.0) << row;  // the bias moved on the steps before the median's
}

}  // namespace
}  // namespace trident::testing
