// The mixture-of-experts layer the MoE families share (Mixtral, Qwen-MoE,
// DeepSeek-V3; Megatron's moe_layer.py), in the order its data flows: the
// router (router.h), the token dispatcher's permutation and exchange
// (parallel/token_dispatcher.h), the experts (experts.h), the dispatcher's
// combine with the shared experts, and the balancing losses (moe_losses.h).
// Shapes: tokens T, hidden H, experts E, top-k K, expert width I.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "models/common/router.h"

namespace trident {

struct Documents;   // models/common/document_attention.h
struct EpContext;   // parallel/expert_parallel.h
struct Group;       // parallel/process_groups.h
struct ModelConfig;  // core/config.h
struct SideValues;  // models/common/side_values.h

// One MoE layer's weights. Shared experts: shared_gate/up/down undefined when
// the layer has none; shared_expert_gate (1, H) undefined unless a sigmoid of
// x gates them (Qwen2-MoE). bias undefined without the correction bias.
struct MoeWeights {
  at::Tensor router;              // (E, H)
  at::Tensor bias;                // (E) fp32
  at::Tensor gate, up, down;      // (E, I, H), (E, I, H), (E, H, I): this rank's experts and part
  at::Tensor shared_gate, shared_up, shared_down;  // (S, H), (S, H), (H, S)
  at::Tensor shared_expert_gate;  // (1, H)
};
struct MoeOutput {
  at::Tensor y;  // x's shape
  Routing routing;
  at::Tensor counts;        // (E) int64: the rows each expert received from this rank
  int64_t assignments = 0;  // the (token, slot) pairs routed before dropping
};

// x (T, H), or (b, s, H) with s / tp under sequence parallelism: route, dispatch, the experts,
// combine, plus the shared experts. Under expert parallelism (`ep` of size > 1) w.gate, w.up and
// w.down hold this rank's E / ep experts; under tensor parallelism their etp part (NOTE [experts
// under tensor parallelism] in parallel/token_dispatcher.h).
MoeOutput moe_forward(const at::Tensor& x, const MoeWeights& w, const RouterOptions& o,
                      const EpContext* ep = nullptr);

// NOTE [MoE block]
// A family's MoE layer with its options from the config: moe_forward, then
// each balancing loss joined to the layer's backward with its coefficient
// over the micro-batches, as the LM loss is scaled (NOTE [aux loss in the
// backward] in moe_losses.h), and the layer's statistics (NOTE [MoE stats] in
// moe_layer.cpp). The losses feed gradients only: the reported loss is the LM
// loss, as Megatron reports it.
class MoeLayer {
 public:
  explicit MoeLayer(const ModelConfig& cfg);
  const RouterOptions& options() const { return options_; }
  // x (b, s[/tp], H). `side`: the micro-batch's pooled counts in a training forward under the
  // pooled aux loss (NOTE [pooled aux loss]), else null. loss_scale: over the micro-batches.
  // `docs`: the micro-batch's documents, or null; the balancing losses leave their padding out
  // (NOTE [balancing losses over real tokens] in moe_losses.h).
  at::Tensor forward(const at::Tensor& x, const MoeWeights& w, const EpContext& ep, const Group* cp,
                     double loss_scale, const std::shared_ptr<SideValues>& side, const Documents* docs = nullptr) const;
  // This layer's row of Stage::take_moe_stats() since the last take (undefined before any
  // training forward), `bias`'s range filled in (0 without a bias); and reset.
  at::Tensor take_stats(const at::Tensor& bias);
  // The values beside each pipeline boundary tensor under the pooled aux loss: E, else 0.
  static int64_t side_width(const ModelConfig& cfg);

 private:
  RouterOptions options_;
  std::string aux_kind_;
  double aux_coeff_ = 0, z_coeff_ = 0;
  int64_t moe_layers_ = 0;
  mutable at::Tensor stats_;  // (E + kMoeStatExtra) fp64
};

}  // namespace trident
