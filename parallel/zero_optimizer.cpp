// AdamW over a rank's owned elements and the ZeRO-1 gather: see zero_optimizer.h.
#include "parallel/zero_optimizer.h"

#include "parallel/grad_buffer.h"

namespace trident {

ZeroOptimizer::ZeroOptimizer(GradBuffer& buffer, AdamWOptions adam) : buffer_(buffer) {
  // The optimizer's segments: whole parameters, or the pieces of this rank's shards.
  std::vector<OptimSegment> segs;
  for (const OwnedGrad& o : buffer_.owned_grads()) segs.push_back({o.param, o.offset, o.numel});
  adam_ = std::make_unique<AdamW>(std::move(segs), adam);
}

void ZeroOptimizer::step(double lr, const std::optional<at::Tensor>& skip) {
  adam_->step(lr, skip);
  const Group& dp = buffer_.dp();
  if (!buffer_.sharded() || dp.size() == 1) return;
  at::NoGradGuard no_grad;
  for (const auto& b : buffer_.buckets()) {
    if (b->local) continue;  // copied from the primaries (GradFinalizer::copy_tied)
    const ShardRange own = buffer_.owned(*b);
    at::Tensor mine = b->data.narrow(0, own.lo, own.hi - own.lo).clone();  // not aliasing the output
    all_gather_into(dp, b->data, mine);
    // The gathered shards are new weights: their version moves, so the models'
    // compute-dtype copies are remade (NOTE [cast once per step] in models/common/cast_cache.h).
    b->data.unsafeGetTensorImpl()->bump_version();  // views share the counter
  }
}

}  // namespace trident
