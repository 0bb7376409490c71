// `trident eval (--checkpoint DIR | --init-from HF_DIR) --text FILE [--tokenizer gpt2|byte|hf] [--logits OUT]`
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "core/atomic_file.h"
#include "checkpoint/safetensors.h"
#include "launch/commands.h"
#include "launch/options.h"

#ifdef TRIDENT_HAVE_TORCH
#include <ATen/ATen.h>

#include "models/inference.h"
#endif

namespace po = boost::program_options;

namespace trident::cli {

int cmd_eval(int argc, char** argv) {
  po::options_description opts(
      "usage: trident eval (--checkpoint DIR | --init-from HF_DIR) --text FILE [--tokenizer gpt2|byte|hf]\n"
      "                    [--logits OUT.safetensors]\n\n"
      "Prints `loss=<mean next-token cross-entropy> tokens=<count>` of a text under a model, on one\n"
      "process (CPU). The tokens are cut into windows tokens[k*L : k*L+L+1] (L = the model's seq_len:\n"
      "inputs are the first L, targets the next L; the last window may be shorter), so every token after\n"
      "the first is predicted exactly once. The tokenizer defaults to the one the model records.\n"
      "--logits writes the first window's fp32 logits (L, vocab_size: padding columns left out) as the\n"
      "tensor `logits` of a safetensors file, with its input ids as `ids` (I64), for other libraries to\n"
      "compare against.\n\noptions");
  std::string checkpoint, hf, text, tokenizer, tokenizer_dir, logits_out;
  opts.add_options()("help,h", "show this help")("checkpoint", po::value(&checkpoint), "Trident checkpoint directory")(
      "init-from", po::value(&hf), "Hugging Face GPT-2 or Llama directory (e.g. from trident export)")(
      "text", po::value(&text), "text file to score")("tokenizer", po::value(&tokenizer), "byte | gpt2 | hf")(
      "tokenizer-dir", po::value(&tokenizer_dir), "folder with encoder.json and vocab.bpe (gpt2) or tokenizer.json (hf)")(
      "logits", po::value(&logits_out), "also write the first window's logits to this safetensors file");
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm)) return 0;
  if (text.empty()) throw BadInput("--text FILE is required (see trident eval --help)");
  // A missing text is the user's mistake (exit 2), found before the model is read.
  if (std::error_code ec; std::filesystem::is_directory(text, ec) || !std::ifstream(text))
    throw BadInput("--text '" + text + "': cannot read it (" +
                   (std::filesystem::exists(text, ec) ? "not a readable file" : "no such file") + ")");
#ifdef TRIDENT_HAVE_TORCH
  LoadedModel m = load_model(checkpoint, hf);
  const auto tok = model_tokenizer(m, tokenizer, tokenizer_dir);
  std::vector<int64_t> ids;
  for (uint32_t id : tok->encode(read_file(text))) ids.push_back(id);
  const EvalResult r = evaluate(*m.stage, m.model.seq_len, ids);
  std::printf("loss=%.6f tokens=%lld\n", r.loss, static_cast<long long>(r.tokens));
  if (!logits_out.empty()) {
    const int64_t w = std::min<int64_t>(m.model.seq_len, static_cast<int64_t>(ids.size()));
    std::vector<int64_t> window(ids.begin(), ids.begin() + w);
    const at::Tensor lg = m.stage->logits(at::tensor(window, at::kLong).unsqueeze(0)).select(0, 0).to(at::kFloat)
                              .contiguous();  // (w, vocab_size)
    safetensors::Tensor ids_t{"ids", "I64", {w}, std::string(reinterpret_cast<const char*>(window.data()), w * 8)};
    safetensors::write_file(logits_out, {safetensors::from_float("logits", lg.sizes().vec(), lg.data_ptr<float>()),
                                         ids_t});
  }
  return 0;
#else
  (void)checkpoint;
  (void)hf;
  (void)logits_out;
  throw std::runtime_error("this build of trident has no libtorch (configured with TRIDENT_WITH_TORCH=OFF)");
#endif
}

}  // namespace trident::cli
