// Packed documents (NOTE [packed documents] in models/common/document_attention.h):
// gpt-tiny, llama-tiny, mixtral-tiny and deepseek-v3-tiny (latent attention) trained with
// data.reset_attention_mask and data.reset_position_ids on byte data whose spaces end the
// documents log, for 20 steps, the same losses and grad norms under every layout as in one
// process, context parallelism's three kinds and NCCL's rules included (the one process
// itself held to each document run alone by tests/torch_unit/test_document_attention.cpp);
// and differ from the undivided run, so the keys are read. Samples of one document each
// under cp are the plain cp run bit for bit; cp2 holds at most 0.6 of one process's
// activations at seq 256.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "regression_util.h"

namespace trident::testing {
namespace {

// Byte 32 (a space) ends a document: synthetic byte data holds a few per sample.
const std::vector<std::string> kDocuments{"data.eod_token=32", "data.reset_attention_mask=true",
                                          "data.reset_position_ids=true"};

std::vector<std::string> with(std::vector<std::string> sets) {
  sets.insert(sets.begin(), kDocuments.begin(), kDocuments.end());
  return sets;
}

const TrainRun& packed_reference(const std::string& config) {
  static std::map<std::string, TrainRun> runs;  // NOTE [reference cache]
  if (!runs.count(config)) runs[config] = cached_run(1, kDocuments, config).run;
  return runs.at(config);
}

TEST(PackedDocuments, DifferFromTheUndividedRun) {
  const TrainRun& packed = packed_reference("configs/gpt-tiny.toml");
  ASSERT_TRUE(completed(packed));
  EXPECT_FALSE(matches_reference(cached_reference().rows, packed, 1e-5));
}

struct Layout {
  const char* name;
  int nproc;
  std::vector<std::string> sets;
};

void PrintTo(const Layout& layout, std::ostream* os) { *os << layout.name; }

class PackedLayout : public ::testing::TestWithParam<std::tuple<std::string, Layout>> {};

TEST_P(PackedLayout, MatchesOneProcess) {
  const auto& [config, layout] = GetParam();
  const TrainRun run = cached_run(layout.nproc, with(layout.sets), config).run;
  // Pipelines are bit for bit; TP and DP sum in another order (the undivided rows' bound).
  EXPECT_TRUE(matches_reference(packed_reference(config).rows, run, 1e-5)) << layout.name;
}

const Layout kLayouts[] = {
    {"pp2_interleaved", 2, {"parallel.pp=2", "schedule.kind=interleaved", "schedule.chunks=2"}},
    {"pp2_zbv_selective", 2, {"parallel.pp=2", "schedule.kind=zb-v", "schedule.chunks=2", "training.recompute=selective"}},
    {"tp2_sp", 2, {"parallel.tp=2", "parallel.sequence_parallel=true"}},
    {"dp2_zero1", 2, {"parallel.dp=2", "parallel.zero=1"}},
    {"dp2_ep2", 2, {"parallel.dp=2", "parallel.ep=2"}},
    // NOTE [documents under context parallelism]: each kind, and the ring at cp 4, whose
    // chunks of 4 tokens put document boundaries on chunk edges and documents across ranks.
    {"cp2_p2p", 2, {"parallel.cp=2"}},
    {"cp2_all_gather", 2, {"parallel.cp=2", "parallel.cp_comm=all_gather"}},
    {"cp2_a2a", 2, {"parallel.cp=2", "parallel.cp_comm=a2a"}},
    {"cp4_p2p", 4, {"parallel.cp=4"}},
    {"cp4_p2p_nccl_rules", 4, {"parallel.cp=4", "parallel.backend=nccl-rules"}},
    {"cp2_all_gather_nccl_rules", 2, {"parallel.cp=2", "parallel.cp_comm=all_gather", "parallel.backend=nccl-rules"}},
    {"cp2_a2a_nccl_rules", 2, {"parallel.cp=2", "parallel.cp_comm=a2a", "parallel.backend=nccl-rules"}},
};

INSTANTIATE_TEST_SUITE_P(Gpt, PackedLayout,
                         ::testing::Combine(::testing::Values(std::string("configs/gpt-tiny.toml")),
                                            ::testing::Values(kLayouts[0], kLayouts[1], kLayouts[2], kLayouts[3], kLayouts[5],
                                                              kLayouts[6], kLayouts[7], kLayouts[8], kLayouts[9],
                                                              kLayouts[10], kLayouts[11])),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });
INSTANTIATE_TEST_SUITE_P(Llama, PackedLayout,
                         ::testing::Combine(::testing::Values(std::string("configs/llama-tiny.toml")),
                                            ::testing::Values(kLayouts[0], kLayouts[2], kLayouts[5], kLayouts[6],
                                                              kLayouts[7], kLayouts[8], kLayouts[9])),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

// The MoE families under expert parallelism; DeepSeek-V3's latent attention under TP.
INSTANTIATE_TEST_SUITE_P(Mixtral, PackedLayout,
                         ::testing::Combine(::testing::Values(std::string("configs/mixtral-tiny.toml")),
                                            ::testing::Values(kLayouts[4])),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });
INSTANTIATE_TEST_SUITE_P(DeepseekV3, PackedLayout,
                         ::testing::Combine(::testing::Values(std::string("configs/deepseek-v3-tiny.toml")),
                                            ::testing::Values(kLayouts[2], kLayouts[4])),
                         [](const auto& info) { return std::string(std::get<1>(info.param).name); });

// Samples that are one document each (byte 255 never occurs in the synthetic stream) take
// the plain context-parallel path: the run is the one without the keys, bit for bit.
TEST(PackedDocuments, OneDocumentPerSampleUnderCp2IsThePlainRunBitForBit) {
  const TrainRun plain = cached_run(2, {"parallel.cp=2"}).run;
  const TrainRun one_document = cached_run(2, {"data.eod_token=255", "data.reset_attention_mask=true",
                                               "data.reset_position_ids=true", "parallel.cp=2"}).run;
  ASSERT_TRUE(completed(plain) && completed(one_document)) << plain.result.output << one_document.result.output;
  EXPECT_TRUE(matches_reference(plain.rows, one_document, 0));
}

// No whole-sequence mask on the context-parallel path (NOTE [documents under context
// parallelism]): at seq 256 a cp2 rank holds at most 0.6 of one process's peak activation
// bytes with the same documents (half the tokens per rank; the spans' products are transient).
TEST(PackedDocuments, Cp2HoldsAtMostSixTenthsOfTheActivations) {
  const auto peak = [](const TrainRun& run) {
    const auto ranks = rank_summaries(run.dir);
    return ranks.empty() ? -1LL : static_cast<long long>(field(ranks[0], "peak_activation_bytes"));
  };
  const TrainRun one = cached_run(1, with({"model.seq_len=256"})).run;
  const TrainRun cp2 = cached_run(2, with({"model.seq_len=256", "parallel.cp=2"})).run;
  ASSERT_TRUE(completed(one) && completed(cp2)) << one.result.output << cp2.result.output;
  const long long a = peak(one), b = peak(cp2);
  std::cout << "peak activation bytes at seq 256 with documents: one process " << a << ", cp2 rank 0 " << b
            << " (" << static_cast<double>(b) / static_cast<double>(a) << ")" << std::endl;
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  EXPECT_LE(b * 10, a * 6);
}

}  // namespace
}  // namespace trident::testing
