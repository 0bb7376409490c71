// `trident schedule`: generate (or read) a pipeline schedule, validate it,
// simulate it with given costs, and print it as text, JSON, SVG, Chrome trace,
// Trident's text form, PyTorch's CSV, or a one-object summary.
#include <boost/program_options.hpp>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch/commands.h"
#include "launch/options.h"
#include "planner/cluster.h"
#include "planner/profile.h"
#include "schedules/generators.h"
#include "schedules/overlap.h"
#include "schedules/group_waits.h"
#include "schedules/pytorch_csv.h"
#include "schedules/render.h"
#include "schedules/simulate.h"
#include "schedules/validate.h"

namespace po = boost::program_options;

namespace trident::cli {

namespace {

const char* kFormats[] = {"text", "schedule", "csv", "json", "svg", "chrome", "summary"};

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
      throw BadInput("--" + option + " '" + text + "': '" + item + "' is not a number");
    out.push_back(x);
  }
  return out;
}

std::string read_file(const std::string& option, const std::string& path) {
  std::ifstream in(path);
  if (!in) throw BadInput("--" + option + " '" + path + "': cannot open it");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The schedule as given or generated: compute-only when generated (the
// communication is implied, see schedules/README.md), as written when read
// (plus its REDUCE_GRAD actions when it has none).
sched::Schedule load(const po::variables_map& vm, const std::string& kind, const sched::Costs& costs) {
  if (vm.count("from-csv") && kind != "file")
    throw BadInput("--from-csv needs --kind file (or no --kind), got --kind " + kind);
  if (vm.count("memory-limit") && kind != "zb-auto")
    throw BadInput("--memory-limit applies to --kind zb-auto only, got --kind " + kind);
  if (vm.count("objective") && kind != "zb-auto")
    throw BadInput("--objective applies to --kind zb-auto only, got --kind " + kind);
  if (kind != "file") {
    if (vm.count("file")) throw BadInput("--file needs --kind file, got --kind " + kind);
    if (!vm.count("stages") || !vm.count("microbatches"))
      throw BadInput("--kind " + kind + " needs --stages and --microbatches");
    if (kind == "zb-auto") {  // searched for these costs: NOTE [zb-auto] in schedules/generators_auto.cpp
      if (!vm.count("memory-limit"))
        throw BadInput("--kind zb-auto needs --memory-limit N (micro-batches of activations per rank; "
                       "N = p gives the paper's ZB-1p, 2p its ZB-2p)");
      if (vm.count("chunks") && vm["chunks"].as<int>() != 1)
        throw BadInput("--kind zb-auto runs one chunk per rank, got --chunks " + std::to_string(vm["chunks"].as<int>()));
      const std::string objective = vm.count("objective") ? vm["objective"].as<std::string>() : "span";
      if (objective != "span" && objective != "step")
        throw BadInput("--objective '" + objective + "': expected span (the paper's bubble, which assumes optimizer "
                       "post-validation) or step (the step's, as Trident trains it)");
      return sched::zb_auto(vm["stages"].as<int>(), vm["microbatches"].as<int>(), costs, vm["memory-limit"].as<int>(),
                            objective == "step" ? sched::ZbObjective::kStep : sched::ZbObjective::kSpan);
    }
    // No --chunks: what the kind needs (2 for the V kinds); an explicit other value is check_supported()'s error.
    const int v = vm.count("chunks") ? vm["chunks"].as<int>() : sched::default_chunks(kind);
    return sched::generate_compute(kind, vm["stages"].as<int>(), vm["microbatches"].as<int>(), v);
  }
  if (vm.count("file") == vm.count("from-csv")) throw BadInput("--kind file needs exactly one of --file PATH or --from-csv PATH");
  const bool csv = vm.count("from-csv") > 0;
  const int m = vm.count("microbatches") ? vm["microbatches"].as<int>() : 0;
  sched::Schedule s = csv ? sched::from_pytorch_csv(read_file("from-csv", vm["from-csv"].as<std::string>()), m)
                          : sched::parse_text(read_file("file", vm["file"].as<std::string>()));
  if (vm.count("stages") && vm["stages"].as<int>() != s.pipeline_ranks)
    throw BadInput("--stages " + std::to_string(vm["stages"].as<int>()) + " but the file has p=" +
                             std::to_string(s.pipeline_ranks));
  if (vm.count("microbatches") && vm["microbatches"].as<int>() != s.microbatches)
    throw BadInput("--microbatches " + std::to_string(vm["microbatches"].as<int>()) +
                             " but the file has m=" + std::to_string(s.microbatches));
  if (vm.count("chunks") && vm["chunks"].as<int>() != s.chunks)
    throw BadInput("--chunks " + std::to_string(vm["chunks"].as<int>()) + " but the file has v=" +
                             std::to_string(s.chunks));
  return sched::with_reduce_grad(std::move(s));  // NOTE [files without REDUCE_GRAD] in schedules/generators.cpp
}

// --profile FILE: each virtual stage's measured F, B, W (planner/profile.h),
// for an even split of the profile's layers (or --layers) over p x v stages.
sched::Costs profile_costs(const po::variables_map& vm, const std::string& kind) {
  for (const char* other : {"costs", "stage-costs"})
    if (!vm[other].defaulted() && vm.count(other))
      throw BadInput(std::string("--profile gives every stage's costs: leave out --") + other);
  if (!vm.count("stages")) throw BadInput("--profile needs -p (the stages to split the layers over)");
  const std::string path = vm["profile"].as<std::string>();
  try {
    const plan::Profile prof = plan::load_profile(path);
    const std::vector<int> sizes = prof.micro_batches();
    if (!vm.count("mbs") && sizes.size() != 1)
      throw BadInput("--profile '" + path + "' has " + std::to_string(sizes.size()) +
                     " micro-batch sizes: choose one with --mbs");
    const int mbs = vm.count("mbs") ? vm["mbs"].as<int>() : sizes.front();
    const int64_t layers = vm.count("layers") ? vm["layers"].as<int64_t>() : prof.layers;
    const int v = vm.count("chunks") ? vm["chunks"].as<int>() : sched::default_chunks(kind);
    sched::Costs costs =
        plan::stage_costs_from_profile(prof, mbs, vm["recompute"].as<std::string>(), layers, vm["stages"].as<int>() * v);
    costs.latency = parse_numbers("latency", vm["latency"].as<std::string>());
    return costs;
  } catch (const plan::PlanError& e) {
    throw BadInput("--profile: " + std::string(e.what()));
  }
}

sched::Costs parse_costs(const po::variables_map& vm) {
  for (const char* only : {"mbs", "layers"})
    if (vm.count(only)) throw BadInput(std::string("--") + only + " applies with --profile only");
  if (!vm["recompute"].defaulted()) throw BadInput("--recompute applies with --profile only");
  const std::vector<double> c = parse_numbers("costs", vm["costs"].as<std::string>());
  if (c.size() != 3) throw BadInput("--costs '" + vm["costs"].as<std::string>() + "', expected F,B,W");
  sched::Costs costs;
  costs.forward = c[0];
  costs.backward = c[1];
  costs.weight = c[2];
  costs.latency = parse_numbers("latency", vm["latency"].as<std::string>());
  if (vm.count("stage-costs")) costs.stage_scale = parse_numbers("stage-costs", vm["stage-costs"].as<std::string>());
  if (vm.count("expert-comm")) costs.expert_comm = vm["expert-comm"].as<double>();
  return costs;
}

std::string json_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out;
}

// NOTE [group waits]: the list as a run executes it, timed under the executor's
// groups with the same costs and latencies as step_time; null for a list of more
// than kMaxDeferActions actions.
std::string grouped_field(const sched::Schedule& s, const sched::Costs& costs) {
  if (sched::action_count(s) > sched::kMaxDeferActions) return "\"grouped_step_time\": null";
  const sched::Schedule run = sched::has_communication(s) ? s : sched::place_communication(s);
  char buf[64];
  std::snprintf(buf, sizeof buf, "\"grouped_step_time\": %.10g", sched::grouped_step_time(run, costs));
  return buf;
}

std::string summary_json(const std::string& title, const sched::Schedule& s, const sched::TimelineStats& st,
                         const sched::Costs& costs) {
  char buf[512];
  const int peak = st.peak_inflight.empty() ? 0 : *std::max_element(st.peak_inflight.begin(), st.peak_inflight.end());
  std::snprintf(buf, sizeof buf,
                "{\"title\": \"%s\", \"pipeline_ranks\": %d, \"microbatches\": %d, \"chunks\": %d, \"placement\": \"%s\", "
                "\"step_time\": %.10g, \"bubble_fraction\": %.10g, \"span_bubble_fraction\": %.10g, \"peak_inflight\": %d, %s}\n",
                json_escaped(title).c_str(), s.pipeline_ranks, s.microbatches, s.chunks, sched::placement_name(s.placement).c_str(),
                st.step_time, st.bubble_fraction, st.span_bubble_fraction, peak, grouped_field(s, costs).c_str());
  return buf;
}

// The options of `trident schedule`.
void add_schedule_options(po::options_description& opts) {
  std::string kinds;
  for (const std::string& k : sched::schedule_kinds()) kinds += k + " | ";
  kinds += "zb-auto (with --memory-limit) | ";
  opts.add_options()("help,h", "show this help")(
      "kind", po::value<std::string>()->default_value("1f1b"), (kinds + "file").c_str())(
      "stages,p", po::value<int>(), "pipeline ranks P")("microbatches,m", po::value<int>(), "micro-batches M")(
      "chunks,v", po::value<int>(), "chunks per rank V (default: what the kind needs, 2 for zb-v, v-half, v-min and dualpipev, else 1)")(
      "costs", po::value<std::string>()->default_value("1,2,1"), "F,B,W cost of one full stage (I = B - W)")(
      "latency", po::value<std::string>()->default_value("0"), "link latency: one value, or p*v-1 comma-separated")(
      "stage-costs", po::value<std::string>(), "p*v multipliers of each virtual stage's costs (an imbalanced split)")(
      "profile", po::value<std::string>(),
      "costs measured by `trident plan profile` (every stage's F, B, W for an even split of the layers over p x v)")(
      "mbs", po::value<int>(), "with --profile: the micro-batch size's row (needed when it has several)")(
      "layers", po::value<int64_t>(), "with --profile: the model's layers (default: the profiled model's)")(
      "recompute", po::value<std::string>()->default_value("none"),
      "with --profile: none | selective | full (whose backward costs apply)")(
      "file", po::value<std::string>(), "schedule in Trident's text form (with --kind file)")(
      "from-csv", po::value<std::string>(), "schedule in PyTorch's CSV form (with --kind file)")(
      "compute-only", "with --format schedule or csv: leave out the send/recv actions")(
      "memory-limit", po::value<int>(),
      "with --kind zb-auto: micro-batches of activations in flight per rank at most (p: ZB-1p, 2p: ZB-2p)")(
      "objective", po::value<std::string>(),
      "with --kind zb-auto: span (default: the paper's bubble over each rank's first-to-last compute, which "
      "assumes optimizer post-validation) or step (the whole step's bubble: what `trident train` and "
      "`trident plan` search, Trident running no post-validation)")(
      "overlap-moe",
      "pair each backward with the forward after it (schedule.overlap_moe; NOTE [overlapped pairs] in "
      "schedules/overlap.h): the list a run with expert parallelism executes")(
      "expert-comm", po::value<double>(),
      "the all-to-alls' part of F and of B (and I) of one full stage, what a pair hides (default 0)")(
      "format", po::value<std::string>()->default_value("text"), "text | schedule | csv | json | svg | chrome | summary")(
      "output,o", po::value<std::string>(), "write here instead of stdout");
}

// `s` in --format: a summary, its action lists, or its simulated timeline drawn.
std::string render(const po::variables_map& vm, const std::string& format, const std::string& title,
                   const sched::Schedule& s, const sched::Costs& costs) {
  std::string out;
  if (format == "summary") {
    out = summary_json(title, s, sched::simulate_stats(s, costs), costs);  // validates once, nothing per action
  } else if (format == "schedule" || format == "csv") {
    sched::validate(s);  // throws with the grid around the first violation
    sched::check_costs(costs, s.pipeline_ranks, s.chunks);
    const bool comm = sched::has_communication(s);
    if (vm.count("compute-only") && comm)
      throw BadInput("--compute-only: the schedule read already has send/recv actions");
    // What a run executes: a generator's communication as generate() places it (NOTE [group waits]).
    const sched::Schedule shown = comm || vm.count("compute-only") ? s : sched::place_communication(s);
    out = format == "csv" ? sched::to_pytorch_csv(shown) : sched::to_text(shown);
  } else {
    const sched::Timeline t = sched::simulate(s, costs);  // validates once
    if (format == "text") out = sched::render_text(t, title);
    if (format == "json") out = sched::render_json(t, title);
    if (format == "svg") out = sched::render_svg(t, title);
    if (format == "chrome") out = sched::render_chrome(t, title);
  }
  return out;
}

}  // namespace

