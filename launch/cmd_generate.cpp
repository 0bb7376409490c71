// `trident generate (--checkpoint DIR | --init-from HF_DIR) --prompt TEXT [--max-tokens N ...]`
#include <iostream>
#include <stdexcept>
#include <string>

#include <boost/program_options.hpp>

#include "launch/commands.h"
#include "launch/options.h"

#ifdef TRIDENT_HAVE_TORCH
#include "models/inference.h"
#endif

namespace po = boost::program_options;

namespace trident::cli {

int cmd_generate(int argc, char** argv) {
  po::options_description opts(
      "usage: trident generate (--checkpoint DIR | --init-from HF_DIR) --prompt TEXT\n"
      "                        [--max-tokens N] [--temperature T] [--top-k K] [--seed S] [--tokenizer gpt2|byte|hf]\n\n"
      "Prints the continuation of a prompt sampled from a model on one process (CPU). Temperature 0 is\n"
      "greedy; top-k 0 samples from the whole vocabulary. The context is cut to the model's last seq_len\n"
      "tokens. With the gpt2 tokenizer, generation stops at <|endoftext|>.\n\noptions");
  std::string checkpoint, hf, prompt, tokenizer, tokenizer_dir;
  int64_t max_tokens = 50, top_k = 0;
  double temperature = 1.0;
  uint64_t seed = 0;
  opts.add_options()("help,h", "show this help")("checkpoint", po::value(&checkpoint), "Trident checkpoint directory")(
      "init-from", po::value(&hf), "Hugging Face GPT-2 or Llama directory (e.g. from trident export)")(
      "prompt", po::value(&prompt), "text to continue")(
      "max-tokens", po::value(&max_tokens)->default_value(50), "tokens to generate")(
      "temperature", po::value(&temperature)->default_value(1.0), "softmax temperature; 0 = greedy")(
      "top-k", po::value(&top_k)->default_value(0), "sample among the K most likely tokens; 0 = all")(
      "seed", po::value(&seed)->default_value(0), "sampling seed")("tokenizer", po::value(&tokenizer), "byte | gpt2 | hf")(
      "tokenizer-dir", po::value(&tokenizer_dir), "folder with encoder.json and vocab.bpe (gpt2) or tokenizer.json (hf)");
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm)) return 0;
  if (!vm.count("prompt")) throw BadInput("--prompt TEXT is required (see trident generate --help)");
  if (max_tokens < 0) throw BadInput("--max-tokens " + std::to_string(max_tokens) + ": expected >= 0");
#ifdef TRIDENT_HAVE_TORCH
  LoadedModel m = load_model(checkpoint, hf);
  const auto tok = model_tokenizer(m, tokenizer, tokenizer_dir);
  std::vector<int64_t> ids;
  for (uint32_t id : tok->encode(prompt)) ids.push_back(id);
  std::optional<int64_t> stop;
  if (auto eot = tok->end_of_text()) stop = *eot;
  std::vector<uint32_t> out;
  for (int64_t id : generate(*m.stage, m.model.seq_len, ids, max_tokens, temperature, top_k, seed, stop))
    out.push_back(static_cast<uint32_t>(id));
  std::cout << tok->decode(out) << "\n";
  return 0;
#else
  (void)checkpoint;
  (void)hf;
  (void)temperature;
  (void)top_k;
  (void)seed;
  throw std::runtime_error("this build of trident has no libtorch (configured with TRIDENT_WITH_TORCH=OFF)");
#endif
}

}  // namespace trident::cli
