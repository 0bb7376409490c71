// Correctness contract for pipeline parallelism: gpt-tiny trained for 20 steps
// at pp = 2 and 4 under every schedule (and uneven splits, and a schedule read
// from a file) logs the same loss and grad norm as the pp = 1 reference, bit
// for bit; the stages hold the reference's parameters plus one tied word
// embedding; and pipeline config errors fail with their message.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <regex>

#include "regression_util.h"

namespace trident::testing {
namespace {

// gpt-tiny's padded vocabulary x hidden: the LM head's copy of the word
// embedding, held by the last stage in addition to the first stage's.
constexpr long long kWordEmbedding = 256LL * 64;

// The pp = 1 run, trained once (per build) and shared by every test.
const TrainRun& reference() {
  static const TrainRun run = cached_reference();  // NOTE [reference cache]
  return run;
}

struct PipelineCase {
  std::string name;
  int pp;
  std::vector<std::string> sets;
  std::string banner;  // what rank 0's start-up line must say, e.g. "schedule 1f1b (m=8, v=1)"
};

std::ostream& operator<<(std::ostream& os, const PipelineCase& c) { return os << c.name; }

PipelineCase schedule_case(const std::string& kind, int pp) {
  const bool v_kind = kind == "zb-v" || kind == "v-half" || kind == "v-min" || kind == "dualpipev";
  const int v = kind == "interleaved" || v_kind ? 2 : 1;
  PipelineCase c{kind + "_pp" + std::to_string(pp), pp,
                 {"parallel.pp=" + std::to_string(pp), "schedule.kind=" + kind, "schedule.chunks=" + std::to_string(v)},
                 "pp " + std::to_string(pp) + ", schedule " + kind + " (m=8, v=" + std::to_string(v) + ")"};
  if (kind == "zb-auto") c.sets.push_back("schedule.memory_limit=" + std::to_string(2 * pp));  // ZB-2p
  for (auto& ch : c.name)
    if (ch == '-') ch = '_';
  return c;
}

std::vector<PipelineCase> all_cases() {
  std::vector<PipelineCase> cases;
  for (int pp : {2, 4})
    for (const char* kind : {"gpipe", "1f1b", "zb-h1", "zb-h2", "zb-auto", "interleaved", "zb-v", "v-half", "v-min", "dualpipev"})
      cases.push_back(schedule_case(kind, pp));
  cases.push_back({"uneven_1_3_3_1_pp4", 4, {"parallel.pp=4", "parallel.pipeline_layers=[1,3,3,1]"},
                   "pp 4, schedule 1f1b (m=8, v=1)"});
  cases.push_back({"uneven_3_5_pp2_gpipe", 2, {"parallel.pp=2", "parallel.pipeline_layers=[3,5]", "schedule.kind=gpipe"},
                   "pp 2, schedule gpipe (m=8, v=1)"});
  return cases;
}

// Every stage reports its share; together they hold each parameter once,
// plus the last stage's copy of the word embedding when it is on another
// rank (loop placement; under the V placement rank 0 holds both copies and
// steps them as one).
void expect_stage_params(const TrainRun& ref, const TrainRun& run, int pp, bool v_placement) {
  const auto ref_ranks = rank_summaries(ref.dir);
  ASSERT_EQ(ref_ranks.size(), 1u) << ref.result.output;
  const int64_t total = field(ref_ranks[0], "model_parameters");
  const auto ranks = rank_summaries(run.dir);
  ASSERT_EQ(static_cast<int>(ranks.size()), pp) << run.result.output;
  long long sum = 0;
  std::vector<int> stages;
  for (const auto& s : ranks) {
    EXPECT_EQ(field(s, "model_parameters"), total) << "rank " << field(s, "rank");
    EXPECT_EQ(field(s, "rank"), field(s, "pp")) << "with tp = dp = 1 rank r is stage r";
    sum += field(s, "local_parameters");
    stages.push_back(static_cast<int>(field(s, "pp")));
  }
  std::sort(stages.begin(), stages.end());
  std::vector<int> want(pp);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(stages, want);
  EXPECT_EQ(sum, total + (v_placement ? 0 : kWordEmbedding))
      << "sum of local parameters over " << pp << " stages";
}

class PipelineRegression : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(PipelineRegression, BitIdenticalToReference) {
  const TrainRun& ref = reference();
  ASSERT_TRUE(completed(ref));
  TempDir dir("pp");
  const TrainRun run = train_tiny(dir.path(), GetParam().pp, GetParam().sets);
  EXPECT_TRUE(matches_reference(ref.rows, run, 0.0));
  EXPECT_NE(run.result.output.find(GetParam().banner), std::string::npos)
      << "expected \"" << GetParam().banner << "\" in:\n" << run.result.output;
  const std::string& name = GetParam().name;
  const bool v_placement = name.rfind("zb_v", 0) == 0 || name.rfind("v_half", 0) == 0 || name.rfind("v_min", 0) == 0 ||
                           name.rfind("dualpipev", 0) == 0;
  expect_stage_params(ref, run, GetParam().pp, v_placement);
}

INSTANTIATE_TEST_SUITE_P(Matrix, PipelineRegression, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<PipelineCase>& i) { return i.param.name; });

// schedule.zb_auto_costs = "measured" (NOTE [measured zb-auto]) on a model whose
// LM head dominates: the costs rank 0 measured before the first step, sent to
// every rank, make the last stage's forward dearer than the first's; the list
// searched for them trains bit-identically to pp = 1, and at dp = 2 (two
// replicas, each measuring its own pipeline, under the NCCL rules) every rank
// runs the same list: the run ends, bit-identical to 1F1B on the same layout.
TEST(PipelineZbAuto, MeasuredCostsTrainBitIdenticallyOnEveryReplica) {
  const std::vector<std::string> vocab = {"model.vocab_size=16384"};
  const TrainRun ref = cached_reference(vocab);
  ASSERT_TRUE(completed(ref));
  const std::vector<std::string> zb = {"model.vocab_size=16384", "parallel.pp=2", "schedule.kind=zb-auto",
                                       "schedule.memory_limit=4", "schedule.zb_auto_costs=measured",
                                       "parallel.backend=nccl-rules"};
  TempDir dir("pp-zb-measured");
  const TrainRun run = train_tiny(dir.path(), 2, zb);
  ASSERT_TRUE(completed(run)) << run.result.output;
  EXPECT_TRUE(matches_reference(ref.rows, run, 0.0));
  std::smatch m;
  const std::regex costs("schedule: zb-auto searched for the measured costs \\(ms per stage F/B/W: ([0-9.e+-]+)/"
                         "[0-9.e+-]+/[0-9.e+-]+, ([0-9.e+-]+)/");
  ASSERT_TRUE(std::regex_search(run.result.output, m, costs)) << run.result.output;
  EXPECT_GT(std::stod(m[2]), std::stod(m[1])) << "the head's stage should be measured dearer: " << m[0];

  std::vector<std::string> dp2 = zb;
  dp2.push_back("parallel.dp=2");
  std::vector<std::string> one_f_one_b = {"model.vocab_size=16384", "parallel.pp=2", "parallel.dp=2",
                                          "parallel.backend=nccl-rules"};
  TempDir dir2("pp-zb-measured-dp2"), dir3("pp-1f1b-dp2");
  const TrainRun z2 = train_tiny(dir2.path(), 4, dp2);
  ASSERT_TRUE(completed(z2)) << z2.result.output;
  const TrainRun b2 = train_tiny(dir3.path(), 4, one_f_one_b);
  ASSERT_TRUE(completed(b2)) << b2.result.output;
  EXPECT_TRUE(matches_reference(b2.rows, z2, 0.0));
}

// parallel.pipeline_layers = "auto" on a model whose LM head dominates (a
// vocabulary of 16384 against hidden 64): the profiling pass must give the
// last stage fewer layers than the first, the simulated bubble of its split
// must be below the even split's, and the run stays bit-identical to pp = 1.
TEST(PipelineAutoSplit, HeadHeavyModelGetsAShorterLastStage) {
  const std::vector<std::string> vocab = {"model.vocab_size=16384"};
  const TrainRun ref = cached_reference(vocab);
  ASSERT_TRUE(completed(ref));
  TempDir dir("pp-auto");
  std::vector<std::string> sets = vocab;
  sets.insert(sets.end(), {"parallel.pp=2", "parallel.pipeline_layers=auto"});
  const TrainRun run = train_tiny(dir.path(), 2, sets);
  ASSERT_TRUE(completed(run)) << run.result.output;
  EXPECT_TRUE(matches_reference(ref.rows, run, 0.0));
  const auto ranks = rank_summaries(run.dir);
  ASSERT_EQ(ranks.size(), 2u) << run.result.output;
  const json::Value& split = json::at(ranks[0], "auto_split", "rank 0's summary");
  const std::vector<int64_t> layers = json::as_int_array(json::at(split, "layers", "auto_split"), "layers");
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_GT(layers[0], layers[1]);
  EXPECT_EQ(layers[0] + layers[1], 8);
  EXPECT_LT(json::as_double(json::at(split, "simulated_bubble", "auto_split"), "simulated_bubble"),
            json::as_double(json::at(split, "even_split_simulated_bubble", "auto_split"), "even_split_simulated_bubble"));
  // The effective config records the chosen split.
  EXPECT_NE(slurp(dir.file("config.toml"))
                .find("pipeline_layers = [" + std::to_string(layers[0]) + ", " + std::to_string(layers[1]) + "]"),
            std::string::npos);
}

// A schedule written by `trident schedule` and read back with kind = "file"
// runs the same actions as the generated one, so it matches as well.
TEST(PipelineScheduleFile, OneF1BFromFileIsBitIdentical) {
  const TrainRun& ref = reference();
  ASSERT_TRUE(completed(ref));
  TempDir dir("pp-file");
  const std::string file = dir.file("1f1b-p2-m8.txt");
  const RunResult gen =
      run_command(bin("trident") + " schedule --kind 1f1b -p 2 -m 8 --format schedule -o " + file);
  ASSERT_EQ(gen.status, 0) << gen.output;
  const TrainRun run = train_tiny(dir.file("run"), 2, {"parallel.pp=2", "schedule.kind=file", "schedule.file=" + file});
  EXPECT_TRUE(matches_reference(ref.rows, run, 0.0));
  EXPECT_NE(run.result.output.find("schedule file (m=8, v=1)"), std::string::npos) << run.result.output;
}

// parallel.pipeline_layout (Megatron's layout string) gives the same model as
// the same split in parallel.pipeline_layers: the very same losses and grad
// norms, both bit-identical to pp = 1, and the same parameters on each rank.
// Every split is bit-identical to pp = 1, so the parameters per rank are what
// show the split took effect: [1, 2, 4, 1] puts 5 layers on rank 0 and 3 on
// rank 1 (the even split 4 and 4). A layout whose first and last chunks hold
// only the embedding and only the head and loss (chunks of no layers, which
// pipeline_layers cannot express) trains bit-identically too.
TEST(PipelineLayoutString, SameSplitAsPipelineLayersIsBitIdentical) {
  const TrainRun& ref = reference();
  ASSERT_TRUE(completed(ref));
  TempDir dir("pp-layout");
  auto run_with = [&](const std::string& name, const std::string& split) {
    return train_tiny(dir.file(name), 2, {"parallel.pp=2", "schedule.kind=interleaved", "schedule.chunks=2", split});
  };
  auto local_params = [](const TrainRun& run) {  // by pipeline rank
    std::vector<int64_t> n(2, -1);
    for (const auto& s : rank_summaries(run.dir)) n.at(field(s, "pp")) = field(s, "local_parameters");
    return n;
  };
  const TrainRun layers = run_with("layers", "parallel.pipeline_layers=[1,2,4,1]");
  const TrainRun layout = run_with("layout", "parallel.pipeline_layout=Et|tt|tttt|tL");
  ASSERT_TRUE(completed(layers));
  ASSERT_TRUE(completed(layout));
  EXPECT_TRUE(steps_match(layers.rows, layout.rows, "loss", 0.0));
  EXPECT_TRUE(steps_match(layers.rows, layout.rows, "grad_norm", 0.0));
  EXPECT_TRUE(matches_reference(ref.rows, layout, 0.0));
  const std::vector<int64_t> split = local_params(layers);
  EXPECT_EQ(local_params(layout), split);
  EXPECT_GT(split[0], split[1]) << "rank 0 holds 5 layers and the embedding, rank 1 3 layers, its copy and the norm";
  const TrainRun alone = run_with("alone", "parallel.pipeline_layout=E|ttttt|ttt|L");
  ASSERT_TRUE(completed(alone));
  EXPECT_TRUE(matches_reference(ref.rows, alone, 0.0));
  const std::vector<int64_t> apart = local_params(alone);
  EXPECT_LT(apart[0], apart[1]) << "rank 0 holds 3 layers and the embedding, rank 1 5 layers and the head";
  EXPECT_EQ(split[0] - apart[0], apart[1] - split[1]) << "two layers moved from rank 0 to rank 1";
}

// A run that must fail before training, with `message` in its output.
void expect_config_error(int nproc, const std::vector<std::string>& sets, const std::string& message) {
  TempDir dir("pp-err");
  const TrainRun run = train_tiny(dir.path(), nproc, sets);
  EXPECT_NE(run.result.status, 0) << run.result.output;
  EXPECT_NE(run.result.output.find(message), std::string::npos)
      << "expected \"" << message << "\" in:\n" << run.result.output;
  EXPECT_TRUE(run.rows.empty()) << "a failed config must not train";
}

TEST(PipelineConfigErrors, LayersNotDivisibleByStages) {
  expect_config_error(3, {"parallel.pp=3"},
                      "model.layers (8) must be divisible by parallel.pp (3) x schedule.chunks (1) = 3, or give "
                      "parallel.pipeline_layers");
}

TEST(PipelineConfigErrors, LayersNotDivisibleByStagesTimesChunks) {
  expect_config_error(2, {"parallel.pp=2", "schedule.kind=interleaved", "schedule.chunks=3"},
                      "model.layers (8) must be divisible by parallel.pp (2) x schedule.chunks (3) = 6");
}

TEST(PipelineConfigErrors, PipelineLayersMustSumToLayers) {
  expect_config_error(2, {"parallel.pp=2", "parallel.pipeline_layers=[3,4]"},
                      "parallel.pipeline_layers sums to 7 but model.layers = 8");
}

TEST(PipelineConfigErrors, InterleavedNeedsAtLeastAsManyMicroBatchesAsStages) {
  // global batch 2 / micro-batch 2 = 1 micro-batch on 2 stages (any m >= p works).
  expect_config_error(2,
                      {"parallel.pp=2", "schedule.kind=interleaved", "schedule.chunks=2",
                       "training.global_batch_size=2"},
                      "interleaved with v>1 needs at least as many microbatches as stages (m >= p)");
}

TEST(PipelineConfigErrors, UnknownScheduleKind) {
  expect_config_error(1, {"schedule.kind=bogus"},
                      "schedule.kind = \"bogus\": expected one of \"gpipe\", \"1f1b\", \"interleaved\", \"zb-h1\", \"zb-h2\", "
                      "\"zb-v\", \"v-half\", \"v-min\", \"dualpipev\", \"zb-auto\" or \"file\"");
}

}  // namespace
}  // namespace trident::testing
