// Training checkpoints end to end (framework/checkpointing.h): a run stopped
// by training.exit_after_steps and resumed gives bit-identical per-step losses
// and gradient norms to the run that never stopped; a checkpoint of one layout
// continues under another within the contract's 1e-5; a rank SIGKILLed during
// a save leaves the previous checkpoint loadable and exactly resumable; a
// corrupted file or another model is an error naming file, tensor and shapes.
// Every comparison goes through `trident compare` (its exit status) as a user
// would run it, besides the in-process check that names the first bad step.
#include <stdlib.h>

#include <fstream>

#include "checkpoint/checkpoint_store.h"
#include "regression_util.h"
#include "../multiproc/restart_util.h"

namespace trident::testing {
namespace {

namespace fs = std::filesystem;

// NOTE [resume steps]
// A resume or reshard test trains kResumeSteps steps with a checkpoint after
// step kCheckpointStep, then resumes that checkpoint for the remaining steps.
// What a checkpoint can get wrong shows within three steps of the resume: the
// first resumed step's loss reads the restored weights and data position, its
// gradient norm the restored layout's reduction, the second step's loss the
// update made from the restored moments and learning rate, the third the
// update after that. Four resumed steps of eight cover that, with the LR
// already past its warm-up of 3 at the checkpoint. These tests check the
// checkpoint, not the layouts (the regression matrix holds each layout to the
// contract over kRegressionSteps); the killed-save and async tests below keep
// their own 20-step schedules.
constexpr int kResumeSteps = 8, kCheckpointStep = 4;

// The reshard tests of one pipeline stage (tp, cp, ep, and their way back to one process) run the
// fewest layers and micro-batches (NOTE [rows on the fewest layers] in test_matrix_regression.cpp):
// 2 layers and 2 micro-batches, which hold every kind of tensor and shard the split makes.
const std::vector<std::string> kSmall = {"model.layers=2", "training.global_batch_size=4"};

int compare_status(const std::string& a, const std::string& b, const std::string& rtol) {
  const RunResult r = run_command(bin("trident") + " compare " + a + " " + b + " --rtol " + rtol);
  if (r.status != 0) std::cout << r.output;
  return r.status;
}

// The resumed run's steps kCheckpointStep + 1 .. kResumeSteps (all it logged) against the full
// run's, within a relative `rel_tol` (0: the very same doubles).
::testing::AssertionResult resumed_part_matches(const std::string& full_dir, const std::string& run_dir,
                                                double rel_tol) {
  const std::vector<StepRow> full = read_metrics(full_dir + "/metrics.jsonl");
  const std::vector<StepRow> got = read_metrics(run_dir + "/metrics.jsonl");
  if (full.size() != kResumeSteps || got.size() != kResumeSteps - kCheckpointStep)
    return ::testing::AssertionFailure() << full.size() << " full and " << got.size() << " resumed rows";
  const std::vector<StepRow> tail(full.begin() + kCheckpointStep, full.end());
  for (const char* key : {"loss", "grad_norm"})
    if (auto m = steps_match(tail, got, key, rel_tol); !m) return m;
  return ::testing::AssertionSuccess();
}

std::vector<std::string> with(std::vector<std::string> sets, const std::vector<std::string>& more) {
  sets.insert(sets.end(), more.begin(), more.end());
  return sets;
}

// Trains `first` for all kResumeSteps steps with a checkpoint after step kCheckpointStep
// (NOTE [resume steps]), then resumes a copy of that checkpoint under `second` in an empty
// run directory, so its metrics.jsonl holds only what the resumed run computed.
// Checks both ran and that the second computed exactly the steps after the checkpoint
// (CheckpointErrors below resumes in place, with training.exit_after_steps).
// Returns the first run's directory.
std::string branch_and_resume(const TempDir& tmp, int nproc_first, const std::vector<std::string>& first,
                              int nproc_second, const std::vector<std::string>& second,
                              const std::string& config = "configs/gpt-tiny.toml") {
  const TrainRun a = train_tiny(
      tmp.file("full"), nproc_first,
      with(first, {"checkpoint.dir=" + tmp.file("ck"), "checkpoint.interval=" + std::to_string(kCheckpointStep)}),
      config, kResumeSteps);
  EXPECT_TRUE(completed(a, kResumeSteps));
  const std::string step = ckpt::step_dir_name(kCheckpointStep);
  fs::create_directories(tmp.file("ck2"));
  fs::create_directories(tmp.file("run"));
  fs::copy(tmp.file("ck/" + step), tmp.file("ck2/" + step));
  std::ofstream(tmp.file("ck2/latest")) << step << "\n";
  const TrainRun b = train_tiny(tmp.file("run"), nproc_second,
                                with(second, {"checkpoint.dir=" + tmp.file("ck2"), "checkpoint.resume=true"}), config,
                                kResumeSteps);
  EXPECT_EQ(b.result.status, 0) << b.result.output;
  EXPECT_EQ(b.rows.size(), static_cast<size_t>(kResumeSteps - kCheckpointStep))
      << "the resumed run should log only the steps after " << kCheckpointStep;
  for (size_t i = 0; i < b.rows.size(); ++i)
    EXPECT_EQ(b.rows[i].at("step"), kCheckpointStep + 1.0 + static_cast<double>(i));
  EXPECT_NE(b.result.output.find("resumed from " + tmp.file("ck2/" + step)), std::string::npos) << b.result.output;
  return tmp.file("full");
}

// branch_and_resume with both layouts on kSmall's 2 layers and 2 micro-batches.
std::string branch_and_resume_small(const TempDir& tmp, int nproc_first, const std::vector<std::string>& first,
                                    int nproc_second, const std::vector<std::string>& second,
                                    const std::string& config) {
  return branch_and_resume(tmp, nproc_first, with(first, kSmall), nproc_second, with(second, kSmall), config);
}

// ---- exact resume: same layout, bit for bit ----------------------------------

void exact_resume(const std::string& tag, int nproc, const std::vector<std::string>& layout) {
  TempDir tmp(tag);
  const std::string full = branch_and_resume(tmp, nproc, layout, nproc, layout);
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 0));
}

