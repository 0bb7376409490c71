// What every model family shares about its parameters and its pipeline split:
// a chunk (virtual stage) as a range of layers, the split of model.layers over
// chunks, a TP plan entry, and the timing of each piece for the balanced split.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/param.h"
#include "models/common/model.h"

namespace trident {

// One pipeline chunk (virtual stage): a contiguous range of blocks, plus the
// embedding on the first and the final norm, head and loss on the last.
struct ChunkSpec {
  int64_t first_layer = 0;
  int64_t num_layers = 0;
  bool has_embedding = false;
  bool has_head = false;
};

// Splits `layers` over `stages` virtual stages (uniform, or `explicit_layers`
// when non-empty). Entry s is virtual stage s; which rank runs it is the
// schedule's business (sched::Schedule::stage_of).
std::vector<ChunkSpec> split_layers(int64_t layers, int64_t stages, const std::vector<int64_t>& explicit_layers);

struct PlannedParam {
  ParamInfo info;
  std::vector<int64_t> local_shape;
};

// ParamDecl::shard_dim: a weight (out, in) split over TP along its outputs
// (column-parallel; a 1-D bias of such a layer alike) or its inputs
// (row-parallel), or not split at all.
constexpr int kReplicated = -1, kColumnParallel = 0, kRowParallel = 1;

// One parameter of a TP plan as a family declares it (ParamPlan::add), each
// field set by name.
struct ParamDecl {
  std::string name;                     // global name, e.g. "layers.3.attn.qkv.weight"
  std::vector<int64_t> shape;           // the full (unsharded) shape
  int shard_dim = kReplicated;          // kReplicated | kColumnParallel | kRowParallel
  std::string init = "normal";          // "normal" | "zeros" | "ones"
  double std_dev = 0;                   // of "normal"
  bool no_decay = false;                // no weight decay: biases and norms
  bool sequence_parallel_grad = false;  // replicated but fed a sequence shard (ParamInfo)
  bool tp_partial_grad = false;         // replicated but fed this rank's heads (ParamInfo)
  bool tied_copy = false;               // a second copy of a tied parameter: the LM head's word embedding
  int64_t init_valid_rows = -1;         // rows >= this are zero at init (padded vocabulary)
  bool expert = false;                  // routed experts stacked along dim 0: split over EP (ParamInfo::expert)
  // Split along shard_dim into `shards` parts, this rank's `shard_rank` (0: the plan's tp size and
  // rank): the routed experts' etp (NOTE [expert grid]).
  int64_t shards = 0, shard_rank = 0;
};

// Builds a TP plan: each add() is one parameter, sized for TP rank `tp_rank`
// of `tp_size` (its local shape and offset along shard_dim) and, for an
// expert weight, EP rank `ep_rank` of `ep_size` (its experts along dim 0).
class ParamPlan {
 public:
  ParamPlan(int64_t tp_size, int64_t tp_rank, int64_t ep_size = 1, int64_t ep_rank = 0)
      : tp_size_(tp_size), tp_rank_(tp_rank), ep_size_(ep_size), ep_rank_(ep_rank) {}
  void add(const ParamDecl& decl);
  // A weight matrix: normal init with `std_dev`, weight decay, split along `shard_dim`.
  void add_weight(const std::string& name, std::vector<int64_t> shape, int shard_dim, double std_dev);
  std::vector<PlannedParam>& params() { return plan_; }

 private:
  int64_t tp_size_, tp_rank_, ep_size_, ep_rank_;
  std::vector<PlannedParam> plan_;
};

// Every untied parameter of `plan(spec)` over the chunks of a split, in order:
// Model::unique_params for a family whose plan is `plan`.
std::vector<ParamInfo> unique_params_of(const std::vector<ChunkSpec>& specs,
                                        const std::function<std::vector<PlannedParam>(const ChunkSpec&)>& plan);

// Position of parameter `name` (a tied copy when `tied_copy`) in `params`;
// throws std::logic_error naming `who` and the parameter when absent.
size_t param_index(const std::vector<Param>& params, const std::string& name, const char* who, bool tied_copy = false);

// Model::profile for any family: each layer alone (a chunk of that layer
// only), then a chunk with just the embedding and one with just the final
// norm, head and loss, at tp = 1, built by `make`. Each piece's cost is the
// minimum over `reps` timed forward + backward passes (after one untimed pass)
// and over two sweeps of all pieces: other work on the machine only ever adds
// time, so the minimum is the estimate a burst of interference cannot
// inflate, and the second sweep keeps one burst from landing on every
// repetition of one piece. Under TP every piece's matrices shrink alike, so
// the ratios, which are what the split uses, carry over.
LayerCosts profile_pieces(const ModelConfig& cfg, int64_t micro_batch_size, int reps,
                          const std::function<std::unique_ptr<Stage>(const ChunkSpec&)>& make);

// The differences between a pretrained model's config.json and a Trident
// config, for an error naming every one ("n_layer = 12 but model.layers = 8; ...").
class ConfigDiff {
 public:
  void number(const char* theirs, double a, const char* ours, double b);  // noted when a != b
  void note(const std::string& text);
  // Throws std::runtime_error "Hugging Face model DIR does not fit the config: ..." when any.
  void throw_if_any(const std::string& dir) const;

 private:
  std::string text_;
};

}  // namespace trident
