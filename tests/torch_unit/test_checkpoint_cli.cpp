// The checkpoint commands end to end through the built `trident`: checkpoint
// init -> export -> eval/generate on both the checkpoint and its export (same
// loss, same greedy text), the eval token count by hand, docs/checkpoints.md's commands
// as written, and errors naming the bad file, tensor or flag.
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <fstream>

#include "tests/run_helpers.h"

namespace trident::testing {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string d = bin("test_cli_" + name);
  fs::remove_all(d);
  return d;
}

const std::string kTiny = " --config " + src("configs/gpt-tiny.toml") +
                          " --set model.layers=2 --set model.seq_len=8 --set model.hidden=32 --set model.heads=4";

TEST(CheckpointCli, EvalAndGenerateAgreeOnACheckpointAndItsExport) {
  const std::string ck = fresh_dir("ck"), hf = fresh_dir("hf"), text = bin("test_cli_text.txt");
  std::ofstream(text) << "hello world\n";  // 12 bytes: 11 predicted tokens
  RunResult r = run_command(bin("trident") + " checkpoint init" + kTiny + " --out " + ck);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_command(bin("trident") + " export --checkpoint " + ck + " --format hf-gpt2 --out " + hf);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("model.safetensors (28 tensors)"), std::string::npos) << r.output;
  const RunResult a = run_command(bin("trident") + " eval --checkpoint " + ck + " --text " + text);
  const RunResult b = run_command(bin("trident") + " eval --init-from " + hf + " --text " + text);
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output.find(" tokens=11\n"), std::string::npos) << a.output;
  const double loss = std::stod(a.output.substr(a.output.find("loss=") + 5));
  EXPECT_NEAR(loss, std::log(256.0), 0.1) << "an untrained model is near uniform over 256 bytes";
  const std::string gen = " generate --prompt hello --max-tokens 6 --temperature 0";
  const RunResult ga = run_command(bin("trident") + gen + " --checkpoint " + ck);
  const RunResult gb = run_command(bin("trident") + gen + " --init-from " + hf);
  ASSERT_EQ(ga.status, 0) << ga.output;
  EXPECT_EQ(ga.output, gb.output);
  EXPECT_EQ(ga.output.size(), 7u) << "6 bytes and a newline";
}

TEST(CheckpointCli, Gpt2TokenizerTravelsWithTheExport) {
  const std::string ck = fresh_dir("gpt2_ck"), hf = fresh_dir("gpt2_hf"), text = bin("test_cli_gpt2.txt");
  std::ofstream(text) << "Hello world, hello again";  // GPT-2 BPE: Hello| world|,| hello| again = 5 tokens
  RunResult r = run_command(bin("trident") + " checkpoint init" + kTiny +
                            " --set model.layers=1 --set model.vocab_size=50257 --set data.tokenizer=gpt2 --out " + ck);
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_EQ(run_command(bin("trident") + " export --checkpoint " + ck + " --format hf-gpt2 --out " + hf).status, 0);
  std::ifstream cfg(hf + "/config.json");
  const std::string json((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"tokenizer\": \"gpt2\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"eos_token_id\": 50256"), std::string::npos) << json;
  const RunResult a = run_command(bin("trident") + " eval --checkpoint " + ck + " --text " + text);
  const RunResult b = run_command(bin("trident") + " eval --init-from " + hf + " --text " + text);
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output.find(" tokens=4\n"), std::string::npos) << a.output;
  // The byte tokenizer fits a 50257-token model too, when asked for.
  const RunResult c = run_command(bin("trident") + " eval --init-from " + hf + " --tokenizer byte --text " + text);
  EXPECT_NE(c.output.find(" tokens=23\n"), std::string::npos) << c.output;
}

