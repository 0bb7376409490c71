// The MoE token dispatchers: see token_dispatcher.h.
#include "parallel/token_dispatcher.h"

#include <ATen/ATen.h>

#include "parallel/tensor_parallel.h"
#include "parallel/token_permutation.h"

namespace trident {

TokenDispatcher::TokenDispatcher(const EpContext& ep, int64_t num_experts) : ep_(ep), num_experts_(num_experts) {}

at::Tensor TokenDispatcher::tokens(const at::Tensor& x) {
  const at::Tensor whole = ep_.sequence_parallel ? gather_along(TpContext{ep_.tp}, x, 1) : x;
  shape_ = whole.sizes().vec();
  return whole.reshape({-1, whole.size(-1)});
}

ExpertRows TokenDispatcher::dispatch(const at::Tensor& tokens, const at::Tensor& experts, const at::Tensor& weights,
                                     const at::Tensor& keep) {
  // NOTE [experts under tensor parallelism]: this rank's token slice (of tp / etp) into its experts' part (of etp).
  const TpContext sl{ep_.token_slices}, et{ep_.expert_tp};
  at::Tensor xs = tokens, w = weights, e = experts, kept = keep;
  if (sl.size() > 1) {
    const int64_t part = tokens.size(0) / sl.size();
    xs = scatter_along(sl, tokens, 0);
    w = scatter_along(sl, weights, 0);
    e = experts.narrow(0, sl.rank() * part, part);
    if (kept.defined()) kept = kept.narrow(0, sl.rank() * part, part);
  }
  if (et.size() > 1) {  // each rank's experts give a part of every output: the gradients of both are sums
    xs = copy_to_tp(et, xs);
    w = copy_to_tp(et, w);
  }
  tokens_ = xs.size(0);
  assignments_ = e.numel();
  return exchange(xs, e, w, kept);
}

at::Tensor TokenDispatcher::combine(const at::Tensor& rows, const SharedExpertsPart& shared) {
  const TpContext tp{ep_.tp}, sl{ep_.token_slices}, et{ep_.expert_tp};
  const bool slices = sl.size() > 1, split = et.size() > 1;
  // The routed and the shared parts summed on this rank and reduced once where the experts split
  // over all of tp and no gate reads the whole shared output.
  const bool once = split && !slices && !shared.gate;
  at::Tensor y = exchange_back(rows);
  if (split && !once) y = reduce_from_tp(et, y);
  if (slices) y = gather_along(sl, y, 0);
  if (shared.part) {
    at::Tensor s = shared.part();
    if (!once) s = reduce_from_tp(tp, s);
    if (shared.gate) s = shared.gate() * s;
    y = y + s;
  }
  if (once && !ep_.sequence_parallel) y = reduce_from_tp(tp, y);
  y = y.view(shape_);
  if (ep_.sequence_parallel) y = once ? reduce_scatter_seq(tp, y) : scatter_along(tp, y, 1);
  return y;
}

namespace {

// NOTE [expert dispatch] in parallel/expert_parallel.h; at ep = 1 the permuted rows themselves.
class AllToAllDispatcher : public TokenDispatcher {
 public:
  using TokenDispatcher::TokenDispatcher;

 protected:
  ExpertRows exchange(const at::Tensor& x, const at::Tensor& experts, const at::Tensor& weights,
                      const at::Tensor& keep) override {
    permutation_ = sort_by_expert(experts, num_experts_, keep);
    counts_ = permutation_.counts;
    weights_ = weights;
    const at::Tensor sorted = permute(x, permutation_);
    if (ep_.size() == 1) return {sorted, permutation_.counts};
    exchange_ = plan_exchange(ep_, permutation_.counts);
    return {dispatch_rows(ep_, sorted, exchange_), exchange_.local_counts};
  }
  at::Tensor exchange_back(const at::Tensor& rows) override {
    const at::Tensor home = ep_.size() == 1 ? rows : combine_rows(ep_, rows, exchange_);
    return unpermute(home, weights_, permutation_, tokens_);
  }

 private:
  Permutation permutation_;
  ExpertExchange exchange_;
  at::Tensor weights_;
};

// NOTE [all-gather dispatch]
// parallel.moe_dispatcher = "allgather" (Megatron's allgather dispatcher): every
// rank of the expert-parallel group gathers the group's tokens (T x ep rows,
// autograd: the backward reduce-scatters their gradients) with their chosen
// experts and weights, permutes the rows routed to its own experts (by local
// expert, then source rank, token and slot: the all-to-all's order),
// unpermutes its experts' outputs into a (T x ep, H) buffer, and one
// reduce-scatter sums the ranks' buffers and leaves each rank its own tokens'
// rows. No counts are exchanged; the kept rows are one host read. Each token's
// outputs are summed per rank and then over the ranks: equal to the
// all-to-all's within rounding, not in bits. It moves every token to every
// rank (ep x the all-to-all's volume at most), for small groups and fast links.
class AllGatherDispatcher : public TokenDispatcher {
 public:
  using TokenDispatcher::TokenDispatcher;

 protected:
  ExpertRows exchange(const at::Tensor& x, const at::Tensor& experts, const at::Tensor& weights,
                      const at::Tensor& keep) override {
    const int64_t n = ep_.size(), local = num_experts_ / n, t = x.size(0), k = experts.size(1);
    counts_ = sort_by_expert(experts, num_experts_, keep).counts;
    // A dropped assignment's expert is -1: no rank's (NOTE [expert capacity]).
    const at::Tensor chosen = keep.defined() ? at::where(keep, experts, -1) : experts;
    const TpContext group{ep_.group};
    const at::Tensor all_x = gather_seq(group, x.unsqueeze(0)).squeeze(0);  // (n T, H)
    weights_ = gather_seq(group, weights.unsqueeze(0)).squeeze(0);           // (n T, K)
    at::Tensor all_e = at::empty({n, t, k}, chosen.options()), part = chosen.contiguous();
    all_gather_into(*ep_.group, all_e, part);
    // Local expert ids; every other rank's experts are not kept here.
    const at::Tensor ids = all_e.view({n * t, k}) - ep_.rank() * local;
    permutation_ = sort_by_expert(ids, local, ids.ge(0).logical_and(ids.lt(local)));
    return {permute(all_x, permutation_), permutation_.counts};
  }
  at::Tensor exchange_back(const at::Tensor& rows) override {
    const at::Tensor summed = unpermute(rows, weights_, permutation_, ep_.size() * tokens_);
    return reduce_scatter_seq(TpContext{ep_.group}, summed.unsqueeze(0)).squeeze(0);
  }

 private:
  Permutation permutation_;
  at::Tensor weights_;
};

}  // namespace

std::unique_ptr<TokenDispatcher> make_token_dispatcher(const EpContext& ep, int64_t num_experts) {
  if (ep.size() > 1 && ep.allgather) return std::make_unique<AllGatherDispatcher>(ep, num_experts);
  return std::make_unique<AllToAllDispatcher>(ep, num_experts);
}

}  // namespace trident
