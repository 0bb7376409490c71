// Command-line parsing shared by the `trident` subcommands.
#pragma once

#include <string>

#include <boost/program_options.hpp>

#include <stdexcept>

namespace trident::cli {

// NOTE [exit statuses] Every command exits 0 on success, 1 on a failure of the
// run itself or a difference (a rank that died, a diverged run, `compare`
// beyond --rtol, an internal error) and 2 on every usage or input error: a
// wrong option or argument, a config key, a data, token, schedule, plan, JSON,
// checkpoint or Hugging Face file that its reader refuses, a file, folder,
// device or port given that cannot be used (main.cpp maps the error types; a
// device, folder or port is a ConfigError; the launcher exits 2 for a program
// it cannot start). BadInput is a command's own caller error about its arguments.
class BadInput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses argv (argv[0] is the subcommand) into vm against `all` (`visible`
// plus hidden positional ones, or `visible` itself when null) and notifies
// it. With --help prints `visible` and `help_tail` and returns false: the
// subcommand then exits 0.
bool parse_args(int argc, char** argv, const boost::program_options::options_description& visible,
                boost::program_options::variables_map& vm,
                const boost::program_options::positional_options_description* positional = nullptr,
                const boost::program_options::options_description* all = nullptr, const std::string& help_tail = "");

// An --out file a command writes at its end: makes its folder and checks now, before the command's
// work, that the file can be written; throws "--out 'PATH': cannot write it".
void check_writable_output(const std::string& path);

}  // namespace trident::cli
