// Subcommands of the `trident` executable. Each takes the arguments after its
// name (argv[0] is the subcommand) and returns the process exit status.
#pragma once

namespace trident::cli {

// What a command of the `trident` without libtorch returns when its input held and
// trident-torch must run it (NOTE [checked before libtorch] in launch/main.cpp).
constexpr int kRunWithTorch = -1;

int cmd_launch(int argc, char** argv);    // spawn N ranks with torchrun-style env (launch/launcher.cpp)
int cmd_train(int argc, char** argv);     // train from a TOML config (launch/cmd_train.cpp)
int cmd_schedule(int argc, char** argv);  // generate/validate/simulate/render a pipeline schedule
int cmd_tokenize(int argc, char** argv);  // stdin text -> token ids
int cmd_data(int argc, char** argv);      // `data prepare`: text files -> binary token file
int cmd_compare(int argc, char** argv);   // per-step differences of two runs' metrics.jsonl
int cmd_checkpoint(int argc, char** argv);  // `checkpoint init`: a config's initial model as a checkpoint
int cmd_export(int argc, char** argv);      // checkpoint -> Hugging Face GPT-2 directory
int cmd_eval(int argc, char** argv);        // loss of a text under a checkpoint / HF model
int cmd_generate(int argc, char** argv);    // sample a continuation of a prompt
int cmd_bench(int argc, char** argv);     // `bench bubble|throughput`: measured pipelines
int cmd_plan(int argc, char** argv);      // `plan`: the layout planner (planner/)
int cmd_plan_calibrate(int argc, char** argv);  // `plan calibrate`: this machine's cluster file (libtorch)
int cmd_plan_profile(int argc, char** argv);    // `plan profile`: a model's measured costs for `plan --profile` (libtorch)

}  // namespace trident::cli
