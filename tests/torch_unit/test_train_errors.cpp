// Bad inputs to `trident train` fail fast with a message naming the problem.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/run_helpers.h"

namespace trident {
namespace {

testing::RunResult train(const std::string& args) {
  return testing::run_command(testing::bin("trident") + " train --config " + testing::src("configs/gpt-tiny.toml") +
                              " --set logging.dir=" + ::testing::TempDir() + "trident_err " + args);
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
  EXPECT_NE(r.status, 0);
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
  const std::string dir = ::testing::TempDir() + "trident_magic";
  testing::run_command("mkdir -p " + dir);
  std::ofstream(dir + "/x.train.bin") << std::string(512, 'z');
  expect_error("--set data.source=file --set data.path=" + dir + "/x", "magic");
}

TEST(TrainErrors, WorldSizeMismatch) {
  auto r = testing::run_command(testing::bin("trident") + " launch --nproc-per-node 2 -- " + testing::bin("trident") +
                                " train --config " + testing::src("configs/gpt-tiny.toml") +
                                " --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("WORLD_SIZE = 2"), std::string::npos) << r.output;
}

TEST(TrainErrors, ScheduleNeedsMoreMicroBatches) {
  // 4 / 2 = 2 micro-batches; interleaved at pp 3 needs m >= 3.
  auto r = testing::run_command(testing::bin("trident") + " launch --nproc-per-node 3 -- " + testing::bin("trident") +
                                " train --config " + testing::src("configs/gpt-tiny.toml") +
                                " --set model.layers=6 --set parallel.pp=3 --set schedule.kind=interleaved"
                                " --set schedule.chunks=2 --set training.global_batch_size=4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("needs at least as many microbatches as stages (m >= p)"), std::string::npos) << r.output;
}

TEST(TrainErrors, DivergenceStopsWithANamedStep) {
  expect_error("--set training.steps=5 --set training.lr=1e30 --set training.min_lr=1e29",
               "step 2: the gradient norm is");
}

}  // namespace
}  // namespace trident
