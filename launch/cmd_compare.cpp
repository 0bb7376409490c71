// `trident compare RUN_DIR_A RUN_DIR_B [--rtol X] [--keys loss,grad_norm]`:
// the per-step differences of two runs' metrics.jsonl, exit status 1 when any
// step differs beyond the tolerance (rtol 0: the very same doubles).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "core/json.h"
#include "launch/commands.h"
#include "launch/options.h"

namespace po = boost::program_options;

namespace trident::cli {
namespace {

using Row = std::map<std::string, double>;

// The numeric fields of each line of a metrics.jsonl (flat objects RunLog writes).
std::vector<Row> read_jsonl(const std::string& dir) {
  const std::string path = dir + "/metrics.jsonl";
  std::ifstream f(path);
  if (!f) throw BadInput("cannot open " + path + " (is " + dir + " a run directory?)");
  std::vector<Row> rows;
  std::string line;
  int lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(lineno);
    json::Value v;
    try {
      v = json::parse(line, where);
    } catch (const json::JsonError& e) {
      throw BadInput(std::string(e.what()) + " (expected one flat JSON object of numbers per line)");
    }
    if (!v.is_object()) throw BadInput(where + ": not a flat JSON object of numbers");
    Row row;
    for (const auto& [key, val] : json::as_object(v, where)) {
      if (!val.is_number() && !val.is_null())
        throw BadInput(where + ": '" + key + "' is not a number: " + json::dump(val));
      row[key] = val.is_null() ? NAN : json::as_double(val, where + " " + key);
    }
    rows.push_back(row);
  }
  if (rows.empty()) throw BadInput(path + " has no steps");
  return rows;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int cmd_compare(int argc, char** argv) {
  po::options_description opts(
      "usage: trident compare RUN_DIR_A RUN_DIR_B [--rtol X] [--keys loss,grad_norm]\n\n"
      "Prints, per step, the relative difference |b - a| / |a| of each key in the two runs' metrics.jsonl,\n"
      "and exits 1 if any exceeds --rtol (default 0: bit-identical), 2 on bad input.\n\noptions");
  double rtol = 0;
  std::string keys = "loss,grad_norm";
  std::vector<std::string> dirs;
  opts.add_options()("help,h", "show this help")("rtol", po::value(&rtol), "relative tolerance (default 0)")(
      "keys", po::value(&keys), "comma-separated metrics to compare (default loss,grad_norm)");
  po::options_description hidden;
  hidden.add_options()("dirs", po::value(&dirs));
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("dirs", 2);
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm, &pos, &all)) return 0;
  if (dirs.size() != 2) throw BadInput("expected two run directories (see trident compare --help)");
  if (!(rtol >= 0)) throw BadInput("--rtol must be >= 0, got " + std::to_string(rtol));
  const auto a = read_jsonl(dirs[0]), b = read_jsonl(dirs[1]);
  const auto names = split_commas(keys);
  if (names.empty()) throw BadInput("--keys is empty");
  if (a.size() != b.size())
    throw BadInput(dirs[0] + " has " + std::to_string(a.size()) + " steps but " + dirs[1] + " has " +
                             std::to_string(b.size()));
  std::printf("%6s", "step");
  for (const auto& k : names) std::printf("  %24s %24s %10s", (k + " A").c_str(), (k + " B").c_str(), "rel");
  std::printf("\n");
  int bad = 0;
  std::map<std::string, double> worst;
  for (size_t i = 0; i < a.size(); ++i) {
    std::printf("%6zu", i + 1);
    for (const auto& k : names) {
      if (!a[i].count(k) || !b[i].count(k))
        throw BadInput("step " + std::to_string(i + 1) + " has no '" + k + "' in both runs");
      const double x = a[i].at(k), y = b[i].at(k);
      const double rel = x == y ? 0.0 : std::fabs(y - x) / std::fabs(x);
      const bool ok = rtol == 0 ? x == y : rel <= rtol;
      if (!ok) ++bad;
      worst[k] = std::max(worst[k], rel);
      std::printf("  %24.17g %24.17g %10.3g%s", x, y, rel, ok ? "" : " !");
    }
    std::printf("\n");
  }
  for (const auto& k : names) std::printf("max relative difference of %s: %.3g\n", k.c_str(), worst[k]);
  if (bad) {
    std::printf("%d value(s) differ beyond rtol %g\n", bad, rtol);
    return 1;
  }
  std::printf("all %zu steps within rtol %g\n", a.size(), rtol);
  return 0;
}

}  // namespace trident::cli
