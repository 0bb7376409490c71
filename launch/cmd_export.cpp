// `trident export --checkpoint DIR --format hf-gpt2|hf-llama|hf-mixtral|hf-qwen2-moe|hf-qwen3-moe|hf-deepseek-v3 --out DIR [--shard-mb N]`
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>

#include <boost/program_options.hpp>

#include "launch/commands.h"
#include "launch/options.h"

#ifdef TRIDENT_HAVE_TORCH
#include "models/registry.h"
#endif

namespace po = boost::program_options;

namespace trident::cli {

int cmd_export(int argc, char** argv) {
  po::options_description opts(
      "usage: trident export --checkpoint DIR --format hf-gpt2|hf-llama|hf-mixtral|hf-qwen2-moe|hf-qwen3-moe|hf-deepseek-v3 --out DIR [--shard-mb N]\n\n"
      "Writes the model of a Trident checkpoint (saved under any layout; DIR is the checkpoint directory,\n"
      "whose `latest` is followed, or one step-XXXXXXXX directory) as a Hugging Face model directory:\n"
      "OUT/config.json and OUT/model.safetensors, without vocabulary padding. hf-gpt2 (model.arch = gpt):\n"
      "GPT2LMHeadModel's layout (wte, wpe, h.{i}.*, ln_f; Conv1D weights stored (in, out)). hf-llama\n"
      "(model.arch = llama): LlamaForCausalLM's (model.embed_tokens, model.layers.{i}.*, model.norm,\n"
      "lm_head); hf-mixtral (model.arch = mixtral): MixtralForCausalLM's, the same with\n"
      "model.layers.{i}.block_sparse_moe.{gate, experts.{e}.w1/w2/w3}; hf-qwen2-moe, hf-qwen3-moe: Qwen2MoeForCausalLM's\n"
      "and Qwen3MoeForCausalLM's (mlp.{gate, experts.{e}.*_proj, shared_expert.*}); hf-deepseek-v3: DeepseekV3ForCausalLM's\n"
      "(self_attn.{q_a_proj, kv_a_proj_with_mqa, ...}, mlp.{gate, experts.{e}.*_proj, shared_experts.*}); --shard-mb N (all but hf-gpt2)\n"
      "splits the weights into files of about N MiB listed in\n"
      "model.safetensors.index.json. `trident eval/generate --init-from OUT` and model.init_from read it.\n\noptions");
  std::string checkpoint, format, out;
  int64_t shard_mb = 0;
  opts.add_options()("help,h", "show this help")("checkpoint", po::value(&checkpoint), "checkpoint directory")(
      "format", po::value(&format), "export format: hf-gpt2 | hf-llama | hf-mixtral | hf-qwen2-moe | hf-qwen3-moe | hf-deepseek-v3")("out", po::value(&out), "output directory")(
      "shard-mb", po::value(&shard_mb), "the Llama-decoder formats: shard the weights into files of about N MiB (0: one file)");
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm)) return 0;
  if (checkpoint.empty() || out.empty() || format.empty())
    throw BadInput("--checkpoint DIR, --format hf-gpt2|hf-llama|hf-mixtral|hf-qwen2-moe|hf-qwen3-moe|hf-deepseek-v3 and --out DIR are required (see trident export --help)");
  if (format != "hf-gpt2" && format != "hf-llama" && format != "hf-mixtral" && format != "hf-qwen2-moe" &&
      format != "hf-qwen3-moe" && format != "hf-deepseek-v3")
    throw BadInput("--format " + format +
                   ": expected hf-gpt2, hf-llama, hf-mixtral, hf-qwen2-moe, hf-qwen3-moe or hf-deepseek-v3");
  if (shard_mb < 0) throw BadInput("--shard-mb " + std::to_string(shard_mb) + ": expected >= 0");
  // The export makes OUT a folder; a file there is the user's to move, said before any work.
  if (std::filesystem::exists(out) && !std::filesystem::is_directory(out))
    throw BadInput("--out '" + out + "' is a file: expected a directory (or a path that does not exist yet) to write "
                   "config.json and the weights into");
#ifdef TRIDENT_HAVE_TORCH
  const int n = export_checkpoint(checkpoint, format, out, shard_mb << 20);
  std::cout << "wrote " << out << (shard_mb > 0 ? "/model-*.safetensors" : "/model.safetensors") << " (" << n
            << " tensors) and " << out << "/config.json\n";
  return 0;
#else
  throw std::runtime_error("this build of trident has no libtorch (configured with TRIDENT_WITH_TORCH=OFF)");
#endif
}

}  // namespace trident::cli
