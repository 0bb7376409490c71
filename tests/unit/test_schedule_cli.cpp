// `trident schedule` end to end: every format parses to the expected shape,
// bad arguments fail with a message. Runs the built binary.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "schedules/action.h"
#include "tests/run_helpers.h"

namespace {

struct Result {
  int status;
  std::string out;  // stdout and stderr together
};

Result run_schedule(const std::string& args) {
  const trident::testing::RunResult r = trident::testing::run_command(trident::testing::bin("trident") + " schedule " + args);
  return {r.status, r.output};
}

}  // namespace

TEST(ScheduleCli, FormatsHaveTheirShape) {
  Result r = run_schedule("--kind 1f1b --stages 4 --microbatches 8 --format json");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* key : {"\"bubble_fraction\": 0.2727272727", "\"step_time\": 33", "\"peak_inflight\": [4, 3, 2, 1]",
                          "\"timelines\""})
    EXPECT_NE(r.out.find(key), std::string::npos) << key << "\n" << r.out.substr(0, 300);

  r = run_schedule("--kind interleaved -p 2 -m 4 -v 2 --format svg --costs 1,2,1 --latency 0.1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.rfind("<svg", 0), 0u) << r.out.substr(0, 200);

  r = run_schedule("--kind zb-h1 -p 3 -m 6 --format chrome");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(r.out.find("\"ph\": \"X\""), std::string::npos);

  r = run_schedule("--kind zb-v -p 2 -m 4 -v 2 --format json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("{\"action\": \"I0.1\""), std::string::npos) << r.out.substr(0, 300);
  r = run_schedule("--kind dualpipev -p 2 -m 4 -v 2 --format chrome");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"name\": \"F3\", \"cat\": \"forward\""), std::string::npos);

  r = run_schedule("--kind gpipe -p 2 -m 3");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.rfind("gpipe p=2 m=3 v=1: step 12, bubble 25.00%", 0), 0u) << r.out;
}

TEST(ScheduleCli, ScheduleFormatRoundTripsThroughFile) {
  const std::string path = std::string(TRIDENT_BINARY_DIR) + "/test_schedule_cli.txt";
  Result r = run_schedule("--kind interleaved -p 2 -m 4 -v 3 --format schedule --output " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const auto s = trident::sched::parse_text(text.str());
  EXPECT_EQ(s.chunks, 3);
  r = run_schedule("--kind file --file " + path + " --format schedule");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, text.str());
  std::remove(path.c_str());
}

TEST(ScheduleCli, BadArgumentsFailWithAMessage) {
  Result r = run_schedule("--kind interleaved -p 4 -m 3 -v 2");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("(m >= p)"), std::string::npos) << r.out;
  r = run_schedule("--kind zb-v -p 4 -m 8");  // no --chunks: the 2 the kind needs
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.rfind("zb-v p=4 m=8 v=2:", 0), 0u) << r.out;
  r = run_schedule("--kind zb-v -p 4 -m 8 --chunks 3");  // an explicit other value is named
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("kind 'zb-v' with p=4 m=8 v=3: this kind runs two chunks per rank in a V, expected v=2"),
            std::string::npos) << r.out;
  r = run_schedule("--kind dualpipev -p 2 -m 4 -v 1");
  EXPECT_NE(r.out.find("v=1: this kind runs two chunks per rank in a V, expected v=2"), std::string::npos) << r.out;
  // NOTE [overlapped pairs]: what has none to pair, or writes its own.
  r = run_schedule("--kind gpipe -p 2 -m 4 --overlap-moe");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--overlap-moe: --kind gpipe at p=2 m=4 has no backward followed by a forward"),
            std::string::npos) << r.out;
  r = run_schedule("--overlap-moe --kind file --file /dev/null");
  EXPECT_NE(r.out.find("--overlap-moe with --kind file: a file writes its pairs itself"), std::string::npos) << r.out;
  r = run_schedule("--kind 1f1b -p 2 -m 4 --overlap-moe --expert-comm 1.5");  // more than F
  EXPECT_NE(r.out.find("expected 0 <= expert_comm <= F and <= I"), std::string::npos) << r.out;
  r = run_schedule("--kind 1f1b -p 2 -m 2 --stage-costs 1,2,3");
  EXPECT_NE(r.out.find("expected one per virtual stage, p*v=2"), std::string::npos) << r.out;
  r = run_schedule("--kind 1f1b -p 2 -m 2 --format json --compute-only");
  EXPECT_NE(r.out.find("--compute-only applies to --format schedule or csv"), std::string::npos) << r.out;
  r = run_schedule("--from-csv /nonexistent/schedule.csv");
  EXPECT_NE(r.out.find("--from-csv '/nonexistent/schedule.csv': cannot open"), std::string::npos) << r.out;
  r = run_schedule("--kind 1f1b -p 2 -m 2 --from-csv x.csv");
  EXPECT_NE(r.out.find("--from-csv needs --kind file"), std::string::npos) << r.out;
  r = run_schedule("--kind nope -p 2 -m 2");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("unknown schedule kind 'nope'"), std::string::npos) << r.out;
  r = run_schedule("--kind 1f1b -p 2");
  EXPECT_NE(r.out.find("needs --stages and --microbatches"), std::string::npos) << r.out;
  r = run_schedule("-p 2 -m 2 --format png");
  EXPECT_NE(r.out.find("--format 'png'"), std::string::npos) << r.out;
  r = run_schedule("-p 2 -m 2 --costs 1,2");
  EXPECT_NE(r.out.find("expected F,B,W"), std::string::npos) << r.out;
  r = run_schedule("--kind file --file /nonexistent/schedule.txt");
  EXPECT_NE(r.out.find("cannot open"), std::string::npos) << r.out;
  r = run_schedule("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--microbatches"), std::string::npos);
}

