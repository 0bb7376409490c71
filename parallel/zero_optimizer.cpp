// AdamW over a rank's owned elements and the ZeRO-1 gather: see zero_optimizer.h.
#include "parallel/zero_optimizer.h"

#include <algorithm>
#include <stdexcept>

#include <torch/csrc/autograd/variable.h>

#include "parallel/grad_buffer.h"

namespace trident {

ShardRange owned_range(int64_t padded, int64_t used, int size, int rank, bool sharded) {
  if (size < 1 || rank < 0 || rank >= size || padded % size != 0 || used > padded)
    throw std::logic_error("owned_range: bucket of " + std::to_string(padded) + " elements (" + std::to_string(used) +
                           " used) for rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (!sharded) return {0, used};
  const int64_t shard = padded / size;
  return {rank * shard, rank * shard + shard};
}

ZeroOptimizer::ZeroOptimizer(GradBuffer& buffer, AdamWOptions adam) : buffer_(buffer) {
  // The optimizer's segments: whole parameters, or the pieces of this rank's shards.
  std::vector<OptimSegment> segs;
  for (const auto& bucket : buffer_.buckets()) {
    if (bucket->local) continue;
    const ShardRange own = buffer_.owned(*bucket);
    for (size_t k : bucket->params) {
      Param* p = buffer_.params()[k];
      const int64_t at = buffer_.offset_in_bucket(k);
      const int64_t a = std::max(own.lo, at), e = std::min(own.hi, at + p->tensor.numel());
      if (a < e) segs.push_back({p, a - at, e - a});
    }
  }
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
    torch::autograd::impl::bump_version(b->data);
  }
}

}  // namespace trident
