// `trident plan` end to end: the search on a small case, --layout on one row
// of the published table, --emit-set accepted by trident train's config
// parser, and bad arguments failing with a message. Runs the built binary.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/json.h"
#include "tests/run_helpers.h"

namespace {

namespace json = trident::json;

struct Result {
  int status;
  std::string out;  // stdout (stderr too when merged)
};

// `trident plan ARGS` run from the source tree; stdout alone when !merge (JSON to parse).
Result run_plan(const std::string& args, bool merge = true) {
  const std::string plan = trident::testing::bin("trident") + " plan " + args;
  const trident::testing::RunResult r = trident::testing::run_command(
      "cd " + trident::testing::src("") + " && " + (merge ? plan : "(" + plan + " 2>/dev/null)"));
  return {r.status, r.output};
}

const std::string kTiny = "--config configs/gpt-tiny.toml --cluster configs/clusters/dgx-a100.toml ";

}  // namespace

TEST(PlanCli, SearchPrintsTheBestSortedAsJson) {
  const Result r = run_plan(kTiny + "--gpus 4 --top 3 --format json", false);
  ASSERT_EQ(r.status, 0) << r.out;
  const json::Value v = json::parse(r.out, "plan");
  const auto& best = json::as_array(v, "plan");
  ASSERT_EQ(best.size(), 3u);
  double last = 0;
  for (const auto& e : best) {
    EXPECT_EQ(json::as_int(json::at(e, "tp", "e"), "tp") * json::as_int(json::at(e, "pp", "e"), "pp") *
                  json::as_int(json::at(e, "dp", "e"), "dp"),
              4);
    const double step = json::as_double(json::at(e, "step_s", "e"), "step_s");
    EXPECT_GE(step, last);
    last = step;
    EXPECT_TRUE(json::as_bool(json::at(e, "fits", "e"), "fits"));
    double parts = 0;
    for (const char* k : {"compute", "bubble", "tp_comm", "pp_comm", "dp_exposed", "optimizer", "recompute", "step_sync", "cp_comm"})
      parts += json::as_double(json::at(json::at(e, "breakdown_s", "e"), k, "breakdown"), k);
    EXPECT_NEAR(parts, step, 1e-6 * step) << "the breakdown adds up to the step";
  }
  const Result t = run_plan(kTiny + "--gpus 4 --top 2");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("x global batch not a multiple of dp x micro-batch"), std::string::npos) << t.out;
  const Result c = run_plan(kTiny + "--gpus 4 --top 2 --format csv");
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_EQ(c.out.rfind("layout,microbatches,step_s,", 0), 0u) << c.out;
}

TEST(PlanCli, EmitSetLinesAreAcceptedByTheTrainConfigParser) {
  const Result r = run_plan(kTiny + "--gpus 4 --layout tp=2,pp=2,schedule=interleaved,chunks=2,mbs=2,recompute=full --emit-set",
                            false);
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<std::string> sets;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    ASSERT_EQ(line.rfind("--set ", 0), 0u) << line;
    sets.push_back(line.substr(6));
  }
  trident::Config c = trident::load_config(TRIDENT_SOURCE_DIR "/configs/gpt-tiny.toml", sets);
  trident::resolve_world(c, 4);
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_EQ(c.parallel.pp, 2);
  EXPECT_EQ(c.parallel.dp, 1);
  EXPECT_EQ(c.schedule.kind, "interleaved");
  EXPECT_EQ(c.schedule.chunks, 2);
  EXPECT_EQ(c.training.micro_batch_size, 2);
  EXPECT_EQ(c.training.recompute, "full");
  EXPECT_EQ(trident::num_microbatches(c), 8);
}