// NOTE [overlapped pairs]: the list a run with schedule.overlap_moe executes, and the
// simulator's step for it (the figures of OverlapPairs' ZB-H1 case).
TEST(ScheduleCli, OverlapMoePairsTheListAndPricesThePairs) {
  Result r = run_schedule("--kind zb-h1 -p 4 -m 16 --expert-comm 0.5 --overlap-moe --format summary");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"step_time\": 39, "), std::string::npos) << r.out;
  r = run_schedule("--kind zb-h1 -p 4 -m 16 --expert-comm 0.5 --format summary");
  EXPECT_NE(r.out.find("\"step_time\": 51, "), std::string::npos) << r.out;
  r = run_schedule("--kind 1f1b -p 2 -m 4 --overlap-moe --format schedule");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(" F2+SF2+B0 "), std::string::npos) << r.out;  // rank 0: F2 moved up to B0, its send between
  EXPECT_NE(r.out.find(" F1+B0 "), std::string::npos) << r.out;      // rank 1 sends nothing forward
  r = run_schedule("--kind 1f1b -p 2 -m 4 --overlap-moe --format schedule --compute-only");
  EXPECT_NE(r.out.find("0: F0 F1 F2+B0 F3+B1 B2 B3 RD"), std::string::npos) << r.out;
}

