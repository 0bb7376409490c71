// `trident schedule`: generate (or read) a pipeline schedule, validate it,
// simulate it with given costs, and print it as text, JSON, SVG or Chrome trace.
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch/commands.h"
#include "schedules/generators.h"
#include "schedules/render.h"
#include "schedules/simulate.h"
#include "schedules/validate.h"

namespace po = boost::program_options;

namespace trident::cli {

namespace {

// "1,2.5,3" -> {1, 2.5, 3}; throws naming the option and the bad text.
std::vector<double> parse_numbers(const std::string& option, const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    double x = 0;
    try {
      x = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw std::runtime_error("--" + option + " '" + text + "': '" + item + "' is not a number");
    out.push_back(x);
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--file '" + path + "': cannot open it");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

sched::Schedule load(const po::variables_map& vm, const std::string& kind) {
  if (kind != "file") {
    if (!vm.count("stages") || !vm.count("microbatches"))
      throw std::runtime_error("--kind " + kind + " needs --stages and --microbatches");
    return sched::generate(kind, vm["stages"].as<int>(), vm["microbatches"].as<int>(), vm["chunks"].as<int>());
  }
  if (!vm.count("file")) throw std::runtime_error("--kind file needs --file PATH");
  sched::Schedule s = sched::parse_text(read_file(vm["file"].as<std::string>()));
  if (vm.count("stages") && vm["stages"].as<int>() != s.stages)
    throw std::runtime_error("--stages " + std::to_string(vm["stages"].as<int>()) + " but the file has p=" +
                             std::to_string(s.stages));
  if (vm.count("microbatches") && vm["microbatches"].as<int>() != s.microbatches)
    throw std::runtime_error("--microbatches " + std::to_string(vm["microbatches"].as<int>()) +
                             " but the file has m=" + std::to_string(s.microbatches));
  return sched::has_communication(s) ? s : sched::add_communication(s);
}

}  // namespace

int cmd_schedule(int argc, char** argv) {
  po::options_description opts("trident schedule [options]");
  opts.add_options()("help,h", "show this help")(
      "kind", po::value<std::string>()->default_value("1f1b"), "gpipe | 1f1b | interleaved | zb-h1 | file")(
      "stages,p", po::value<int>(), "pipeline stages P")("microbatches,m", po::value<int>(), "micro-batches M")(
      "chunks,v", po::value<int>()->default_value(1), "virtual chunks per rank V (interleaved)")(
      "costs", po::value<std::string>()->default_value("1,2,1"), "F,B,W cost of one full stage (I = B - W)")(
      "latency", po::value<std::string>()->default_value("0"), "link latency: one value, or p*v-1 comma-separated")(
      "file", po::value<std::string>(), "schedule text file (with --kind file)")(
      "format", po::value<std::string>()->default_value("text"), "text | schedule | json | svg | chrome")(
      "output,o", po::value<std::string>(), "write here instead of stdout");
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << opts << "\nFormats: text = time grid and bubble; schedule = the action lists in text form.\n";
    return 0;
  }
  const std::string kind = vm["kind"].as<std::string>(), format = vm["format"].as<std::string>();
  if (format != "text" && format != "schedule" && format != "json" && format != "svg" && format != "chrome")
    throw std::runtime_error("--format '" + format + "', expected text, schedule, json, svg or chrome");
  const std::vector<double> c = parse_numbers("costs", vm["costs"].as<std::string>());
  if (c.size() != 3) throw std::runtime_error("--costs '" + vm["costs"].as<std::string>() + "', expected F,B,W");
  sched::Costs costs{c[0], c[1], c[2], parse_numbers("latency", vm["latency"].as<std::string>())};

  const sched::Schedule s = load(vm, kind);
  sched::validate(s);  // throws with the grid around the first violation
  const sched::Timeline t = sched::simulate(s, costs);
  const std::string title = kind == "file" ? vm["file"].as<std::string>() : kind;
  std::string out;
  if (format == "text") out = sched::render_text(t, title);
  if (format == "schedule") out = sched::to_text(s);
  if (format == "json") out = sched::render_json(t, title);
  if (format == "svg") out = sched::render_svg(t, title);
  if (format == "chrome") out = sched::render_chrome(t, title);
  if (!vm.count("output")) {
    std::cout << out;
    return 0;
  }
  std::ofstream f(vm["output"].as<std::string>());
  if (!(f << out)) throw std::runtime_error("--output '" + vm["output"].as<std::string>() + "': cannot write it");
  return 0;
}

}  // namespace trident::cli
