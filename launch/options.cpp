// Command-line parsing shared by the subcommands: see options.h.
#include "launch/options.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>

namespace po = boost::program_options;

namespace trident::cli {

bool parse_args(int argc, char** argv, const po::options_description& visible, po::variables_map& vm,
                const po::positional_options_description* positional, const po::options_description* all,
                const std::string& help_tail) {
  po::command_line_parser parser(argc, argv);
  parser.options(all ? *all : visible);
  if (positional) parser.positional(*positional);
  po::store(parser.run(), vm);
  if (vm.count("help")) {
    std::cout << visible << "\n" << help_tail;
    return false;
  }
  po::notify(vm);
  return true;
}

void check_writable_output(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  std::ofstream probe(path, std::ios::app);
  if (!probe) throw BadInput("--out '" + path + "': cannot write it");
}

}  // namespace trident::cli