TEST(CheckpointCli, BadInputIsAnErrorNamingFileTensorOrFlag) {
  const std::string ck = fresh_dir("bad"), text = bin("test_cli_bad.txt");
  std::ofstream(text) << "hello world\n";
  ASSERT_EQ(run_command(bin("trident") + " checkpoint init" + kTiny + " --out " + ck).status, 0);
  RunResult ok = run_command(bin("trident") + " checkpoint show " + ck);
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("step 0, world 1"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("28 tensors, checksums ok"), std::string::npos) << ok.output;
  // Corrupt the last byte of the data file: the last tensor written fails its checksum.
  const std::string data = ck + "/step-00000000/rank-00000.bin";
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  RunResult r = run_command(bin("trident") + " checkpoint show " + ck);
  EXPECT_EQ(r.status, 2);  // bad input: a corrupted checkpoint (NOTE [exit statuses])
  // One error line, not a tensor listing that the error cuts off (issue 30).
  EXPECT_EQ(r.output.find("embedding.word.weight F32 [256, 32] in 1 slice(s)"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find("rank-00000.bin: final_ln.bias fails its checksum"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " eval --checkpoint " + ck + " --text " + text);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("rank-00000.bin: final_ln.bias fails its checksum"), std::string::npos) << r.output;
  fs::resize_file(data, fs::file_size(data) - 100);
  r = run_command(bin("trident") + " export --checkpoint " + ck + " --format hf-gpt2 --out " + ck + "-hf");
  EXPECT_NE(r.output.find("rank-00000.bin is truncated"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " export --checkpoint " + ck + " --format onnx --out x");
  EXPECT_NE(r.output.find("--format onnx: expected hf-gpt2"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " eval --text " + text);
  EXPECT_NE(r.output.find("exactly one of --checkpoint DIR and --init-from HF_DIR"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " eval --init-from " + ck + " --text " + text);
  EXPECT_NE(r.output.find("is not a Hugging Face model: no config.json"), std::string::npos) << r.output;
  r = run_command(bin("trident") + " train" + kTiny + " --set model.init_from=somewhere");
  EXPECT_NE(r.output.find("somewhere is not a Hugging Face model: no config.json"), std::string::npos) << r.output;
}

// model.init_from in `trident train`: starting from the HF export of the
// very weights a run would draw (checkpoint init, same seed) reproduces that
// run bit for bit; starting from another seed's export does not (so the
// weights really come from the directory).
TEST(CheckpointCli, TrainInitFromHfStartsFromItsWeights) {
  const std::string t = bin("trident"), run = " train" + kTiny + " --set training.steps=2 --set logging.progress=false" +
                                             " --set training.peak_tflops=1 --set logging.dir=";
  for (const char* seed : {"1234", "7"}) {
    const std::string ck = fresh_dir(std::string("init_ck") + seed), hf = fresh_dir(std::string("init_hf") + seed);
    ASSERT_EQ(run_command(t + " checkpoint init" + kTiny + " --set training.seed=" + seed + " --out " + ck).status, 0);
    ASSERT_EQ(run_command(t + " export --checkpoint " + ck + " --format hf-gpt2 --out " + hf).status, 0);
  }
  const std::string plain = fresh_dir("init_plain"), same = fresh_dir("init_same"), other = fresh_dir("init_other");
  RunResult r = run_command(t + run + plain);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_command(t + run + same + " --set model.init_from=" + bin("test_cli_init_hf1234"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_command(t + run + other + " --set model.init_from=" + bin("test_cli_init_hf7"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(run_command(t + " compare " + plain + " " + same + " --rtol 0").status, 0);
  EXPECT_NE(run_command(t + " compare " + plain + " " + other + " --rtol 0").status, 0);
}

// The commands of docs/checkpoints.md's "The checkpoint format", as written
// (run from the source folder, `build/trident` being this build's binary).
TEST(CheckpointCli, ReadmeCommandsRun) {
  const std::string t = bin("trident");
  const std::string cd = "cd " + src("") + " && rm -rf runs/ckpt-demo runs/hf-demo && ";
  const char* commands[] = {
      " checkpoint init --config configs/gpt-tiny.toml --out runs/ckpt-demo",
      " checkpoint show runs/ckpt-demo",
      " export --checkpoint runs/ckpt-demo --format hf-gpt2 --out runs/hf-demo",
      " eval --checkpoint runs/ckpt-demo --text configs/gpt-tiny.toml",
      " eval --init-from runs/hf-demo --text configs/gpt-tiny.toml",
      " generate --init-from runs/hf-demo --prompt \"The pipeline\" --max-tokens 4 --temperature 0",
      " generate --checkpoint runs/ckpt-demo --prompt \"The pipeline\" --max-tokens 20 --top-k 5 --seed 1",
  };
  std::string all = cd;
  for (const char* c : commands) all += t + c + " && ";
  all += "true";
  const RunResult r = run_command(all);
  EXPECT_EQ(r.status, 0) << r.output;
  for (const char* help : {" export --help", " eval --help", " generate --help", " checkpoint --help"})
    EXPECT_EQ(run_command(t + help).status, 0) << help;
}

}  // namespace
}  // namespace trident::testing
