// `trident data prepare|text|info`: build token files, show a Brown file's running
// text, print a token file's header.
#include <boost/program_options.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "framework/data/brown.h"
#include "framework/data/prepare.h"
#include "framework/data/token_file.h"
#include "launch/commands.h"

namespace trident::cli {
namespace {

namespace po = boost::program_options;

constexpr const char* kUsage =
    "usage: trident data prepare --tokenizer byte|gpt2|hf [--tokenizer-dir D] --input PATH... --output PREFIX\n"
    "                            [--val-fraction 0.05] [--format text|brown]\n"
    "       trident data text FILE        (running text of a Brown file)\n"
    "       trident data info FILE.bin    (header of a token file)\n";

// Parses options; returns false after printing help.
bool parse(int argc, char** argv, const po::options_description& opts, po::variables_map& vm) {
  po::store(po::parse_command_line(argc, argv, opts), vm);
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return false;
  }
  po::notify(vm);
  return true;
}

int prepare(int argc, char** argv) {
  data::PrepareOptions o;
  po::options_description opts(
      "usage: trident data prepare [options]\n"
      "Tokenizes documents (each input file is one document; a folder is its files sorted\n"
      "by name, Brown document names only with --format brown) and writes PREFIX.train.bin\n"
      "and PREFIX.val.bin. Document i goes to validation iff floor((i+1)f) > floor(if).\n"
      "gpt2 appends id 50256 after every document; byte adds no separator; hf appends its\n"
      "special token <|endoftext|> or <|end_of_text|> when it has one (else nothing) and\n"
      "records the tokenizer as hf:<FNV-1a 64 of tokenizer.json, 16 hex digits>");
  opts.add_options()("help,h", "show this help")(
      "tokenizer", po::value(&o.tokenizer)->default_value("byte"), "byte | gpt2 | hf")(
      "tokenizer-dir", po::value(&o.tokenizer_dir),
      "gpt2 vocabulary folder (default: see `trident tokenize --help`); hf: the folder of tokenizer.json (required)")(
      "input", po::value(&o.inputs)->multitoken()->required(), "input files and/or folders")(
      "output", po::value(&o.output_prefix)->required(), "output prefix")(
      "val-fraction", po::value(&o.val_fraction)->default_value(0.05), "share of documents for validation")(
      "format", po::value(&o.format)->default_value("text"), "text | brown (tagged Brown corpus files)");
  po::variables_map vm;
  if (!parse(argc, argv, opts, vm)) return 0;
  const auto s = data::prepare_token_files(o);
  std::printf("prepared %llu documents (%llu bytes of text) with tokenizer %s\n",
              static_cast<unsigned long long>(s.train_docs + s.val_docs),
              static_cast<unsigned long long>(s.text_bytes), o.tokenizer.c_str());
  std::printf("  train: %llu docs, %llu tokens -> %s\n", static_cast<unsigned long long>(s.train_docs),
              static_cast<unsigned long long>(s.train_tokens), s.files_written.at(0).c_str());
  std::printf("  val:   %llu docs, %llu tokens -> %s\n", static_cast<unsigned long long>(s.val_docs),
              static_cast<unsigned long long>(s.val_tokens), s.files_written.at(1).c_str());
  return 0;
}

int text(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << "usage: trident data text FILE\nPrints the running text of a tagged Brown corpus file.\n";
    return argc == 2 ? 0 : 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) throw std::runtime_error(std::string("cannot read ") + argv[1]);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::cout << data::brown_to_text(ss.str());
  return 0;
}

int info(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << "usage: trident data info FILE.bin\nChecks a token file and prints its header.\n";
    return argc == 2 ? 0 : 2;
  }
  const data::TokenFile f(argv[1]);
  const auto& h = f.info();
  std::printf("%s: version %u, %u bytes/token, %llu tokens, %llu documents, tokenizer %s, vocab %u\n", argv[1],
              h.version, h.dtype_bytes, static_cast<unsigned long long>(h.token_count),
              static_cast<unsigned long long>(h.doc_count), h.tokenizer.c_str(), h.vocab_size);
  return 0;
}

}  // namespace

int cmd_data(int argc, char** argv) {
  const std::string sub = argc >= 2 ? argv[1] : "";
  if (sub == "prepare") return prepare(argc - 1, argv + 1);
  if (sub == "text") return text(argc - 1, argv + 1);
  if (sub == "info") return info(argc - 1, argv + 1);
  if (sub == "--help" || sub == "-h") {
    std::cout << kUsage;
    return 0;
  }
  std::cerr << kUsage;
  return 2;
}

}  // namespace trident::cli
