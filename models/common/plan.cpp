// Shared model plumbing: see plan.h.
#include "models/common/plan.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/json.h"
#include "core/model_checks.h"

namespace trident {

// The split a checked config describes (check_config, core/config_parallel.cpp,
// owns the rule and its messages); anything else here is a caller's bug.
std::vector<ChunkSpec> split_layers(int64_t layers, int64_t stages, const std::vector<int64_t>& explicit_layers) {
  std::vector<int64_t> counts = explicit_layers;
  if (counts.empty() && stages > 0 && layers % stages == 0) counts.assign(stages, layers / stages);
  int64_t sum = 0;
  for (int64_t n : counts) sum += n;
  if (stages < 1 || static_cast<int64_t>(counts.size()) != stages || sum != layers)
    throw std::logic_error("split_layers: " + std::to_string(layers) + " layers cannot go into " +
                           std::to_string(stages) + " chunks as given (" + std::to_string(explicit_layers.size()) +
                           " explicit entries); check_config admits no such config");
  std::vector<ChunkSpec> specs(stages);
  int64_t next = 0;
  for (int64_t s = 0; s < stages; ++s) {
    specs[s] = {next, counts[s], s == 0, s == stages - 1};
    next += counts[s];
  }
  return specs;
}

void ParamPlan::add_weight(const std::string& name, std::vector<int64_t> shape, int shard_dim, double std_dev) {
  ParamDecl decl;
  decl.name = name;
  decl.shape = std::move(shape);
  decl.shard_dim = shard_dim;
  decl.std_dev = std_dev;
  add(decl);
}

void ParamPlan::add(const ParamDecl& decl) {
  PlannedParam pp;
  pp.info.name = decl.name;
  pp.info.full_shape = decl.shape;
  pp.info.shard_dim = decl.shard_dim;
  pp.info.init = decl.init;
  pp.info.init_std = decl.std_dev;
  pp.info.no_decay = decl.no_decay;
  pp.info.sequence_parallel_grad = decl.sequence_parallel_grad;
  pp.info.tp_partial_grad = decl.tp_partial_grad;
  pp.info.tied_copy = decl.tied_copy;
  pp.info.init_valid_rows = decl.init_valid_rows;
  pp.local_shape = decl.shape;
  if (decl.shard_dim >= 0) {
    const int64_t parts = decl.shards > 0 ? decl.shards : tp_size_, part = decl.shards > 0 ? decl.shard_rank : tp_rank_;
    pp.local_shape[decl.shard_dim] = decl.shape[decl.shard_dim] / parts;
    pp.info.shard_offset = part * pp.local_shape[decl.shard_dim];
  }
  if (decl.expert) {
    pp.info.expert = true;
    pp.local_shape[0] = decl.shape[0] / ep_size_;
    pp.info.expert_offset = ep_rank_ * pp.local_shape[0];
  }
  plan_.push_back(std::move(pp));
}

std::vector<ParamInfo> unique_params_of(const std::vector<ChunkSpec>& specs,
                                        const std::function<std::vector<PlannedParam>(const ChunkSpec&)>& plan) {
  std::vector<ParamInfo> all;
  for (const ChunkSpec& spec : specs)
    for (const PlannedParam& planned : plan(spec))
      if (!planned.info.tied_copy) all.push_back(planned.info);
  return all;
}

size_t param_index(const std::vector<Param>& params, const std::string& name, const char* who, bool tied_copy) {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].info.name == name && params[i].info.tied_copy == tied_copy) return i;
  throw std::logic_error(std::string(who) + " has no parameter " + name);
}

LayerCosts profile_pieces(const ModelConfig& cfg, int64_t mbs, int reps,
                          const std::function<std::unique_ptr<Stage>(const ChunkSpec&)>& make) {
  using Clock = std::chrono::steady_clock;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor ids = at::randint(cfg.vocab_size, {mbs, cfg.seq_len}, gen);
  const at::Tensor hidden = at::randn({mbs, cfg.seq_len, cfg.hidden}, gen);
  auto time = [&](const ChunkSpec& spec) {
    std::unique_ptr<Stage> stage = make(spec);
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r <= reps; ++r) {
      const auto start = Clock::now();
      at::Tensor in = spec.has_embedding ? ids : hidden.clone().requires_grad_(true);
      at::Tensor out = stage->forward(in, spec.has_head ? ids : at::Tensor());
      if (spec.has_head)
        out.backward();
      else
        out.backward(at::ones_like(out));
      if (r > 0) best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    }
    return best;
  };
  std::vector<ChunkSpec> pieces;
  for (int64_t l = 0; l < cfg.layers; ++l) pieces.push_back({l, 1, false, false});
  pieces.push_back({0, 0, true, false});           // embedding
  pieces.push_back({cfg.layers, 0, false, true});  // final norm, head, loss
  std::vector<double> cost(pieces.size(), std::numeric_limits<double>::infinity());
  for (int sweep = 0; sweep < 2; ++sweep)
    for (size_t i = 0; i < pieces.size(); ++i) cost[i] = std::min(cost[i], time(pieces[i]));
  LayerCosts c;
  c.layers.assign(cost.begin(), cost.end() - 2);
  c.embedding = cost[cost.size() - 2];
  c.head = cost.back();
  return c;
}

namespace {
// As the file would write it: a whole number as an integer (n_layer = 2, not 2.0).
std::string number_text(double v) {
  const bool whole = std::abs(v) < 9007199254740992.0 && v == static_cast<double>(static_cast<int64_t>(v));
  return json::dump(whole ? json::number(static_cast<int64_t>(v)) : json::number(v));
}
}  // namespace

void ConfigDiff::number(const char* theirs, double a, const char* ours, double b) {
  if (a != b) note(std::string(theirs) + " = " + number_text(a) + " but " + ours + " = " + number_text(b));
}

void ConfigDiff::note(const std::string& text) { text_ += (text_.empty() ? "" : "; ") + text; }

void ConfigDiff::throw_if_any(const std::string& dir) const {
  // The directory and the config a user gave disagree: bad input (exit 2), as every other HF file error.
  if (!text_.empty()) throw ModelInputError("Hugging Face model " + dir + " does not fit the config: " + text_);
}

}  // namespace trident