TEST(ScheduleCli, SummaryIsOneObjectWithTheFigures) {
  Result r = run_schedule("--kind 1f1b -p 4 -m 8 --format summary");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out,
            "{\"title\": \"1f1b\", \"pipeline_ranks\": 4, \"microbatches\": 8, \"chunks\": 1, \"placement\": \"loop\", "
            "\"step_time\": 33, \"bubble_fraction\": 0.2727272727, \"span_bubble_fraction\": 0.2727272727, "
            "\"peak_inflight\": 4, \"grouped_step_time\": 33}\n");
  // The list a run executes under the executor's groups (NOTE [group waits]): interleaved at
  // p = 2 once its sends are placed takes the simulator's step at the same costs
  // (16 x 2 chunks x (0.5 + 1) = 48 busy, 1.5 of warm-up and cool-down) ...
  r = run_schedule("--kind interleaved -p 2 -m 16 -v 2 --format summary");
  EXPECT_NE(r.out.find("\"step_time\": 49.5, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"grouped_step_time\": 49.5}"), std::string::npos) << r.out;
  // ... and a link latency reaches both: 1F1B at p = 2, m = 1 with latency 0.5: F, F, B, B
  // each 1, 1, 2, 2 plus two crossings = 7 (each group waits for its message's crossing).
  r = run_schedule("--kind 1f1b -p 2 -m 1 --latency 0.5 --format summary");
  EXPECT_NE(r.out.find("\"step_time\": 7, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"grouped_step_time\": 7}"), std::string::npos) << r.out;
  // ZB-H2 at F = I = W: the paper's parallelogram, no idle between a rank's first and last
  // action (span_bubble_fraction 0), while ranks still start r forwards late (bubble_fraction
  // (p-1)/(3m+p-1) = 3/27); rank 0 holds 2p-1 micro-batches.
  // zb-auto with the limit 2p: ZB-H2's parallelogram or better, within 2p micro-batches.
  r = run_schedule("--kind zb-auto -p 4 -m 8 --memory-limit 8 --format summary");
  EXPECT_NE(r.out.find("\"span_bubble_fraction\": 0, "), std::string::npos) << r.out;
  r = run_schedule("--kind zb-auto -p 4 -m 8 --format summary");
  EXPECT_NE(r.out.find("--kind zb-auto needs --memory-limit N"), std::string::npos) << r.out;
  r = run_schedule("--kind zb-h1 -p 4 -m 8 --memory-limit 8");
  EXPECT_NE(r.out.find("--memory-limit applies to --kind zb-auto only, got --kind zb-h1"), std::string::npos) << r.out;
  r = run_schedule("--kind zb-auto -p 4 -m 8 --memory-limit 4 --objective step --format summary");
  EXPECT_NE(r.out.find("\"peak_inflight\": 4"), std::string::npos) << r.out;
  r = run_schedule("--kind zb-auto -p 4 -m 8 --memory-limit 4 --objective fast");
  EXPECT_NE(r.out.find("--objective 'fast': expected span"), std::string::npos) << r.out;
  r = run_schedule("--kind zb-h1 -p 4 -m 8 --objective step");
  EXPECT_NE(r.out.find("--objective applies to --kind zb-auto only, got --kind zb-h1"), std::string::npos) << r.out;
  r = run_schedule("--kind zb-auto -p 4 -m 8 --memory-limit 0");
  EXPECT_NE(r.out.find("memory limit 0, expected >= 1"), std::string::npos) << r.out;
  r = run_schedule("--kind zb-h2 -p 4 -m 8 --format summary");
  EXPECT_NE(r.out.find("\"step_time\": 27, \"bubble_fraction\": 0.1111111111, \"span_bubble_fraction\": 0, "
                       "\"peak_inflight\": 7, "),
            std::string::npos) << r.out;
  r = run_schedule("--kind zb-v -p 4 -m 8 -v 2 --format summary");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"placement\": \"v\", \"step_time\": 25.5"), std::string::npos) << r.out;
  // Imbalanced stages reach the simulator.
  r = run_schedule("--kind 1f1b -p 2 -m 1 --stage-costs 1,3 --format summary");
  EXPECT_NE(r.out.find("\"step_time\": 12"), std::string::npos) << r.out;  // (1+3) * (F+B)
  const std::string dualpipev = run_schedule("--kind dualpipev -p 2 -m 4 --format summary").out;
  EXPECT_NE(dualpipev.find("\"chunks\": 2, \"placement\": \"v\", \"step_time\": 12.5,"), std::string::npos) << dualpipev;
}

