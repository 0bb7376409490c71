// Document boundaries, positions and loss masks of a sample (NOTE [sample documents]), the
// loss-mask file (NOTE [loss-mask file]) and prompt-completion preparation with packing
// (NOTE [prompt-completion data]). tests/reference/test_megatron_documents.py compares the
// first with megatron-core's GPTDataset; these pin the edges.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "datasets/documents.h"
#include "datasets/errors.h"
#include "datasets/megatron_dataset.h"
#include "datasets/prepare.h"
#include "tests/error_of.h"

namespace td = trident::data;
namespace fs = std::filesystem;
using trident::testing::error_of;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::path(TRIDENT_BINARY_DIR) / ("test_documents.tmp." + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

td::DocumentOptions all_on(int64_t eod) { return {true, true, true, false, eod}; }

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

}  // namespace

TEST(SampleDocuments, EodEndsItsDocumentAndPositionsRestartAfterIt) {
  // inputs 5 9 9 5 5 9 | label 7: eods (9) at inputs 1, 2 and 5; 5 is the last input.
  const std::vector<int64_t> t{5, 9, 9, 5, 5, 9, 7};
  const td::SampleDocuments d = td::sample_documents(t.data(), nullptr, 6, all_on(9));
  EXPECT_EQ(d.position_ids, (std::vector<int64_t>{0, 1, 0, 0, 1, 2}));
  EXPECT_EQ(d.cu_seqlens, (std::vector<int32_t>{0, 2, 3, 6}));  // an eod on the last input ends no document
  EXPECT_EQ(d.loss_mask, (std::vector<float>{1, 0, 0, 1, 1, 0}));
}