TEST(CheckpointResume, OneFOneBPipelineWithDpIsBitExact) {
  exact_resume("resume-1f1b", 4, {"parallel.pp=2", "parallel.dp=2", "schedule.kind=1f1b"});
}

TEST(CheckpointResume, InterleavedWithZeroIsBitExact) {
  exact_resume("resume-interleaved", 4, {"parallel.pp=2", "parallel.dp=2", "parallel.zero=1",
                                         "schedule.kind=interleaved", "schedule.chunks=2"});
}

// Under the V placement rank 0 holds the first and the last stage (and both
// copies of the tied embedding): its checkpoint names the same global tensors.
TEST(CheckpointResume, ZbVWithDpIsBitExact) {
  exact_resume("resume-zbv", 4, {"parallel.pp=2", "parallel.dp=2", "schedule.kind=zb-v", "schedule.chunks=2"});
}

// A blend (data.paths, NOTE [blended sample order]): the data position is a
// function of (seed, step), so the resumed run, which starts its blend after
// the checkpoint's step, reads exactly the micro-batches of the run that never stopped.
// Two token files of the repository's Markdown (bytes), for blends.
std::pair<std::string, std::string> blend_datasets(const TempDir& data) {
  const std::string a = data.file("readmes"), b = data.file("pages");
  for (const auto& [prefix, inputs] :
       {std::pair{a, src("README.md") + " " + src("configs/README.md")},
        std::pair{b, src("ARCHITECTURE.md") + " " + src("datasets/README.md")}}) {
    const RunResult r =
        run_command(bin("trident") + " data prepare --val-fraction 0 --input " + inputs + " --output " + prefix);
    EXPECT_EQ(r.status, 0) << r.output;
  }
  return {a, b};
}

