// A model's measured costs on one device (pure): what `trident plan profile`
// writes (measure/profile.h measures it) and `trident plan
// --profile` reads in place of the FLOP model's compute. Every figure is per
// micro-batch on one rank at tp = 1, in milliseconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "schedules/simulate.h"

namespace trident::plan {

// NOTE [measured profile] One micro-batch size of one model, measured by
// training it on one device (pp = tp = dp = 1) through the real trainer: the
// median step's busy time per micro-batch, split into F and B as the
// executor's means split it, and the median step's time beyond them.
// The whole model's F and B are split into the embedding, the layers and
// the head (final norm, LM head, loss) in the proportions Model::profile
// times each piece alone, so the pieces add up to what the trainer measured,
// one action's overhead included. Backward is measured once per
// recomputation mode (its extra forward is in it).
struct MicroBatchProfile {
  int micro_batch = 0;
  double layer_forward_ms = 0, embedding_forward_ms = 0, head_forward_ms = 0;
  // Backward per recomputation mode: none, selective, full.
  double layer_backward_ms[3] = {0, 0, 0}, embedding_backward_ms[3] = {0, 0, 0}, head_backward_ms[3] = {0, 0, 0};
  // Per step, the whole model on one rank: zeroing the gradients, the norm, clipping and AdamW, loading
  // and logging (what the step took beyond its F and B actions).
  double step_overhead_ms = 0;
  // A backward split into I and W (the ZB schedules): its time over the unsplit B's (measured with
  // zb-h1 on one device), and W's share of it.
  double split_backward_ratio = 1, weight_share = 0;
  // How much slower the same training computed per micro-batch as a pipeline of two rank processes on
  // this machine (pp = 2: the ranks, their communication threads and the machine shared) than on one
  // device (NOTE [shared compute] in measure/calibrate.cpp); >= 1. With a profile the planner
  // gives a node 2 / pipeline_slowdown devices' worth of compute, in place of the cluster file's
  // compute_slots_per_node: a profile describes the machine it was measured on.
  double pipeline_slowdown = 1;
  // The whole model's F and B (recompute: 0 none, 1 selective, 2 full) with `layers` layers.
  double forward_ms(int64_t layers) const;
  double backward_ms(int recompute, int64_t layers) const;
};

struct Profile {
  // The model it was measured on (every shape the costs depend on) and how.
  std::string arch;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn_hidden = 0, seq_len = 0, vocab_size = 0;
  std::string precision = "fp32";
  int threads = 1;  // intra-op threads per rank
  std::vector<MicroBatchProfile> rows;  // ascending micro_batch
  std::string source = "<profile>";

  // The row of micro-batch size `mbs`; PlanError naming the sizes there are.
  const MicroBatchProfile& at(int mbs) const;
  std::vector<int> micro_batches() const;
};

int recompute_index(const std::string& mode);  // none 0, selective 1, full 2; PlanError otherwise

// Parses a profile file; `name` stands in for the file in messages. Unknown
// keys, missing keys, wrong types and values <= 0 throw PlanError naming the
// file, the key and the value.
Profile parse_profile(const std::string& toml_text, const std::string& name);
Profile load_profile(const std::string& path);
std::string to_toml(const Profile& p);  // parse_profile(to_toml(p)) equals p
// Throws PlanError when `m` or `precision` differ from what `p` was measured
// on (naming every difference); the number of layers may differ (the costs
// are per layer).
void check_profile_matches(const Profile& p, const ModelConfig& m, const std::string& precision);

// The schedule simulator's costs of `stages` pipeline stages (one chunk each)
// of a model of `layers` layers split evenly, from the profile's row of
// micro-batch size `mbs`: per stage its layers' F and B, the embedding's on
// the first stage and the head's on the last (stage_costs); B is the split
// backward (the unsplit B times split_backward_ratio) and W its weight_share,
// as the planner charges the ZB kinds. What `trident schedule --profile`
// simulates and zb-auto searches with. Throws PlanError when `layers` is not a
// multiple of `stages`, or naming the sizes the profile has.
sched::Costs stage_costs_from_profile(const Profile& p, int mbs, const std::string& recompute, int64_t layers,
                                      int stages);

}  // namespace trident::plan