TEST(PlanCli, PublishedRowRunsAsMegatron2021AndCountsNarayanansFlops) {
  // Narayanan et al. 2021 Table 1, the 145.6 B row, as Megatron ran it then (--runtime megatron-2021).
  // Its error against the published 148 TFLOP/s is benchmarks/results/plan_published.txt's to report
  // (benchmarks/plan_published.sh, every row): here the step's parts add up to the step and the
  // TFLOP/s are the paper's 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs over the step and the GPUs.
  const Result r = run_plan(
      "--config configs/gpt2-1.3b.toml --set model.heads=96 --set model.hidden=12288 --set model.layers=80 "
      "--set model.ffn_hidden=0 --set model.seq_len=2048 --set model.vocab_size=51200 --set model.vocab_pad_multiple=128 "
      "--set training.precision=bf16 --set parallel.sequence_parallel=false --cluster configs/clusters/dgx-a100.toml "
      "--runtime megatron-2021 --gpus 1536 --global-batch 2304 "
      "--layout tp=8,pp=8,schedule=interleaved,chunks=2,mbs=1,recompute=full --format json",
      false);
  ASSERT_EQ(r.status, 0) << r.out;
  const json::Value e = json::as_array(json::parse(r.out, "plan"), "plan").at(0);
  EXPECT_EQ(json::as_string(json::at(e, "runtime", "e"), "runtime"), "megatron-2021");
  const double step = json::as_double(json::at(e, "step_s", "e"), "step_s");
  double parts = 0;
  for (const char* k : {"compute", "bubble", "tp_comm", "pp_comm", "dp_exposed", "optimizer", "recompute", "step_sync", "cp_comm"})
    parts += json::as_double(json::at(json::at(e, "breakdown_s", "e"), k, "b"), k);
  EXPECT_NEAR(parts / step, 1.0, 1e-6);
  const double B = 2304, s = 2048, l = 80, h = 12288, V = 51200;  // 51,200 is a multiple of 128 x 8
  const double flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(json::as_double(json::at(e, "tflops_per_device", "e"), "tflops") / (flops / step / 1536 / 1e12), 1.0,
              1e-6);
  // The table names the runtime it predicts.
  const Result t = run_plan("--config configs/gpt-tiny.toml --cluster configs/clusters/dgx-h100.toml --gpus 8 "
                            "--runtime megatron --layout tp=2,sp=1");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_NE(t.out.find("runtime predicted: megatron: --overlap-grad-reduce"), std::string::npos) << t.out;
}

