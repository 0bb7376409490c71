// What the planner's TOML files (cluster descriptions, model profiles) share
// (pure): reading and parsing with every failure a PlanError naming the file
// and line, and the text of a number as the writers put it.
#pragma once

#include <string>

#include <toml++/toml.h>

namespace trident::plan {

// toml_text parsed; a syntax error throws PlanError "NAME: what (line N)".
toml::table parse_toml(const std::string& toml_text, const std::string& name);
// The file's text; PlanError "WHAT file 'PATH': cannot open it".
std::string read_toml_file(const std::string& path, const std::string& what);
// " (line N)" of a node read from a file, "" when it has no line.
std::string line_of(const toml::node& n);
// A float value's TOML text with 10 significant digits, always with a '.' or an exponent.
std::string real_text(double x);

}  // namespace trident::plan
