// The MoE layer's local permutation: see token_permutation.h.
#include "parallel/token_permutation.h"

#include <ATen/ATen.h>

#include "core/host_read.h"

namespace trident {

at::Tensor expert_counts(const at::Tensor& flat, int64_t num_experts) {
  return at::zeros({num_experts}, flat.options()).scatter_add_(0, flat, at::ones_like(flat));
}

Permutation sort_by_expert(const at::Tensor& experts, int64_t num_experts, const at::Tensor& keep) {
  Permutation p;
  at::Tensor flat = experts.reshape({-1});
  // Dropped assignments sort after every expert's and are cut off.
  if (keep.defined()) flat = at::where(keep.reshape({-1}), flat, at::full_like(flat, num_experts));
  p.order = std::get<1>(flat.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  if (keep.defined()) {
    p.counts = expert_counts(flat, num_experts + 1).narrow(0, 0, num_experts);
    p.order = p.order.narrow(0, 0, read_to_host(p.counts.sum(), "kept expert assignments").item<int64_t>());
  } else {
    p.counts = expert_counts(flat, num_experts);
  }
  p.token = p.order.div(experts.size(1), "floor");
  return p;
}

at::Tensor permute(const at::Tensor& x, const Permutation& p) { return x.index_select(0, p.token); }

at::Tensor unpermute(const at::Tensor& rows, const at::Tensor& weights, const Permutation& p, int64_t tokens) {
  const at::Tensor w = weights.reshape({-1}).index_select(0, p.order).to(rows.scalar_type()).unsqueeze(1);
  return at::zeros({tokens, rows.size(1)}, rows.options()).index_add(0, p.token, rows * w);
}

}  // namespace trident