std::string blend_of(const std::pair<std::string, std::string>& ab) {
  return "data.paths=[[3, \"" + ab.first + "\"], [1, \"" + ab.second + "\"]]";
}

TEST(CheckpointResume, BlendWithDpIsBitExact) {
  TempDir data("resume-blend-data");
  exact_resume("resume-blend", 2, {"parallel.dp=2", "data.source=file", blend_of(blend_datasets(data))});
}

// Megatron's order (data.order = "megatron", the default on Megatron data; NOTE
// [Megatron GPT samples]) over a blend of two Megatron datasets at dp = 2: the
// checkpoint records the samples consumed (NOTE [consumed samples]) and the
// resumed run reads on from there, the very micro-batches of the run that never stopped.
TEST(CheckpointResume, MegatronOrderBlendWithDpIsBitExact) {
  TempDir data("resume-megatron-data");
  const std::string a = data.file("readmes"), b = data.file("pages");
  for (const auto& [prefix, inputs] :
       {std::pair{a, src("README.md") + " " + src("configs/README.md") + " " + src("launch/README.md")},
        std::pair{b, src("ARCHITECTURE.md") + " " + src("datasets/README.md")}}) {
    const RunResult r = run_command(bin("trident") + " data prepare --output-format megatron --input " + inputs +
                                    " --output " + prefix);
    ASSERT_EQ(r.status, 0) << r.output;
  }
  exact_resume("resume-megatron", 2,
               {"parallel.dp=2", "data.source=file", "data.format=megatron",
                "data.paths=[[3, \"" + a + "\"], [1, \"" + b + "\"]]"});
}

// The same blend under pp = 2 reads the same micro-batches: pipeline parallelism
// alone changes no arithmetic, so the losses are the very same doubles.
TEST(CheckpointResume, BlendIsTheSameUnderEveryLayout) {
  TempDir data("blend-layouts");
  const std::string blend = blend_of(blend_datasets(data));
  const TrainRun one = train_tiny(data.file("pp1"), 1, {"data.source=file", blend});
  const TrainRun two = train_tiny(data.file("pp2"), 2, {"data.source=file", blend, "parallel.pp=2"});
  ASSERT_TRUE(completed(one)) << one.result.output;
  ASSERT_TRUE(completed(two)) << two.result.output;
  EXPECT_EQ(compare_status(data.file("pp1"), data.file("pp2"), "0"), 0);
}

// ---- reshard: saved under one layout, resumed under another -------------------

void reshard(const std::string& tag, int nproc_from, const std::vector<std::string>& from, int nproc_to,
             const std::vector<std::string>& to) {
  TempDir tmp(tag);
  const std::string full = branch_and_resume(tmp, nproc_from, from, nproc_to, to);  // full: kept its layout
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 1e-5));
}

TEST(CheckpointReshard, Tp2ToTp1) {
  reshard("reshard-tp", 2, with({"parallel.tp=2"}, kSmall), 1, with({"parallel.tp=1"}, kSmall));
}

// docs/checkpoints.md's resume demo: saved by one process, resumed under tp = 2.
TEST(CheckpointReshard, Tp1ToTp2) {
  reshard("reshard-tp12", 1, with({"parallel.tp=1"}, kSmall), 2, with({"parallel.tp=2"}, kSmall));
}

TEST(CheckpointReshard, Pp4ToPp2WithUnevenLayers) {
  reshard("reshard-pp", 4, {"parallel.pp=4"}, 2, {"parallel.pp=2", "parallel.pipeline_layers=[3, 5]"});
}

TEST(CheckpointReshard, Dp2WithZeroToDp1) {
  reshard("reshard-dp", 2, {"parallel.dp=2", "parallel.zero=1"}, 1, {"parallel.dp=1"});
}

