// `trident plan`: the layout planner. With --layout it evaluates one layout
// of a model on a cluster; without, it searches every layout of --gpus
// devices and prints the best. Pure: the model of one step (planner/).
#include <boost/program_options.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "framework/config_tables.h"
#include "launch/commands.h"
#include "launch/options.h"
#include "planner/search.h"
#include "planner/step.h"

namespace po = boost::program_options;

namespace trident::cli {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::vector<std::pair<const char*, double>> parts(const plan::Breakdown& b) {
  return {{"compute", b.compute}, {"bubble", b.bubble},   {"tp_comm", b.tp_comm},     {"pp_comm", b.pp_comm},
          {"dp_exposed", b.dp_exposed}, {"optimizer", b.optimizer}, {"recompute", b.recompute},
          {"step_sync", b.step_sync}, {"cp_comm", b.cp_comm}, {"ep_comm", b.ep_comm}};
}

std::string table(const std::vector<plan::Estimate>& es) {
  std::ostringstream os;
  os << "  # layout                                                          step_s   tokens/s  TFLOP/s/dev    MFU  "
        "peak_GiB | compute bubble tp_comm pp_comm dp_exp optim recomp  sync cp_comm ep_comm (% of step)\n";
  for (size_t i = 0; i < es.size(); ++i) {
    const plan::Estimate& e = es[i];
    char line[512];
    std::snprintf(line, sizeof line, "%3zu %-64s %8.4g %10.4g %12.4g %5.1f%% %9.2f |", i + 1,
                  plan::layout_text(e.layout).c_str(), e.step_s, e.tokens_per_s, e.tflops_per_device, 100 * e.mfu,
                  e.peak_memory / kGiB);
    os << line;
    for (const auto& [name, s] : parts(e.breakdown)) os << fmt(" %6.1f", 100 * s / e.step_s);
    os << "\n";
  }
  return os.str();
}

std::string csv(const std::vector<plan::Estimate>& es) {
  std::ostringstream os;
  os << "layout,microbatches,step_s,tokens_per_s,tflops_per_device,mfu,peak_memory_gib";
  for (const auto& [name, s] : parts(plan::Breakdown{})) os << "," << name << "_s";
  os << "\n";
  for (const plan::Estimate& e : es) {
    os << '"' << plan::layout_text(e.layout) << "\"," << e.microbatches << "," << fmt("%.6g", e.step_s) << ","
       << fmt("%.6g", e.tokens_per_s) << "," << fmt("%.6g", e.tflops_per_device) << "," << fmt("%.6g", e.mfu) << ","
       << fmt("%.6g", e.peak_memory / kGiB);
    for (const auto& [name, s] : parts(e.breakdown)) os << "," << fmt("%.6g", s);
    os << "\n";
  }
  return os.str();
}

std::string json_one(const plan::Estimate& e, const std::string& runtime) {
  std::ostringstream os;
  os << "{\"layout\": \"" << plan::layout_text(e.layout) << "\", \"runtime\": \"" << runtime << "\", \"tp\": " << e.layout.tp
     << ", \"cp\": " << e.layout.cp << ", \"cp_comm\": \"" << e.layout.cp_comm << "\", \"ep\": " << e.layout.ep
     << ", \"etp\": " << e.layout.expert_tp()
     << ", \"overlap_moe\": " << (e.layout.overlap_moe ? "true" : "false")
     << ", \"pp\": " << e.layout.pp
     << ", \"dp\": " << e.layout.dp << ", \"schedule\": \"" << e.layout.schedule << "\", \"chunks\": " << e.layout.chunks
     << ", \"micro_batch\": " << e.layout.micro_batch << ", \"recompute\": \"" << e.layout.recompute
     << "\", \"zero\": " << e.layout.zero << ", \"microbatches\": " << e.microbatches
     << ", \"step_s\": " << fmt("%.9g", e.step_s) << ", \"tokens_per_s\": " << fmt("%.9g", e.tokens_per_s)
     << ", \"tflops_per_device\": " << fmt("%.9g", e.tflops_per_device) << ", \"mfu\": " << fmt("%.9g", e.mfu)
     << ", \"peak_memory_bytes\": " << fmt("%.9g", e.peak_memory) << ", \"fits\": " << (e.fits ? "true" : "false")
     << ", \"breakdown_s\": {";
  bool first = true;
  for (const auto& [name, s] : parts(e.breakdown)) {
    os << (first ? "" : ", ") << "\"" << name << "\": " << fmt("%.9g", s);
    first = false;
  }
  os << "}, \"ranks\": [";
  for (size_t r = 0; r < e.memory.size(); ++r) {
    const plan::RankMemory& m = e.memory[r];
    os << (r ? ", " : "") << "{\"pp_rank\": " << r << ", \"params_bytes\": " << fmt("%.9g", m.params)
       << ", \"grads_bytes\": " << fmt("%.9g", m.grads) << ", \"optimizer_bytes\": " << fmt("%.9g", m.optimizer)
       << ", \"activation_bytes\": " << fmt("%.9g", m.activations) << ", \"boundary_bytes\": " << fmt("%.9g", m.boundary)
       << ", \"peak_inflight\": " << m.peak_inflight << ", \"total_bytes\": " << fmt("%.9g", m.total()) << "}";
  }
  os << "]}";
  return os.str();
}

// Per pipeline rank memory of one layout, for the table form of --layout.
std::string memory_table(const plan::Estimate& e) {
  std::ostringstream os;
  os << "memory per device of each pipeline rank (GiB): rank params grads optimizer activations (in-flight) boundary total\n";
  for (size_t r = 0; r < e.memory.size(); ++r) {
    const plan::RankMemory& m = e.memory[r];
    char line[256];
    std::snprintf(line, sizeof line, "  %4zu %8.3f %8.3f %8.3f %8.3f (%d) %8.3f %8.3f\n", r, m.params / kGiB,
                  m.grads / kGiB, m.optimizer / kGiB, m.activations / kGiB, m.peak_inflight, m.boundary / kGiB,
                  m.total() / kGiB);
    os << line;
  }
  return os.str();
}

// The --set lines that make `trident train` run this layout.
std::string emit_set(const plan::Estimate& e, int64_t global_batch, const std::vector<std::string>& model_sets) {
  const plan::PlanLayout& l = e.layout;
  std::ostringstream os;
  for (const std::string& s : model_sets) os << "--set " << s << "\n";
  os << "--set parallel.tp=" << l.tp << "\n--set parallel.pp=" << l.pp << "\n--set parallel.dp=" << l.dp
     << "\n--set parallel.sequence_parallel=" << (l.sequence_parallel ? "true" : "false")
     << "\n--set parallel.zero=" << l.zero << "\n";
  if (l.cp > 1) os << "--set parallel.cp=" << l.cp << "\n--set parallel.cp_comm=" << l.cp_comm << "\n";
  if (l.ep > 1) os << "--set parallel.ep=" << l.ep << "\n";
  if (l.expert_tp() != l.tp) os << "--set parallel.etp=" << l.expert_tp() << "\n";
  if (l.overlap_moe) os << "--set schedule.overlap_moe=true\n";
  if (!l.layers.empty()) {
    os << "--set parallel.pipeline_layers=[";
    for (size_t i = 0; i < l.layers.size(); ++i) os << (i ? "," : "") << l.layers[i];
    os << "]\n";
  }
  os << "--set schedule.kind=" << l.schedule << "\n--set schedule.chunks=" << l.chunks
     << "\n--set training.micro_batch_size=" << l.micro_batch << "\n--set training.global_batch_size=" << global_batch
     << "\n--set training.recompute=" << l.recompute << "\n";
  return os.str();
}

void add_plan_options(po::options_description& opts) {
  opts.add_options()("help,h", "show this help")("config", po::value<std::string>(), "model config (a trident train TOML)")(
      "set", po::value<std::vector<std::string>>(), "section.key=value override of the config (repeatable)")(
      "cluster", po::value<std::string>(), "cluster description (configs/clusters/*.toml)")(
      "cluster-set", po::value<std::vector<std::string>>(), "section.key=value override of the cluster (repeatable)")(
      "profile", po::value<std::string>(), "this model's measured costs (written by trident plan profile) instead of "
                                           "its FLOPs at the cluster's GEMM rate")(
      "gpus", po::value<int>(), "devices to plan for")(
      "global-batch", po::value<int64_t>(), "samples per step (default: the config's training.global_batch_size)")(
      "seq", po::value<int64_t>(), "sequence length (default: the config's model.seq_len)")(
      "layout", po::value<std::string>(), "evaluate one layout: tp=..,pp=..,dp=..,schedule=..,chunks=..,mbs=..,"
                                          "recompute=none|selective|full,zero=0|1,sp=0|1,layers=A+B+.. (or first=N,last=M: "
                                          "Megatron's uneven first/last stage),cp=N,cp_comm=p2p|all_gather|a2a,ep=N,etp=1,overlap_moe=1")(
      "runtime", po::value<std::string>()->default_value("trident"),
      "what to predict: trident (Trident as it runs), megatron (Megatron-LM with --overlap-grad-reduce "
      "--overlap-param-gather --tp-comm-overlap, flash attention) or megatron-2021 (Narayanan et al. 2021)")(
      "top", po::value<int>()->default_value(5), "how many of the best layouts to print")(
      "max-mbs", po::value<int>()->default_value(16), "largest micro-batch size the search tries (powers of 2)")(
      "tp-across-nodes", "let the search try tp larger than a node")(
      "moe-tp", "let the search try tp > 1 for a mixture of experts, each expert split over tp (etp = tp) or "
                "whole with the tp ranks folded into ep (etp = 1) (many more layouts: slower)")(
      "max-cp", po::value<int>()->default_value(1),
      "largest context-parallel size the search tries (powers of 2, the ring); with --longest-seq: --gpus unless given")(
      "longest-seq", "the longest sequence some layout trains within device memory: the config's seq_len doubled "
                     "while one fits, and the best layouts there")(
      "format", po::value<std::string>()->default_value("table"), "table | csv | json")(
      "emit-set", "print the --set lines that run the best (or the given) layout with trident train");
}

constexpr const char* kPlanEpilog =
    "The step time is the schedule simulated on its action lists with per-stage costs from each\n"
    "GEMM's shape on a roofline (compute.gemm_efficiency of the peak, the memory bandwidth), the\n"
    "--runtime's attention kernel and overlap, or from a measured --profile; ring collectives for\n"
    "TP and DP, and transfers per boundary; TFLOP/s count recomputation (as Narayanan et al.\n"
    "2021), MFU does not.\n"
    "example: build/trident plan --config configs/gpt-tiny.toml --cluster configs/clusters/dgx-a100.toml --gpus 8 --top 3\n"
    "`trident plan calibrate --help`: measure this machine and write its cluster file.\n"
    "`trident plan profile --help`: measure a model on this machine for --profile.\n";

// What to plan: the config's model and training, the cluster with its overrides, the batch, the runtime.
plan::Problem problem_of(const po::variables_map& vm, const Config& cfg) {
  plan::Problem pr;
  pr.model = cfg.model;
  pr.features = model_family(cfg, model_families()).features;  // NOTE [model features]
  pr.precision = cfg.training.precision;
  pr.cluster = plan::load_cluster(vm["cluster"].as<std::string>());
  if (vm.count("cluster-set"))
    for (const std::string& s : vm["cluster-set"].as<std::vector<std::string>>()) plan::set_cluster_key(pr.cluster, s);
  pr.global_batch = vm.count("global-batch") ? vm["global-batch"].as<int64_t>() : cfg.training.global_batch_size;
  if (pr.global_batch < 1) throw BadInput("--global-batch must be >= 1");
  pr.overlap_grad_reduce = cfg.parallel.overlap_grad_reduce;
  pr.overlap_param_gather = cfg.parallel.overlap_param_gather;
  pr.dp_bucket_mb = cfg.parallel.dp_bucket_mb;
  pr.log_interval = cfg.logging.log_interval;
  pr.runtime = vm["runtime"].as<std::string>();
  return pr;
}

// --layout: the one layout given, evaluated.
plan::Estimate evaluate_given(const po::variables_map& vm, const plan::Problem& pr, int gpus) {
  for (const char* o : {"tp-across-nodes", "moe-tp"})
    if (vm.count(o)) throw BadInput(std::string("--") + o + " applies to the search, not to --layout");
  if (!vm["top"].defaulted() || !vm["max-mbs"].defaulted() || !vm["max-cp"].defaulted() || vm.count("longest-seq"))
    throw BadInput("--top, --max-mbs, --max-cp and --longest-seq apply to the search, not to --layout");
  plan::Estimate e = plan::evaluate(pr, plan::parse_layout(vm["layout"].as<std::string>(), gpus));
  if (e.layout.tp * e.layout.cp * e.layout.pp * e.layout.dp > pr.cluster.devices())
    throw BadInput("--layout needs more devices than the cluster has");
  return e;
}

// Without --layout: the best layouts of the search, and in `header` what it tried and dropped.
std::vector<plan::Estimate> search_best(const po::variables_map& vm, const plan::Problem& pr, int gpus,
                                        std::string& header) {
  plan::SearchOptions o;
  o.gpus = gpus;
  o.top = vm["top"].as<int>();
  o.max_micro_batch = vm["max-mbs"].as<int>();
  o.tp_across_nodes = vm.count("tp-across-nodes") > 0;
  o.moe_tp = vm.count("moe-tp") > 0;
  o.max_cp = vm["max-cp"].defaulted() && vm.count("longest-seq") ? gpus : vm["max-cp"].as<int>();
  std::ostringstream h;
  plan::SearchResult r;
  if (vm.count("longest-seq")) {
    const plan::LongestSequence longest = plan::longest_sequence(pr, o);
    r = longest.at_longest;
    h << "longest sequence: " << longest.seq_len << " tokens";
    if (longest.first_too_long > 0) h << " (" << longest.first_too_long << " fits no layout)";
    h << ", with context parallelism up to cp " << o.max_cp << "; the best layouts at " << longest.seq_len << ":\n";
  } else {
    r = plan::search(pr, o);
  }
  h << "searched " << r.evaluated << " layouts simulated, " << r.fitting << " fit in " << pr.cluster.device_memory_gib
    << " GiB; dropped:";
  if (r.dropped.empty()) h << " none";
  h << "\n";
  for (const auto& [why, n] : r.dropped) h << "  " << n << " x " << why << "\n";
  header = h.str();
  return r.best;
}

// --emit-set: the --set lines of the first layout shown.
void print_emit_set(const po::variables_map& vm, const plan::Problem& pr, const plan::Estimate& e) {
  if (pr.runtime != "trident")
    throw BadInput("--emit-set prints the lines of a trident train run: it needs --runtime trident, not " + pr.runtime);
  std::vector<std::string> model_sets;
  if (vm.count("seq")) model_sets.push_back("model.seq_len=" + std::to_string(vm["seq"].as<int64_t>()));
  std::cout << emit_set(e, pr.global_batch, model_sets);
}

// The table form's lines above the layouts: the problem, the runtime predicted, what the search did.
std::string table_head(const Config& cfg, const plan::Problem& pr, int gpus, const plan::Runtime& runtime,
                       const std::string& searched) {
  std::ostringstream os;
  os << "plan: " << cfg.source << " (" << cfg.model.arch << ", " << cfg.model.layers << " layers, hidden "
     << cfg.model.hidden << ", seq " << cfg.model.seq_len << ", " << cfg.training.precision << ") on "
     << pr.cluster.name << ", " << gpus << " devices, global batch " << pr.global_batch << "\n"
     << "runtime predicted: " << runtime.description << "\n"
     << searched;
  return os.str();
}

// The layouts shown in --format's form (the table under `head`, with memory per rank for one --layout).
void print_estimates(const std::string& format, const std::string& runtime, const std::string& head,
                     const std::vector<plan::Estimate>& shown, bool one_layout) {
  if (format == "json") {
    std::cout << "[";
    for (size_t i = 0; i < shown.size(); ++i) std::cout << (i ? ",\n " : "") << json_one(shown[i], runtime);
    std::cout << "]\n";
  } else if (format == "csv") {
    std::cout << csv(shown);
  } else {
    std::cout << head << table(shown);
    if (shown.size() == 1 && one_layout) std::cout << memory_table(shown[0]);
  }
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "calibrate") return cmd_plan_calibrate(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "profile") return cmd_plan_profile(argc - 1, argv + 1);
  po::options_description opts("trident plan --config MODEL.toml --cluster CLUSTER.toml --gpus N [options]");
  add_plan_options(opts);
  po::variables_map vm;
  if (!parse_args(argc, argv, opts, vm, nullptr, nullptr, kPlanEpilog)) return 0;
  for (const char* required : {"config", "cluster", "gpus"})
    if (!vm.count(required)) throw BadInput(std::string("--") + required + " is required (see --help)");
  const std::string format = vm["format"].as<std::string>();
  if (format != "table" && format != "csv" && format != "json")
    throw BadInput("--format '" + format + "', expected table, csv or json");
  std::vector<std::string> sets = vm.count("set") ? vm["set"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (vm.count("seq")) sets.push_back("model.seq_len=" + std::to_string(vm["seq"].as<int64_t>()));
  const Config cfg = load_checked_config(vm["config"].as<std::string>(), sets, ConfigUse::kPlan);  // NOTE [plan reads no data]

  plan::Problem pr = problem_of(vm, cfg);
  const plan::Runtime runtime = plan::runtime_named(pr.runtime);  // a bad name fails here, before any work
  if (vm.count("profile")) pr.profile = plan::load_profile(vm["profile"].as<std::string>());
  const int gpus = vm["gpus"].as<int>();

  std::vector<plan::Estimate> shown;
  std::string header;
  if (vm.count("layout"))
    shown.push_back(evaluate_given(vm, pr, gpus));
  else
    shown = search_best(vm, pr, gpus, header);
  if (vm.count("emit-set")) {
    if (vm.count("longest-seq"))
      throw BadInput("--emit-set with --longest-seq: run --seq N --emit-set with the length it printed");
    print_emit_set(vm, pr, shown[0]);
    return 0;
  }
  print_estimates(format, pr.runtime, table_head(cfg, pr, gpus, runtime, header), shown, vm.count("layout") > 0);
  return 0;
}

}  // namespace trident::cli
