// Command-line parsing shared by the `trident` subcommands.
#pragma once

#include <string>

#include <boost/program_options.hpp>

namespace trident::cli {

// Parses argv (argv[0] is the subcommand) into vm against `all` (`visible`
// plus hidden positional ones, or `visible` itself when null) and notifies
// it. With --help prints `visible` and `help_tail` and returns false: the
// subcommand then exits 0.
bool parse_args(int argc, char** argv, const boost::program_options::options_description& visible,
                boost::program_options::variables_map& vm,
                const boost::program_options::positional_options_description* positional = nullptr,
                const boost::program_options::options_description* all = nullptr, const std::string& help_tail = "");

}  // namespace trident::cli