TEST(CheckpointReshard, Chunks2ToChunks1) {
  reshard("reshard-chunks", 2, {"parallel.pp=2", "schedule.kind=interleaved", "schedule.chunks=2"}, 2,
          {"parallel.pp=2", "schedule.kind=1f1b", "schedule.chunks=1"});
}

// From the V placement (rank 1 holds stages 1 and 2) to the loop placement of
// pp 4 (each rank one stage): pure pipeline parallelism on both sides, so no
// arithmetic changes and the losses stay bit-identical.
TEST(CheckpointReshard, DualPipeVToPp4Gpipe) {
  TempDir tmp("reshard-v");
  const std::string full =
      branch_and_resume(tmp, 2, {"parallel.pp=2", "schedule.kind=dualpipev", "schedule.chunks=2"}, 4,
                        {"parallel.pp=4", "schedule.kind=gpipe", "schedule.chunks=1"});
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 0));
}

// Llama (untied head on the last stage, grouped-query attention): exact
// resume under the V placement with ZeRO-1, and a checkpoint of tp 2 with
// sequence parallelism (k/v heads split) resumed as pp 2.
TEST(CheckpointResume, LlamaZbVWithZeroIsBitExact) {
  TempDir tmp("resume-llama");
  const std::vector<std::string> layout = {"parallel.pp=2", "parallel.dp=2", "parallel.zero=1", "schedule.kind=zb-v"};
  const std::string full = branch_and_resume(tmp, 4, layout, 4, layout, "configs/llama-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 0));
}

TEST(CheckpointReshard, LlamaTp2SequenceParallelToPp2) {
  TempDir tmp("reshard-llama");
  const std::string full = branch_and_resume_small(tmp, 2, {"parallel.tp=2", "parallel.sequence_parallel=true"}, 2,
                                                   {"parallel.pp=2"}, "configs/llama-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 1e-5));
}

// The MoE families: the experts (one tensor per projection, experts first) and
// the router resume exactly under a split-backward pipeline with ZeRO-1, and a
// checkpoint of a dp2 x pp2 layout resumes on one process (the balancing
// losses, which join each layer's backward, come back with their layers).
TEST(CheckpointResume, MixtralZbVWithZeroIsBitExact) {
  TempDir tmp("resume-mixtral");
  const std::vector<std::string> layout = {"parallel.pp=2", "parallel.dp=2", "parallel.zero=1", "schedule.kind=zb-v"};
  const std::string full = branch_and_resume(tmp, 4, layout, 4, layout, "configs/mixtral-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 0));
}

TEST(CheckpointReshard, Qwen2MoeDp2Pp2ToOneProcess) {
  TempDir tmp("reshard-qwen2moe");
  const std::string full = branch_and_resume(tmp, 4, {"parallel.pp=2", "parallel.dp=2", "parallel.zero=1"}, 1,
                                             {"parallel.pp=1", "parallel.dp=1"}, "configs/qwen2-moe-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 1e-5));
}

// DeepSeek-V3: the correction biases, which the loads move every step (NOTE
// [expert bias]), are parameters (NOTE [expert bias]): they come back
// with the checkpoint, so the resumed run routes as the unbroken one, exactly.
TEST(CheckpointResume, DeepseekV3BiasesResumeBitExact) {
  TempDir tmp("resume-deepseek");
  const std::vector<std::string> layout = {"parallel.pp=2", "parallel.dp=2", "parallel.zero=1", "schedule.kind=zb-v"};
  const std::string full = branch_and_resume(tmp, 4, layout, 4, layout, "configs/deepseek-v3-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 0));
}

// Expert parallelism (NOTE [expert grid]): each expert set is written once, by
// the first replica holding it, with its place along the experts' dimension,
// so a checkpoint resumes exactly under its own layout (ZeRO-1's moment shards
// over the expert-data-parallel group included) and under fewer ep ranks:
// ep 4 -> 2 -> 1.
TEST(CheckpointResume, MixtralEp2Pp2WithZeroIsBitExact) {
  TempDir tmp("resume-ep");
  const std::vector<std::string> layout = {"parallel.pp=2", "parallel.dp=2", "parallel.ep=2", "parallel.zero=1",
                                           "schedule.kind=zb-v"};
  const std::string full = branch_and_resume(tmp, 4, layout, 4, layout, "configs/mixtral-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 0));
}

TEST(CheckpointReshard, MixtralEp4ToEp2) {
  TempDir tmp("reshard-ep42");
  const std::string full =
      branch_and_resume(tmp, 4, {"parallel.dp=4", "parallel.ep=4", "parallel.zero=1"}, 2,
                        {"parallel.dp=2", "parallel.ep=2", "parallel.zero=1"}, "configs/mixtral-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 1e-5));
}

TEST(CheckpointReshard, MixtralEp2ToOneProcess) {
  TempDir tmp("reshard-ep21");
  const std::string full = branch_and_resume(tmp, 2, {"parallel.dp=2", "parallel.ep=2"}, 1,
                                             {"parallel.dp=1", "parallel.ep=1"}, "configs/mixtral-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 1e-5));
}

// Under tensor parallelism (NOTE [experts under tensor parallelism]): whole
// experts with the tp ranks folded into ep (etp = 1, each tp rank half the
// experts, ZeRO-1 over the experts' edp) resumed with every expert split over
// tp by its width (etp = tp); DeepSeek-V3 at tp 2 (MLA's heads, the shared
// experts and every routed expert split over tp) resumed on one process.
TEST(CheckpointReshard, MixtralTp2Etp1Ep2ToEtp2) {
  TempDir tmp("reshard-etp");
  const std::string full = branch_and_resume_small(
      tmp, 2, {"parallel.tp=2", "parallel.etp=1", "parallel.ep=2", "parallel.zero=1"}, 2, {"parallel.tp=2"},
      "configs/mixtral-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 1e-5));
}

// NOTE [expert grid]: tp 4 at etp 2 (each expert's width in halves, tp indices t and t + 2
// holding the same half for two token slices, ep 2 over the slices) resumed at tp 2 = etp.
TEST(CheckpointReshard, MixtralTp4Etp2Ep2ToTp2) {
  TempDir tmp("reshard-etp2");
  const std::string full = branch_and_resume_small(tmp, 4, {"parallel.tp=4", "parallel.etp=2", "parallel.ep=2"}, 2,
                                                   {"parallel.tp=2"}, "configs/mixtral-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 1e-5));
}

// NOTE [expert grid]: ep 2 folded over the cp ranks (each holding half the experts, ZeRO-1
// over dp x cp for the dense parameters), resumed on one process: every expert was written once.
TEST(CheckpointReshard, MixtralCp2Ep2ToOneProcess) {
  TempDir tmp("reshard-cp-ep");
  const std::string full = branch_and_resume_small(tmp, 2, {"parallel.cp=2", "parallel.ep=2", "parallel.zero=1"}, 1,
                                                   {"parallel.cp=1"}, "configs/mixtral-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 1e-5));
}

TEST(CheckpointReshard, DeepseekV3Tp2ToOneProcess) {
  TempDir tmp("reshard-deepseek-tp");
  const std::string full = branch_and_resume_small(tmp, 2, {"parallel.tp=2"}, 1, {"parallel.tp=1"},
                                                   "configs/deepseek-v3-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 1e-5));
}

// Context parallelism (NOTE [context grid]): the ranks of a cp group hold the
// same parameters, written once (by dp and cp rank 0); ZeRO-1 shards the
// moments over dp x cp. A checkpoint resumes exactly under its own layout, and
// as cp changes: cp 2 -> 1 and 1 -> 4, within the contract.
TEST(CheckpointResume, LlamaCp2WithZeroIsBitExact) {
  TempDir tmp("resume-cp");
  const std::vector<std::string> layout = with({"parallel.cp=2", "parallel.zero=1"}, kSmall);
  const std::string full = branch_and_resume(tmp, 2, layout, 2, layout, "configs/llama-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 0));
  // Each parameter once: in cp rank 0's index, not in cp rank 1's (its ZeRO-1 moment shards only).
  const auto index = [&](int rank) {
    const std::string step = ckpt::step_dir_name(kCheckpointStep);
    return slurp(tmp.file("ck/" + step + "/rank-0000" + std::to_string(rank) + ".json"));
  };
  for (const char* name : {"embedding.word.weight", "layers.0.attn.q.weight", "final_norm.weight"}) {
    const std::string entry = std::string("\"name\": \"") + name + "\"";
    EXPECT_NE(index(0).find(entry), std::string::npos) << name;
    EXPECT_EQ(index(1).find(entry), std::string::npos) << name << " written by cp rank 1 too";
  }
}

TEST(CheckpointReshard, LlamaCp2ToOneProcess) {
  TempDir tmp("reshard-cp21");
  const std::string full = branch_and_resume_small(tmp, 2, {"parallel.cp=2", "parallel.zero=1"}, 1, {"parallel.cp=1"},
                                                   "configs/llama-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 1e-5));
}

TEST(CheckpointReshard, LlamaOneProcessToCp4) {
  TempDir tmp("reshard-cp14");
  const std::string full = branch_and_resume_small(tmp, 1, {"parallel.cp=1"}, 4,
                                                   {"parallel.cp=4", "parallel.cp_comm=all_gather"},
                                                   "configs/llama-tiny.toml");
  EXPECT_TRUE(resumed_part_matches(full, tmp.file("run"), 1e-5));
}

// ---- a rank killed during a save ----------------------------------------------

// Rank 1 writes its whole shard of step 10, then dies before the commit (on the
// writer thread with checkpoint.async): step 5 stays the newest complete
// checkpoint, and the resumed run ends as the run that never failed.
void killed_during_save(const std::string& tag, const std::vector<std::string>& save_sets) {
  const std::vector<std::string> layout{"parallel.dp=2", "parallel.zero=1"};
  const CachedRun full = cached_run(2, layout);
  ASSERT_TRUE(completed(full.run));
  TempDir tmp(tag);
  const std::vector<std::string> ck = with({"checkpoint.dir=" + tmp.file("ck"), "checkpoint.interval=5"}, save_sets);
  setenv("TRIDENT_SAVE_FAULT", "rank=1,step=10", 1);
  const TrainRun killed = train_tiny(tmp.file("run"), 2, with(layout, ck));
  unsetenv("TRIDENT_SAVE_FAULT");
  EXPECT_NE(killed.result.status, 0) << killed.result.output;
  EXPECT_NE(killed.result.output.find("killed by signal 9"), std::string::npos) << killed.result.output;
  EXPECT_EQ(slurp(tmp.file("ck/latest")), "step-00000005\n");
  EXPECT_TRUE(fs::exists(tmp.file("ck/step-00000010/rank-00001.json"))) << "rank 1 finished its shard";
  EXPECT_FALSE(fs::exists(tmp.file("ck/step-00000010/manifest.json"))) << "but nothing committed step 10";

  const TrainRun resumed = train_tiny(tmp.file("run"), 2, with(layout, with(ck, {"checkpoint.resume=true"})));
  ASSERT_TRUE(completed(resumed)) << resumed.result.output;
  EXPECT_NE(resumed.result.output.find("resumed from " + tmp.file("ck/step-00000005")), std::string::npos)
      << resumed.result.output;
  EXPECT_TRUE(matches_reference(full.run.rows, resumed, 0));
  EXPECT_EQ(compare_status(full.dir, tmp.file("run"), "0"), 0);
  // checkpoint.keep = 2: steps 15 and 20 remain, and the torn step 10 was replaced and pruned.
  std::vector<std::string> steps;
  for (const auto& d : fs::directory_iterator(tmp.file("ck")))
    if (d.is_directory()) steps.push_back(d.path().filename().string());
  std::sort(steps.begin(), steps.end());
  EXPECT_EQ(steps, (std::vector<std::string>{"step-00000015", "step-00000020"}));
}

TEST(CheckpointFaults, RankKilledDuringSaveLeavesThePreviousCheckpointAndResumesExactly) {
  killed_during_save("kill-save", {});
}

TEST(CheckpointFaults, RankKilledDuringAsyncSaveLeavesThePreviousCheckpointAndResumesExactly) {
  killed_during_save("kill-async-save", {"checkpoint.async=true"});
}

// ---- asynchronous saves (NOTE [asynchronous checkpoints]) -----------------------

// The writer waits 400 ms before it writes, so training is steps further on by
// then: a "copy" that shares the live tensors would write a later step's state,
// and the checkpoints would differ from the synchronous run's.
TEST(CheckpointAsync, WrittenBehindTrainingAndEqualToSynchronousSaves) {
  const std::vector<std::string> layout{"parallel.dp=2", "parallel.zero=1"};
  TempDir tmp("async-save");
  const auto ck = [&](const std::string& d) {
    return with(layout, {"checkpoint.dir=" + tmp.file(d), "checkpoint.interval=5", "checkpoint.keep=4"});
  };
  const TrainRun sync = train_tiny(tmp.file("sync-run"), 2, ck("sync"));
  ASSERT_TRUE(completed(sync)) << sync.result.output;
  setenv("TRIDENT_ASYNC_SAVE_DELAY_MS", "400", 1);
  const TrainRun async = train_tiny(tmp.file("async-run"), 2, with(ck("async"), {"checkpoint.async=true"}));
  unsetenv("TRIDENT_ASYNC_SAVE_DELAY_MS");
  ASSERT_TRUE(completed(async)) << async.result.output;
  EXPECT_TRUE(matches_reference(sync.rows, async, 0));
  for (const char* step : {"/step-00000005", "/step-00000010", "/step-00000015", "/step-00000020"}) {
    EXPECT_TRUE(fs::exists(tmp.file("async") + step + "/manifest.json")) << step;
    EXPECT_TRUE(same_checkpoint(tmp.file("sync") + step, tmp.file("async") + step, 2)) << step;
  }
  EXPECT_EQ(slurp(tmp.file("async/latest")), "step-00000020\n");
  // Training went on while step 5 was written: step 7 was logged between its copy and its commit.
  const std::string& out = async.result.output;
  const size_t copied = out.find("checkpoint: step 5 copied to host memory"), step7 = out.find("step 7/20 |"),
               saved = out.find("checkpoint: saved step 5 to " + tmp.file("async/step-00000005") + " asynchronously");
  ASSERT_NE(copied, std::string::npos) << out;
  ASSERT_NE(step7, std::string::npos) << out;
  ASSERT_NE(saved, std::string::npos) << out;
  EXPECT_LT(copied, step7) << out;
  EXPECT_LT(step7, saved) << out;
  // The run's last save is synchronous.
  EXPECT_NE(out.find("checkpoint: saved step 20 to " + tmp.file("async/step-00000020") + " in "), std::string::npos)
      << out;
}

// ---- errors ---------------------------------------------------------------------

TEST(CheckpointErrors, ExitAfterStepsResumesInPlaceAndBadCheckpointsAreErrors) {
  const CachedRun reference = cached_run(1, {});
  ASSERT_TRUE(completed(reference.run));
  TempDir tmp("ckpt-errors");
  const std::string ck = "checkpoint.dir=" + tmp.file("ck");
  const TrainRun first = train_tiny(tmp.file("run"), 1, {ck, "training.exit_after_steps=2"});
  ASSERT_EQ(first.result.status, 0) << first.result.output;
  EXPECT_EQ(first.rows.size(), 2u);
  EXPECT_NE(first.result.output.find("stopping after step 2 of 20"), std::string::npos) << first.result.output;
  EXPECT_EQ(slurp(tmp.file("ck/latest")), "step-00000002\n");

  // A fresh run must not silently interleave its saves with the ones there.
  TrainRun r = train_tiny(tmp.file("run2"), 1, {ck});
  EXPECT_NE(r.result.status, 0);
  EXPECT_NE(r.result.output.find("already holds a checkpoint (step-00000002) with checkpoint.resume = false: expected "
                                    "checkpoint.resume = true"),
            std::string::npos)
      << r.result.output;

  // Another model: names the key, and a tensor with both shapes.
  r = train_tiny(tmp.file("run2"), 1, {ck, "checkpoint.resume=true", "model.hidden=32", "model.heads=4"});
  EXPECT_NE(r.result.status, 0);
  EXPECT_NE(r.result.output.find("holds another model: model.hidden: 64 in the checkpoint, 32 in the config"),
            std::string::npos)
      << r.result.output;
  EXPECT_NE(r.result.output.find("tensor embedding.word.weight is [256, 64] in the checkpoint but [256, 32] in this "
                                 "model"),
            std::string::npos)
      << r.result.output;

  // A missing tensor: `checkpoint init` writes weights only, no optimizer state.
  const std::string init_ck = tmp.file("init-ck");
  ASSERT_EQ(run_command(bin("trident") + " checkpoint init --config " + src("configs/gpt-tiny.toml") + " --out " +
                        init_ck).status,
            0);
  r = train_tiny(tmp.file("run2"), 1, {"checkpoint.dir=" + init_ck, "checkpoint.resume=true"});
  EXPECT_NE(r.result.status, 0);
  EXPECT_NE(r.result.output.find("step-00000000 has no tensor optim.exp_avg."), std::string::npos) << r.result.output;

  // The same command with resume on continues in place: 20 rows, bit for bit the uninterrupted run's.
  const TrainRun resumed = train_tiny(tmp.file("run"), 1, {ck, "checkpoint.resume=true"});
  EXPECT_TRUE(matches_reference(reference.run.rows, resumed, 0));
  EXPECT_EQ(compare_status(reference.dir, tmp.file("run"), "0"), 0);
  EXPECT_EQ(slurp(tmp.file("ck/latest")), "step-00000020\n");

  // One flipped byte inside the word embedding's bytes (offset from the index).
  const std::string index = slurp(tmp.file("ck/step-00000020/rank-00000.json"));
  int64_t offset = -1;
  const json::Value doc = json::parse(index, "rank-00000.json");
  for (const json::Value& e : json::as_array(json::at(doc, "entries", "the index"), "entries"))
    if (json::as_string(json::at(e, "name", "an entry"), "name") == "embedding.word.weight")
      offset = json::as_int(json::at(e, "byte_offset", "an entry"), "byte_offset");
  ASSERT_GE(offset, 0) << index.substr(0, 400);
  const std::string bin_file = tmp.file("ck/step-00000020/rank-00000.bin");
  {
    std::fstream f(bin_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(offset + 100);
    const char c = static_cast<char>(f.get());
    f.seekp(offset + 100);
    f.put(static_cast<char>(c ^ 0x40));
  }
  r = train_tiny(tmp.file("run3"), 1, {ck, "checkpoint.resume=true"});
  EXPECT_NE(r.result.status, 0);
  EXPECT_NE(r.result.output.find(bin_file + ": embedding.word.weight fails its checksum"), std::string::npos)
      << r.result.output;
}

}  // namespace
}  // namespace trident::testing
