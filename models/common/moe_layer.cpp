// The MoE layer: see moe_layer.h.
#include "models/common/moe_layer.h"

#include <ATen/ATen.h>

#include "core/config.h"
#include "core/config_rules.h"
#include "models/common/document_attention.h"
#include "models/common/experts.h"
#include "models/common/model.h"
#include "models/common/moe_losses.h"
#include "models/common/side_values.h"
#include "parallel/tensor_parallel.h"
#include "parallel/token_dispatcher.h"

namespace trident {

MoeOutput moe_forward(const at::Tensor& x, const MoeWeights& w, const RouterOptions& o, const EpContext* ep) {
  const EpContext none;
  const std::unique_ptr<TokenDispatcher> dispatcher = make_token_dispatcher(ep ? *ep : none, o.experts);
  const at::Tensor tokens = dispatcher->tokens(x);
  MoeOutput out;
  out.routing = route(tokens, w.router, w.bias, o);
  const at::Tensor keep = o.capacity_factor > 0 ? keep_within_capacity(out.routing, o) : at::Tensor();
  const ExpertRows in = dispatcher->dispatch(tokens, out.routing.experts, out.routing.weights, keep);
  const at::Tensor rows = experts_swiglu(in.rows, in.counts, w.gate, w.up, w.down);
  SharedExpertsPart shared;
  if (w.shared_gate.defined()) {  // split over tp as the dense MLP
    const TpContext tp{ep ? ep->tp : nullptr};
    shared.part = [&, tp]() { return swiglu(copy_to_tp(tp, tokens), w.shared_gate, w.shared_up, w.shared_down); };
    if (w.shared_expert_gate.defined())
      shared.gate = [&]() { return at::sigmoid(at::linear(tokens, w.shared_expert_gate)); };
  }
  out.y = dispatcher->combine(rows, shared);
  out.counts = dispatcher->counts();
  out.assignments = dispatcher->assignments();
  return out;
}

MoeLayer::MoeLayer(const ModelConfig& cfg)
    : options_(router_options(cfg)),
      aux_kind_(cfg.moe_aux_loss),
      aux_coeff_(cfg.moe_aux_loss_coeff),
      z_coeff_(cfg.moe_z_loss_coeff),
      moe_layers_(config_rules::moe_layers(cfg)) {}

int64_t MoeLayer::side_width(const ModelConfig& cfg) {
  return cfg.experts > 0 && cfg.moe_aux_loss == "pooled_aux_loss" && cfg.moe_aux_loss_coeff > 0 ? cfg.experts : 0;
}

at::Tensor MoeLayer::forward(const at::Tensor& x, const MoeWeights& w, const EpContext& ep, const Group* cp,
                             double loss_scale, const std::shared_ptr<SideValues>& side, const Documents* docs) const {
  const MoeOutput out = moe_forward(x, w, options_, &ep);
  at::Tensor y = out.y;
  // NOTE [balancing losses over real tokens]: (T) in the routing's token order, or undefined.
  const at::Tensor real = docs && docs->real.defined() ? docs->real.reshape({-1}) : at::Tensor();
  const int64_t e = options_.experts;
  const bool pooled = aux_kind_ == "pooled_aux_loss";
  at::Tensor aux;
  if (pooled) {
    // NOTE [pooled aux loss]: this layer's counts join the micro-batch's (once: not in the re-forward
    // of full recomputation, which runs in the backward after the totals came in); its scores get
    // their gradient from the totals in the backward. The statistic is the layer's own pooled loss.
    const at::Tensor counts = pooled_counts(out.routing, real);
    const at::Tensor score_sums =
        real.defined() ? out.routing.aux_scores.mul(real.unsqueeze(1)).sum(0) : out.routing.aux_scores.sum(0);
    const double t = static_cast<double>(real.defined() ? docs->real_tokens : out.routing.aux_scores.size(0));
    aux = pooled_loss(counts, score_sums, t);
    if (side && !side->sealed) side->values.add_(counts);
    if (side && aux_coeff_ > 0 && at::GradMode::is_enabled())
      y = attach_pooled_aux_loss(y, score_sums, side->values,
                                 pooled_loss_factor(aux_coeff_ * loss_scale, e, static_cast<double>(moe_layers_) * t));
  } else {
    // Under context parallelism the counts are the whole sequences' (NOTE [balancing losses under
    // context parallelism]).
    aux = aux_kind_ == "seq_aux_loss" ? seq_aux_loss(out.routing, options_.top_k, x.size(0), cp, real)
                                      : switch_aux_loss(out.routing, options_.top_k, cp, real);
  }
  const at::Tensor z = z_loss(out.routing, cp, real);
  if (aux_coeff_ > 0 && !pooled) y = attach_aux_loss(y, aux * aux_coeff_, loss_scale);
  if (z_coeff_ > 0) y = attach_aux_loss(y, z * z_coeff_, loss_scale);
  // NOTE [MoE stats]: a training forward counts once per micro-batch. Under full recomputation the
  // first forward runs with grad mode off and the re-forward in the backward with it on; evaluation
  // runs with it off.
  if (at::GradMode::is_enabled()) {
    at::NoGradGuard no_grad;
    if (!stats_.defined()) stats_ = at::zeros({e + kMoeStatExtra}, x.options().dtype(at::kDouble));
    // Every column but the bias range, which take_stats() fills in once.
    stats_.narrow(0, 0, e + kMoeBiasRange)
        .add_(at::cat({out.counts.to(at::kDouble), aux.detach().to(at::kDouble).reshape({1}),
                       z.detach().to(at::kDouble).reshape({1}), at::ones({1}, stats_.options()),
                       at::full({1}, static_cast<double>(out.assignments), stats_.options())}));
  }
  return y;
}

// NOTE [MoE stats]
// A layer's row of Stage::take_moe_stats(), each column summed over the
// micro-batches since the last take: the tokens each expert received, the
// balancing loss the layer computes (model.moe_aux_loss's kind, without its
// coefficient), its z-loss, the micro-batches, the assignments routed before
// dropping (the received tokens plus the dropped ones) and the correction
// bias's range (max - min; 0 without one) times the micro-batches: the bias
// moves only after the take, so the range is read there. Rows of layers a
// stage does not hold are zero, so the trainer sums every rank's tensor over
// the world, divides the losses and the range by the micro-batches (every
// holder of a layer has the same bias) and reads it once, on a logged step.
at::Tensor MoeLayer::take_stats(const at::Tensor& bias) {
  at::Tensor out = stats_;
  stats_ = at::Tensor();
  if (out.defined() && bias.defined()) {
    at::NoGradGuard no_grad;
    const int64_t e = options_.experts;
    out[e + kMoeBiasRange].copy_((bias.max() - bias.min()).to(at::kDouble) * out[e + kMoeMicroBatches]);
  }
  return out;
}

}  // namespace trident
