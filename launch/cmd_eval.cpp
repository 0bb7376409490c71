// `trident eval (--checkpoint DIR | --init-from HF_DIR) --text FILE [--tokenizer gpt2|byte]`
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

#include <boost/program_options.hpp>

#include "framework/atomic_file.h"
#include "launch/commands.h"
#include "launch/options.h"

#ifdef TRIDENT_HAVE_TORCH
#include "models/gpt/inference.h"
#endif

namespace po = boost::program_options;

namespace trident::cli {

int cmd_eval(int argc, char** argv) {
  po::options_description opts(
      "usage: trident eval (--checkpoint DIR | --init-from HF_DIR) --text FILE [--tokenizer gpt2|byte]\n\n"
      "Prints `loss=<mean next-token cross-entropy> tokens=<count>` of a text under a model, on one\n"
      "process (CPU). The tokens are cut into windows tokens[k*L : k*L+L+1] (L = the model's seq_len:\n"
      "inputs are the first L, targets the next L; the last window may be shorter), so every token after\n"
      "the first is predicted exactly once. The tokenizer defaults to the one the model records.\n\noptions");
  std::string checkpoint, hf, text, tokenizer, tokenizer_dir;
  opts.add_options()("help,h", "show this help")("checkpoint", po::value(&checkpoint), "Trident checkpoint directory")(
      "init-from", po::value(&hf), "Hugging Face GPT-2 directory (trident export --format hf-gpt2)")(
      "text", po::value(&text), "text file to score")("tokenizer", po::value(&tokenizer), "byte | gpt2")(
      "tokenizer-dir", po::value(&tokenizer_dir), "folder with encoder.json and vocab.bpe (gpt2)");
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm)) return 0;
  if (text.empty()) throw std::runtime_error("--text FILE is required (see trident eval --help)");
#ifdef TRIDENT_HAVE_TORCH
  LoadedGpt m = load_gpt(checkpoint, hf);
  const auto tok = model_tokenizer(m, tokenizer, tokenizer_dir);
  std::vector<int64_t> ids;
  for (uint32_t id : tok->encode(read_file(text))) ids.push_back(id);
  const EvalResult r = evaluate(*m.chunk, m.model.seq_len, ids);
  std::printf("loss=%.6f tokens=%lld\n", r.loss, static_cast<long long>(r.tokens));
  return 0;
#else
  (void)checkpoint;
  (void)hf;
  throw std::runtime_error("this build of trident has no libtorch (configured with TRIDENT_WITH_TORCH=OFF)");
#endif
}

}  // namespace trident::cli
