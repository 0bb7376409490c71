// Loss masks (NOTE [token-weighted loss] in models/common/loss_mask.h): the step's loss is one
// mean over the counted labels of the whole global batch, so every layout trains as one
// process holding the global batch in one micro-batch, within 1e-5 for 20 steps:
//   - llama-sft-tiny (random weights) on tests/data/sft-tiny.jsonl packed by `trident data
//     prepare --format prompt-completion`: completions only, eods masked, documents apart. Its
//     samples count from 71 to 164 labels a step, unevenly over micro-batches and dp ranks, so
//     a mean per micro-batch or per rank would be off by far more than 1e-5;
//   - gpt-tiny with data.eod_mask_loss alone under cp2 (the mask is split with the labels).
// The reference runs differ from runs without the masks, so the keys are read; every layout
// logs the reference's loss_tokens, padding_share and docs_per_sample (NOTE [document counts]).
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "regression_util.h"

namespace trident::testing {
namespace {

// The packed fine-tuning data, prepared once for the whole binary.
const std::string& sft_data() {
  static TempDir dir("sft-data");
  static const std::string prefix = [] {
    const std::string out = dir.file("sft");
    const RunResult r = run_command(bin("trident") +
                                    " data prepare --format prompt-completion --output-format megatron "
                                    "--eod-token 0 --pack-seq-len 128 --input " +
                                    src("tests/data/sft-tiny.jsonl") + " --output " + out);
    if (r.status != 0) throw std::runtime_error("data prepare failed:\n" + r.output);
    return out;
  }();
  return prefix;
}

std::vector<std::string> sft(std::vector<std::string> sets) {
  sets.insert(sets.begin(), {"model.init_from=", "data.path=" + sft_data(), "training.threads=1"});
  return sets;
}

TrainRun train(const std::string& tag, int nproc, const std::vector<std::string>& sets, const std::string& config) {
  static std::vector<std::unique_ptr<TempDir>> dirs;  // the runs' folders live as long as the binary
  dirs.push_back(std::make_unique<TempDir>(tag));
  return train_tiny(dirs.back()->path(), nproc, sets, config);
}

const char* const kSft = "configs/llama-sft-tiny.toml";

// One process, the global batch of 4 in one micro-batch: the mean as it is defined.
const TrainRun& sft_reference() {
  static const TrainRun run = train("sft-ref", 1, sft({"training.micro_batch_size=4"}), kSft);
  return run;
}

TEST(LossMask, CompletionsOnlyDifferFromEveryLabel) {
  ASSERT_TRUE(completed(sft_reference()));
  const TrainRun all = train("sft-all", 1, sft({"training.micro_batch_size=4", "data.completion_only_loss=false"}), kSft);
  ASSERT_TRUE(completed(all));
  EXPECT_FALSE(matches_reference(sft_reference().rows, all, 1e-3));
}

struct Layout {
  const char* name;
  int nproc;
  std::vector<std::string> sets;
};

void PrintTo(const Layout& layout, std::ostream* os) { *os << layout.name; }

class SftLayout : public ::testing::TestWithParam<Layout> {};

TEST_P(SftLayout, MatchesOneMicroBatch) {
  const Layout& layout = GetParam();
  ASSERT_TRUE(completed(sft_reference()));
  const TrainRun run = train(layout.name, layout.nproc, sft(layout.sets), kSft);
  EXPECT_TRUE(matches_reference(sft_reference().rows, run, 1e-5)) << layout.name;
  // The step line's counts are the global batch's, whichever rank holds which samples.
  ASSERT_EQ(run.rows.size(), sft_reference().rows.size());
  for (size_t i = 0; i < run.rows.size(); ++i)
    for (const char* key : {"loss_tokens", "padding_share", "docs_per_sample"}) {
      ASSERT_TRUE(run.rows[i].count(key)) << key;
      EXPECT_EQ(run.rows[i].at(key), sft_reference().rows[i].at(key)) << key << " at step " << i + 1;
    }
}

const Layout kSftLayouts[] = {
    {"mbs1", 1, {"training.micro_batch_size=1"}},
    {"dp2_zero1", 2, {"parallel.dp=2", "parallel.zero=1", "training.micro_batch_size=1"}},
    {"pp2_interleaved", 2,
     {"parallel.pp=2", "schedule.kind=interleaved", "schedule.chunks=2", "training.micro_batch_size=1"}},
    {"pp2_zbv", 2, {"parallel.pp=2", "schedule.kind=zb-v", "schedule.chunks=2", "training.micro_batch_size=1"}},
    {"tp2_sp", 2, {"parallel.tp=2", "parallel.sequence_parallel=true", "training.micro_batch_size=2"}},
    // Documents apart under context parallelism (NOTE [documents under context parallelism]).
    {"cp2_p2p", 2, {"parallel.cp=2", "training.micro_batch_size=2"}},
    {"cp2_a2a", 2, {"parallel.cp=2", "parallel.cp_comm=a2a", "training.micro_batch_size=2"}},
};

INSTANTIATE_TEST_SUITE_P(Sft, SftLayout, ::testing::ValuesIn(kSftLayouts),
                         [](const ::testing::TestParamInfo<Layout>& p) { return std::string(p.param.name); });

// mixtral-tiny on the same data: its balancing losses leave the padding out (NOTE [balancing
// losses over real tokens]), with a micro-batch of one sample in both runs (the losses are a
// micro-batch's), and expert parallelism routes the tokens of both dp ranks as one process does.
std::vector<std::string> mixtral_sft(std::vector<std::string> sets) {
  sets.insert(sets.begin(), {"model.seq_len=128", "data.source=file", "data.format=megatron", "data.path=" + sft_data(),
                             "data.tokenizer=byte", "data.eod_token=0", "data.reset_position_ids=true",
                             "data.reset_attention_mask=true", "data.eod_mask_loss=true", "data.completion_only_loss=true",
                             "training.global_batch_size=4", "training.micro_batch_size=1", "training.threads=1"});
  return sets;
}

TEST(LossMask, MixtralWithPaddingUnderExpertAndContextParallelism) {
  const TrainRun one = train("mixtral-sft", 1, mixtral_sft({}), "configs/mixtral-tiny.toml");
  ASSERT_TRUE(completed(one));
  const TrainRun ep2 = train("mixtral-sft-ep2", 2, mixtral_sft({"parallel.dp=2", "parallel.ep=2"}), "configs/mixtral-tiny.toml");
  EXPECT_TRUE(matches_reference(one.rows, ep2, 1e-5));
  // Under cp2 each rank holds another share of each sample's padding: the real count is the group's.
  const TrainRun cp2 = train("mixtral-sft-cp2", 2, mixtral_sft({"parallel.cp=2"}), "configs/mixtral-tiny.toml");
  EXPECT_TRUE(matches_reference(one.rows, cp2, 1e-5));
}

// gpt-tiny, byte 32 (a space) ends a document and the prediction made from it is dropped.
const std::vector<std::string> kEodMask{"data.eod_token=32", "data.eod_mask_loss=true", "training.threads=1"};

TEST(LossMask, EodMaskUnderContextParallelism) {
  std::vector<std::string> one = kEodMask, cp2 = kEodMask;
  one.push_back("training.micro_batch_size=16");
  cp2.insert(cp2.end(), {"parallel.cp=2", "training.micro_batch_size=2"});
  const TrainRun ref = train("eod-ref", 1, one, "configs/gpt-tiny.toml");
  ASSERT_TRUE(completed(ref));
  EXPECT_FALSE(matches_reference(cached_reference().rows, ref, 1e-5));  // the mask is applied
  const TrainRun run = train("eod-cp2", 2, cp2, "configs/gpt-tiny.toml");
  EXPECT_TRUE(matches_reference(ref.rows, run, 1e-5));
}

}  // namespace
}  // namespace trident::testing