// --longest-seq (NOTE [planned context parallelism]): the config's length doubled while a layout fits,
// context parallelism searched up to --gpus; its best layouts are those of the length it names.
TEST(PlanCli, LongestSequenceNamesTheLengthAndItsLayouts) {
  const Result r = run_plan("--config configs/llama-3.1-8b-128k.toml --cluster configs/clusters/dgx-h100.toml "
                            "--gpus 64 --longest-seq --top 2 --max-mbs 1");
  ASSERT_EQ(r.status, 0) << r.out;
  const size_t at = r.out.find("longest sequence: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const long long longest = std::atoll(r.out.c_str() + at + 18);
  EXPECT_GE(longest, 131072) << r.out;
  EXPECT_NE(r.out.find("fits no layout"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(",cp="), std::string::npos) << "the layouts at that length split it:\n" << r.out;
  // The cp-16 layout of the same model beside cp 1: a rank keeps a sixteenth of each sequence.
  const Result one = run_plan("--config configs/llama-3.1-8b-128k.toml --cluster configs/clusters/dgx-h100.toml "
                              "--gpus 64 --format json --layout tp=8,pp=1,dp=8,sp=1,recompute=full,mbs=1");
  const Result sixteen = run_plan("--config configs/llama-3.1-8b-128k.toml --cluster configs/clusters/dgx-h100.toml "
                                  "--gpus 128 --format json --layout tp=8,cp=16,pp=1,dp=1,sp=1,recompute=full,mbs=1");
  ASSERT_EQ(one.status, 0) << one.out;
  ASSERT_EQ(sixteen.status, 0) << sixteen.out;
  const json::Value va = json::parse(one.out, "cp1"), vb = json::parse(sixteen.out, "cp16");
  const json::Value &a = json::as_array(va, "cp1").at(0), &b = json::as_array(vb, "cp16").at(0);
  const auto act = [](const json::Value& e) {
    return json::as_double(json::at(json::as_array(json::at(e, "ranks", "e"), "ranks").at(0), "activation_bytes", "r"), "a");
  };
  EXPECT_NEAR(act(b) / act(a), 1.0 / 16, 0.01 / 16) << one.out << sixteen.out;
  EXPECT_EQ(json::as_int(json::at(b, "cp", "e"), "cp"), 16);
}

// NOTE [plan reads no data]: a plan of a 128K-token model with the synthetic data's default size
// (65536 tokens, less than one sample) plans, since a plan reads no data; the training parser still
// refuses that config, and the plan still refuses a bad model value.
TEST(PlanCli, PlansA128KTokenModelWhateverTheDataSection) {
  const std::string config = "--config configs/llama-3.1-8b.toml --cluster configs/clusters/dgx-h100.toml --gpus 8 "
                             "--set data.synthetic_tokens=65536 --seq 131072 ";
  const Result r = run_plan(config + "--format json --layout tp=8,pp=1,dp=1,sp=1,recompute=full,mbs=1", false);
  ASSERT_EQ(r.status, 0) << r.out;
  const json::Value v = json::parse(r.out, "plan");
  EXPECT_EQ(json::as_array(v, "plan").size(), 1u) << r.out;
  EXPECT_THROW(trident::load_config(TRIDENT_SOURCE_DIR "/configs/llama-3.1-8b.toml",
                                    {"data.synthetic_tokens=65536", "model.seq_len=131072"}),
               trident::ConfigError);
  const Result bad = run_plan(config + "--set model.heads=7");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("model.hidden (4096) must be divisible by model.heads (7)"), std::string::npos) << bad.out;
}

// NOTE [planned experts]: the full-size MoE presets searched, every layout at tp = 1 (what Trident
// runs for them), fitting an H100; DeepSeek-V3 with ep and without cp (MLA does not run under it).
TEST(PlanCli, MoePresetsAreSearchedAtTpOne) {
  for (const char* preset : {"mixtral-8x7b", "qwen3-30b-a3b"}) {
    const Result r = run_plan(std::string("--config configs/") + preset +
                                  ".toml --cluster configs/clusters/dgx-h100.toml --gpus 64 --top 3 --format json",
                              false);
    ASSERT_EQ(r.status, 0) << preset << ": " << r.out;
    const json::Value v = json::parse(r.out, "plan");
    const auto& best = json::as_array(v, "plan");
    ASSERT_FALSE(best.empty()) << preset;
    for (const auto& e : best) {
      EXPECT_EQ(json::as_int(json::at(e, "tp", "e"), "tp"), 1) << preset;
      EXPECT_TRUE(json::as_bool(json::at(e, "fits", "e"), "fits")) << preset;
    }
  }
  // DeepSeek-V3 fits 1024 H100s only with its experts spread (NOTE [planned expert parallelism]), and
  // --emit-set says so to trident train.
  const Result ds = run_plan("--config configs/deepseek-v3.toml --cluster configs/clusters/dgx-h100.toml --gpus 1024 "
                             "--top 3 --format json", false);
  ASSERT_EQ(ds.status, 0) << ds.out;
  const json::Value dv = json::parse(ds.out, "plan");
  for (const auto& e : json::as_array(dv, "plan")) {
    EXPECT_EQ(json::as_int(json::at(e, "tp", "e"), "tp"), 1);
    EXPECT_GT(json::as_int(json::at(e, "ep", "e"), "ep"), 1);
    EXPECT_GT(json::as_double(json::at(json::at(e, "breakdown_s", "e"), "ep_comm", "b"), "ep_comm"), 0.0);
  }
  const Result emit = run_plan("--config configs/deepseek-v3.toml --cluster configs/clusters/dgx-h100.toml --gpus 1024 "
                               "--layout tp=1,pp=16,ep=8 --emit-set");
  EXPECT_NE(emit.out.find("--set parallel.ep=8"), std::string::npos) << emit.out;
  EXPECT_EQ(emit.out.find("overlap_moe"), std::string::npos) << emit.out;
  // NOTE [planned overlap]: a layout with its all-to-alls under overlapped pairs says so to trident train.
  const Result pairs = run_plan("--config configs/mixtral-8x7b.toml --cluster configs/clusters/dgx-h100.toml --gpus 128 "
                                "--layout tp=1,pp=4,ep=8,schedule=zb-h1,recompute=selective,overlap_moe=1 --emit-set");
  EXPECT_NE(pairs.out.find("--set schedule.overlap_moe=true"), std::string::npos) << pairs.out;
  // NOTE [planned experts]: at tp > 1 each expert is split over tp as the rest of the layer, so a
  // first-stage rank holds half of tp = 1's parameters (but the replicated norms and router, well
  // under 1 %); --moe-tp lets the search try such layouts.
  const auto params_bytes = [](const std::string& layout) {
    const Result r = run_plan("--config configs/mixtral-8x7b.toml --cluster configs/clusters/dgx-h100.toml --gpus 64 "
                              "--format json --layout " + layout, false);
    EXPECT_EQ(r.status, 0) << r.out;
    const json::Value v = json::parse(r.out, "plan");
    const auto& ranks = json::as_array(json::at(json::as_array(v, "plan").at(0), "ranks", "e"), "ranks");
    return json::as_double(json::at(ranks.at(0), "params_bytes", "r"), "params_bytes");
  };
  const double one = params_bytes("tp=1,pp=4,dp=16,ep=8"), two = params_bytes("tp=2,pp=4,dp=8,ep=8");
  EXPECT_NEAR(two / one, 0.5, 0.005) << one << " " << two;
  const Result wide = run_plan("--config configs/mixtral-8x7b.toml --cluster configs/clusters/dgx-h100.toml --gpus 16 "
                               "--top 5 --max-mbs 1 --global-batch 64 --format json --moe-tp", false);
  ASSERT_EQ(wide.status, 0) << wide.out;
  int above_one = 0, paired = 0, whole = 0;
  const json::Value wv = json::parse(wide.out, "plan");
  for (const auto& e : json::as_array(wv, "plan"))
    if (json::as_int(json::at(e, "tp", "e"), "tp") > 1) {
      ++above_one;
      // NOTE [two tp groups]: the overlapped pairs are tried at tp > 1 too.
      paired += json::as_bool(json::at(e, "overlap_moe", "e"), "overlap_moe") ? 1 : 0;
      // NOTE [planned experts]: and the experts whole, the tp ranks folded into ep (etp = 1).
      whole += json::as_int(json::at(e, "etp", "e"), "etp") == 1 ? 1 : 0;
    }
  EXPECT_GT(above_one, 0) << wide.out;
  EXPECT_GT(paired, 0) << wide.out;
  EXPECT_GT(whole, 0) << wide.out;
  const Result folded = run_plan("--config configs/mixtral-8x7b.toml --cluster configs/clusters/dgx-h100.toml --gpus 16 "
                                 "--layout tp=2,pp=2,dp=4,ep=8,etp=1 --emit-set");
  EXPECT_NE(folded.out.find("--set parallel.etp=1"), std::string::npos) << folded.out;
  const Result d = run_plan("--config configs/deepseek-v3.toml --cluster configs/clusters/dgx-h100.toml --gpus 1024 "
                            "--layout tp=1,cp=2,pp=16");
  EXPECT_EQ(d.status, 2) << d.out;
  EXPECT_NE(d.out.find("multi-head latent attention does not run under context parallelism"), std::string::npos) << d.out;
}

TEST(PlanCli, BadArgumentsSayWhat) {
  for (auto [args, expect] : std::vector<std::pair<std::string, std::string>>{
           {"--config configs/gpt-tiny.toml --gpus 4", "--cluster is required"},
           {kTiny + "--gpus 4 --format xml", "--format 'xml', expected table, csv or json"},
           {kTiny + "--gpus 4 --layout tp=2 --top 3", "--top, --max-mbs, --max-cp and --longest-seq apply to the search"},
           {kTiny + "--gpus 4 --layout cp=2 --longest-seq", "--top, --max-mbs, --max-cp and --longest-seq apply to the search"},
           {kTiny + "--gpus 3 --layout cp=3", "2 x cp does not divide model.seq_len = 32"},
           {kTiny + "--gpus 4 --max-cp 0", "--max-cp 0: expected >= 1"},
           {kTiny + "--gpus 4 --longest-seq --emit-set", "--emit-set with --longest-seq"},
           {kTiny + "--gpus 4 --layout tp=3", "does not divide --gpus 4"},
           {kTiny + "--gpus 4000", "--gpus 4000 but the cluster dgx-a100"},
           {kTiny + "--gpus 4 --cluster-set compute.gemm_efficiency=2", "expected a fraction in (0, 1]"},
           {kTiny + "--gpus 4 --set model.colour=1", "unknown key model.colour"},
           {kTiny + "--gpus 4 --runtime deepspeed", "runtime 'deepspeed': expected trident, megatron or megatron-2021"},
           {kTiny + "--gpus 4 --runtime megatron --layout tp=2 --emit-set", "--emit-set prints the lines of a trident train run"}}) {
    const Result r = run_plan(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.out.find(expect), std::string::npos) << args << "\n" << r.out;
  }
}
