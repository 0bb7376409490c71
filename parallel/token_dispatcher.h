// The MoE layer's token dispatcher (Megatron's token_dispatcher.py): what
// moves the routed tokens to the ranks and tp parts of their experts and their
// outputs back, with one interface and two kinds behind it
// (parallel.moe_dispatcher): the all-to-all (NOTE [expert dispatch] in
// parallel/expert_parallel.h) and the all-gather (NOTE [all-gather dispatch]
// in token_dispatcher.cpp). Each owns its exchange, the tp/etp slicing of the
// tokens and the layer's one reduction; the experts run between dispatch() and
// combine() (models/common/moe_layer.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "parallel/expert_parallel.h"

namespace trident {

// NOTE [experts under tensor parallelism]
// Under tp > 1 every tp rank routes the whole micro-batch alike (tokens()
// gathers the sequence slices under sequence parallelism), so drops and choices
// are tp = 1's. Then, with parallel.etp (NOTE [expert grid] in parallel/layout.h):
// etp = tp splits each expert along its width over tp as the dense MLP, the rows
// and weights entering as copy_to_tp does and the outputs' parts summed over
// tp; etp = 1 keeps whole experts, tp rank r taking the r-th of tp equal token
// slices (the other slices' gradients gathered back) and the slices' outputs
// gathered (the tp ranks are then ep places of their own); 1 < etp < tp does
// both, tp index t being part t mod etp of slice t / etp. The shared experts'
// part (split over tp as the dense MLP) is summed with the routed part and the
// sum reduced once (reduce-scattered under sequence parallelism) where the
// experts split over all of tp, but under a shared-expert gate, which reads the
// whole shared output. The counts are the slice's, on each of its etp ranks.

// The shared experts beside the routed ones: `part` gives this rank's tp part of their output (a
// sum over tp), `gate`, when set, the (T, 1) factor of the whole output (Qwen2-MoE's sigmoid gate).
// Called by combine() where their sum joins the routed part's reductions.
struct SharedExpertsPart {
  std::function<at::Tensor()> part;
  std::function<at::Tensor()> gate;
};

// What this rank's experts compute on: their rows sorted by local expert.
struct ExpertRows {
  at::Tensor rows;    // (R, H)
  at::Tensor counts;  // (local experts) int64: rows per local expert
};

class TokenDispatcher {
 public:
  TokenDispatcher(const EpContext& ep, int64_t num_experts);
  virtual ~TokenDispatcher() = default;
  TokenDispatcher(const TokenDispatcher&) = delete;
  TokenDispatcher& operator=(const TokenDispatcher&) = delete;

  // x: the layer's input, (T, H) or (b, s, H) (s / tp under sequence parallelism) -> (T, H), the
  // whole micro-batch's tokens that the router reads.
  at::Tensor tokens(const at::Tensor& x);
  // tokens() (T, H); experts, weights (T, K); keep (T, K) bool or undefined (NOTE [expert capacity]).
  ExpertRows dispatch(const at::Tensor& tokens, const at::Tensor& experts, const at::Tensor& weights,
                      const at::Tensor& keep);
  // The experts' outputs in dispatch()'s order -> the layer's output in x's layout: each token's
  // weighted outputs plus the shared experts', reduced over tp.
  at::Tensor combine(const at::Tensor& rows, const SharedExpertsPart& shared = {});

  const at::Tensor& counts() const { return counts_; }  // (E) int64: this rank's rows per expert
  int64_t assignments() const { return assignments_; }  // the (token, slot) pairs routed before dropping

 protected:
  // This rank's token slice (T', H) and its experts, weights, kept -> the local experts' rows.
  virtual ExpertRows exchange(const at::Tensor& x, const at::Tensor& experts, const at::Tensor& weights,
                              const at::Tensor& keep) = 0;
  // The local experts' outputs -> (T', H): each token's weighted outputs summed.
  virtual at::Tensor exchange_back(const at::Tensor& rows) = 0;

  EpContext ep_;
  int64_t num_experts_;
  at::Tensor counts_;
  int64_t tokens_ = 0;  // T'

 private:
  std::vector<int64_t> shape_;  // x's
  int64_t assignments_ = 0;
};

// The kind parallel.moe_dispatcher names (ep.allgather at ep > 1), else the all-to-all one.
std::unique_ptr<TokenDispatcher> make_token_dispatcher(const EpContext& ep, int64_t num_experts);

}  // namespace trident