TEST(ScheduleCli, PyTorchCsvInAndOut) {
  const std::string artifact = std::string(TRIDENT_SOURCE_DIR) + "/tests/data/pytorch_pipelining/dualpipev_4rank_10mb.csv";
  Result r = run_schedule("--from-csv " + artifact + " --format csv --compute-only");
  ASSERT_EQ(r.status, 0) << r.out;
  // Read with each overlapped pair as its two actions and REDUCE_GRAD added: the generator's order.
  EXPECT_EQ(r.out, run_schedule("--kind dualpipev -p 4 -m 10 --format csv --compute-only").out);
  EXPECT_EQ(r.out.find("OVERLAP_F_B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(",0W9,0REDUCE_GRAD\n"), std::string::npos) << r.out;
  r = run_schedule("--from-csv " + artifact + " --format schedule");  // runnable: receives and sends added
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.rfind("pipeline p=4 m=10 v=2 placement=v\n0: F0 SF0 F1 SF1", 0), 0u) << r.out.substr(0, 200);
}

TEST(ScheduleCli, ReadmeCommandsRun) {
  // Every '$ trident schedule ...' line of schedules/README.md, as written,
  // from the repository root.
  std::ifstream in(std::string(TRIDENT_SOURCE_DIR) + "/schedules/README.md");
  std::string line;
  int ran = 0;
  while (std::getline(in, line)) {
    if (line.rfind("$ trident schedule ", 0) != 0) continue;
    const std::string cmd = "cd " TRIDENT_SOURCE_DIR " && " TRIDENT_BINARY_DIR "/trident" + line.substr(9) + " > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << line;
    ++ran;
  }
  EXPECT_GE(ran, 5);
}

// --profile: each stage's measured costs from a `trident plan profile` file
// (planner/profile.h; the figures of tests/unit/test_planner_profile.cpp).
TEST(ScheduleCli, ProfileGivesEveryStagesCosts) {
  const std::string path = trident::testing::temp_dir() + "schedule-cli-profile.toml";
  std::ofstream(path) << "[model]\narch = \"gpt\"\nlayers = 4\nhidden = 64\nheads = 8\nkv_heads = 8\n"
                         "ffn_hidden = 256\nseq_len = 32\nvocab_size = 256\nprecision = \"fp32\"\nthreads = 1\n"
                         "[[micro_batch]]\nsize = 2\nlayer_forward_ms = 2.0\nembedding_forward_ms = 1.0\n"
                         "head_forward_ms = 3\nlayer_backward_ms = 4.0\nlayer_backward_selective_ms = 4.5\n"
                         "layer_backward_full_ms = 6.5\nembedding_backward_ms = 2.0\n"
                         "embedding_backward_selective_ms = 2.0\nembedding_backward_full_ms = 2.0\n"
                         "head_backward_ms = 6.0\nhead_backward_selective_ms = 6.0\nhead_backward_full_ms = 8.0\n"
                         "step_overhead_ms = 5.0\nsplit_backward_ratio = 0.75\nweight_share = 0.25\n"
                         "pipeline_slowdown = 1.0\n";
  // One micro-batch through two stages: F 5 + 7, then B (8 + 6) x 0.75 + (8 + 2) x 0.75.
  Result r = run_schedule("--kind 1f1b -p 2 -m 1 --profile " + path + " --format summary");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"step_time\": 30,"), std::string::npos) << r.out;
  r = run_schedule("--kind 1f1b -p 2 -m 1 --profile " + path + " --latency 0.5 --recompute full --format summary");
  // F 12, B (13 + 8) x 0.75 + (13 + 2) x 0.75 = 27, and 0.5 over each of the two crossings.
  EXPECT_NE(r.out.find("\"step_time\": 40,"), std::string::npos) << r.out;
  r = run_schedule("--kind zb-auto -p 2 -m 4 --memory-limit 4 --profile " + path + " --format summary");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run_schedule("--kind zb-v -p 2 -m 4 --profile " + path + " --format summary");  // 4 layers over 2 x 2 chunks
  EXPECT_EQ(r.status, 0) << r.out;
  const std::pair<std::string, std::string> bad[] = {
      {"--kind 1f1b -p 2 -m 2 --profile " + path + " --costs 1,2,1", "--profile gives every stage's costs: leave out --costs"},
      {"--kind 1f1b -p 2 -m 2 --mbs 2", "--mbs applies with --profile only"},
      {"--kind 1f1b -p 2 -m 2 --recompute full", "--recompute applies with --profile only"},
      {"--kind 1f1b -p 3 -m 3 --profile " + path, "4 layers do not split evenly over 3 pipeline stages"},
      {"--kind 1f1b -p 2 -m 2 --profile " + path + " --mbs 4", "--profile: "},
      {"--kind 1f1b -p 2 -m 2 --profile /nonexistent/p.toml", "--profile: "},
  };
  for (const auto& [args, expected] : bad) {
    r = run_schedule(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.out.find(expected), std::string::npos) << args << "\n" << r.out;
  }
}

// `trident bench bubble` runs every generated kind, the V placements included,
// on its synthetic stages; its simulated column is the simulator's figure for
// the same costs (what `trident schedule --format summary` prints).
TEST(BenchCli, BubbleRunsEveryKind) {
  const std::string out = trident::testing::temp_dir() + "bench-bubble-kinds";
  const trident::testing::RunResult r = trident::testing::run_command(
      trident::testing::bin("trident") + " bench bubble --schedules zb-h2,zb-v,v-half,v-min,dualpipev --stages 2 " +
      "--microbatches 4 --stage-ms 1,2,1 --steps 1 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream csv(out + "/bubble.csv");
  std::string line;
  std::getline(csv, line);  // header
  int rows = 0;
  for (; std::getline(csv, line); ++rows) {
    std::stringstream cells(line);
    std::string kind, p, m, v, closed, simulated;
    for (std::string* cell : {&kind, &p, &m, &v, &closed, &simulated}) std::getline(cells, *cell, ',');
    const Result s = run_schedule("--kind " + kind + " -p 2 -m 4 --costs 1,2,1 --format summary");
    const std::string key = "\"bubble_fraction\": ";
    ASSERT_NE(s.out.find(key), std::string::npos) << s.out;
    EXPECT_NEAR(std::stod(simulated), std::stod(s.out.substr(s.out.find(key) + key.size())), 5e-5) << line;
  }
  EXPECT_EQ(rows, 5) << r.output;
}
