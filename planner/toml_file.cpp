#include "planner/toml_file.h"

#include <fstream>
#include <sstream>

#include "planner/cluster.h"  // PlanError

namespace trident::plan {

toml::table parse_toml(const std::string& toml_text, const std::string& name) {
  try {
    return toml::parse(std::string_view(toml_text), std::string_view(name));
  } catch (const toml::parse_error& e) {
    throw PlanError(name + ": " + std::string(e.description()) + " (line " + std::to_string(e.source().begin.line) + ")");
  }
}

std::string read_toml_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw PlanError(what + " file '" + path + "': cannot open it");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string line_of(const toml::node& n) {
  return n.source().begin.line ? " (line " + std::to_string(n.source().begin.line) + ")" : "";
}

std::string real_text(double x) {
  std::ostringstream v;
  v.precision(10);
  v << x;
  std::string s = v.str();
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace trident::plan