int cmd_schedule(int argc, char** argv) {
  po::options_description opts("trident schedule [options]");
  add_schedule_options(opts);
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm, nullptr, nullptr,
                  "Formats: text = time grid and bubble; schedule = the action lists in text form;\n"
                  "csv = PyTorch's schedule CSV; summary = one JSON object (bubble_fraction, step_time,\n"
                  "span_bubble_fraction = the zero-bubble paper's accounting over the longest rank's\n"
                  "first-to-last compute, peak_inflight) from a run that stores nothing per action.\n"))
    return 0;
  std::string kind = vm["kind"].as<std::string>();
  if (vm.count("from-csv") && vm["kind"].defaulted()) kind = "file";
  const std::string format = vm["format"].as<std::string>();
  if (std::find(std::begin(kFormats), std::end(kFormats), format) == std::end(kFormats))
    throw BadInput("--format '" + format + "', expected text, schedule, csv, json, svg, chrome or summary");
  if (vm.count("compute-only") && format != "schedule" && format != "csv")
    throw BadInput("--compute-only applies to --format schedule or csv, got --format " + format);
  const sched::Costs costs = vm.count("profile") ? profile_costs(vm, kind) : parse_costs(vm);

  if (vm.count("expert-comm") && vm.count("profile"))
    throw BadInput("--expert-comm with --profile: a profile has no all-to-all part to give it (use --costs)");
  if (vm.count("overlap-moe") && kind == "file")
    throw BadInput("--overlap-moe with --kind file: a file writes its pairs itself (F3+B1 tokens)");
  sched::Schedule s = load(vm, kind, costs);
  if (vm.count("overlap-moe")) {  // NOTE [overlapped pairs]
    s = sched::overlap_pairs(s);  // the compute-only list (shown with its communication placed unless --compute-only)
    if (sched::count_pairs(s) == 0)
      throw BadInput("--overlap-moe: --kind " + kind + " at p=" + std::to_string(s.pipeline_ranks) + " m=" +
                     std::to_string(s.microbatches) + " has no backward followed by a forward of another "
                     "micro-batch to pair");
  }
  const std::string title = kind != "file" ? kind
                            : vm.count("file") ? vm["file"].as<std::string>()
                                               : vm["from-csv"].as<std::string>();
  const std::string out = render(vm, format, title, s, costs);
  if (!vm.count("output")) {
    std::cout << out;
    return 0;
  }
  std::ofstream f(vm["output"].as<std::string>());
  if (!(f << out)) throw BadInput("--output '" + vm["output"].as<std::string>() + "': cannot write it");
  return 0;
}

}  // namespace trident::cli