TEST(SampleDocuments, EachFlagAlone) {
  const std::vector<int64_t> t{5, 9, 5, 5, 6};
  td::DocumentOptions o{true, false, false, false, 9};
  td::SampleDocuments d = td::sample_documents(t.data(), nullptr, 4, o);
  EXPECT_EQ(d.position_ids, (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(d.cu_seqlens, (std::vector<int32_t>{0, 4}));  // attention not reset: one document
  EXPECT_EQ(d.loss_mask, (std::vector<float>{1, 1, 1, 1}));
  o = {false, true, false, false, 9};
  d = td::sample_documents(t.data(), nullptr, 4, o);
  EXPECT_EQ(d.position_ids, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(d.cu_seqlens, (std::vector<int32_t>{0, 2, 4}));
  o = {false, false, true, false, 9};
  d = td::sample_documents(t.data(), nullptr, 4, o);
  EXPECT_EQ(d.loss_mask, (std::vector<float>{1, 0, 1, 1}));
}

TEST(SampleDocuments, CompletionMaskWeighsTheLabels) {
  // mask bytes of the 5 tokens; loss_mask[j] is mask[j + 1]: the label's.
  const std::vector<int64_t> t{1, 2, 3, 9, 4};
  const std::vector<uint8_t> mask{0, 0, 1, 1, 0};
  td::DocumentOptions o{false, false, true, true, 9};
  const td::SampleDocuments d = td::sample_documents(t.data(), mask.data(), 4, o);
  EXPECT_EQ(d.loss_mask, (std::vector<float>{0, 1, 1, 0}));
}

TEST(LossMaskFile, RoundTripAndMismatch) {
  const fs::path dir = temp_dir("file");
  const std::string prefix = (dir / "ds").string();
  td::write_loss_mask_file(prefix, {0, 1, 1, 0});
  EXPECT_EQ(td::read_loss_mask_file(prefix, 4), (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_NE(error_of<td::DataError>([&] { td::read_loss_mask_file(prefix, 5); })
                .find("holds 4 tokens' masks but " + prefix + ".bin has 5 tokens"),
            std::string::npos);
  td::write_loss_mask_file(prefix, {0, 2});
  EXPECT_NE(error_of<td::DataError>([&] { td::read_loss_mask_file(prefix, 2); }).find("byte 1 is 2"),
            std::string::npos);
  EXPECT_NE(error_of<td::DataError>([&] { td::read_loss_mask_file((dir / "none").string(), 2); })
                .find("cannot read the loss-mask file"),
            std::string::npos);
}

// Prompt-completion preparation of dir/in.jsonl into dir/out (a Megatron dataset), eod id 0.
td::PrepareOptions sft_options(const fs::path& dir) {
  td::PrepareOptions o;
  o.format = "prompt-completion";
  o.output_format = "megatron";
  o.val_fraction = 0;
  o.inputs = {(dir / "in.jsonl").string()};
  o.output_prefix = (dir / "out").string();
  o.eod_token = 0;
  return o;
}

TEST(PromptCompletion, PacksWithoutSplittingAndPadsWithTheEod) {
  const fs::path dir = temp_dir("pack");
  // byte ids: "ab"+"c" is 4 with its eod, "d"+"ef" 4, "ghi" (text) 4, "" + "jk" 3.
  write_text(dir / "in.jsonl",
             "{\"prompt\": \"ab\", \"completion\": \"c\"}\n{\"prompt\": \"d\", \"completion\": \"ef\"}\n\n"
             "{\"text\": \"ghi\"}\n{\"prompt\": \"\", \"completion\": \"jk\"}\n");
  td::PrepareOptions o = sft_options(dir);
  o.pack_seq_len = 8;  // the first two fill a sequence exactly: they share it
  const td::PrepareSummary s = td::prepare_prompt_completion(o);
  EXPECT_EQ(s.examples, 3u);
  EXPECT_EQ(s.texts, 1u);
  EXPECT_EQ(s.sequences, 2u);   // [abc0 def0] [ghi0 jk0 .]
  EXPECT_EQ(s.pad_tokens, 1u);
  const td::MegatronDataset ds(o.output_prefix);
  ASSERT_EQ(ds.sequence_count(), 2u);
  EXPECT_EQ(ds.sequence(0), (std::vector<uint32_t>{'a', 'b', 'c', 0, 'd', 'e', 'f', 0}));
  EXPECT_EQ(ds.sequence(1), (std::vector<uint32_t>{'g', 'h', 'i', 0, 'j', 'k', 0, 0}));
  EXPECT_EQ(td::read_loss_mask_file(o.output_prefix, 16),
            (std::vector<uint8_t>{0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}));
  o.pack_seq_len = 7;  // abc0 | def0 | ghi0 jk0: the last two fill 7 exactly
  EXPECT_EQ(td::prepare_prompt_completion(o).sequences, 3u);
}

TEST(PromptCompletion, OverlongIsRefusedOrTruncated) {
  const fs::path dir = temp_dir("overlong");
  write_text(dir / "in.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"abc\", \"completion\": \"de\"}\n");
  td::PrepareOptions o = sft_options(dir);
  o.pack_seq_len = 4;
  EXPECT_NE(error_of<td::DataError>([&] { td::prepare_prompt_completion(o); })
                .find("in.jsonl:2: the example's 6 tokens do not fit a packed sequence of 4"),
            std::string::npos);
  o.overlong = "truncate";
  const td::PrepareSummary s = td::prepare_prompt_completion(o);
  EXPECT_EQ(s.truncated, 1u);
  const td::MegatronDataset ds(o.output_prefix);
  EXPECT_EQ(ds.sequence(1), (std::vector<uint32_t>{'a', 'b', 'c', 0}));
}

TEST(PromptCompletion, BadLinesNameTheirLine) {
  const fs::path dir = temp_dir("bad");
  td::PrepareOptions o = sft_options(dir);
  const auto error = [&](const std::string& text) {
    write_text(dir / "in.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n" + text + "\n");
    return error_of<td::DataError>([&] { td::prepare_prompt_completion(o); });
  };
  EXPECT_NE(error("{\"prompt\": \"a\"}").find("in.jsonl:2: has \"prompt\" but no \"completion\""), std::string::npos);
  EXPECT_NE(error("{\"prompt\": \"a\", \"completion\": \"\"}").find("in.jsonl:2: \"completion\" is empty"),
            std::string::npos);
  EXPECT_NE(error("{\"question\": \"a\"}").find("in.jsonl:2: expected an object with \"prompt\""), std::string::npos);
  o.eod_token = -1;
  EXPECT_NE(error("").find("--tokenizer byte has none: give --eod-token ID"), std::string::npos);
}
