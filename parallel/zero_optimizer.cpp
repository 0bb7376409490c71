// AdamW over a rank's owned elements and the ZeRO-1 gather: see zero_optimizer.h.
#include "parallel/zero_optimizer.h"

#include "parallel/grad_buffer.h"

namespace trident {

struct ZeroOptimizer::Gather {
  at::Tensor part;  // this rank's updated shard, alive until the gather is finished
  c10::intrusive_ptr<c10d::Work> work;
};

ZeroOptimizer::ZeroOptimizer(GradBuffer& buffer, AdamWOptions adam, bool overlap_gather)
    : buffer_(buffer), overlap_gather_(overlap_gather) {
  // The optimizer's segments: whole parameters, or the pieces of this rank's shards.
  std::vector<OptimSegment> segs;
  for (const OwnedGrad& o : buffer_.owned_grads()) segs.push_back({o.param, o.offset, o.numel});
  adam_ = std::make_unique<AdamW>(std::move(segs), adam);
  gathers_.resize(buffer_.buckets().size());
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::step(double lr, const std::optional<at::Tensor>& skip) {
  wait_gather();  // a bucket that no forward read since the last step (its gather lands before AdamW writes)
  adam_->step(lr, skip);
  if (!buffer_.sharded()) return;
  at::NoGradGuard no_grad;
  const auto& buckets = buffer_.buckets();
  // The order the forward reads them (NOTE [overlapped parameter gather]): the
  // late bucket, then the others from the last (the first layers) to the first.
  std::vector<size_t> order;
  for (size_t b = 0; b < buckets.size(); ++b)
    if (buckets[b]->late) order.push_back(b);
  for (size_t b = buckets.size(); b-- > 0;)
    if (!buckets[b]->late && !buckets[b]->local) order.push_back(b);
  for (size_t b : order) {
    GradBuffer::Bucket& bucket = *buckets[b];
    if (bucket.group->size() == 1) continue;  // each shard is the whole bucket
    const ShardRange own = buffer_.owned(bucket);
    auto g = std::make_unique<Gather>();
    g->part = bucket.data.narrow(0, own.lo, own.hi - own.lo).clone();  // not aliasing the output
    g->work = all_gather_into_async(*bucket.group, bucket.data, g->part);
    gathers_[b] = std::move(g);
    ++pending_;
    if (!overlap_gather_) wait_gather(b);
  }
}

void ZeroOptimizer::wait_gather(size_t b) {
  if (!gathers_.at(b)) return;
  wait_work(*buffer_.buckets()[b]->group, gathers_[b]->work, "parameter all_gather", -1);
  gathers_[b].reset();
  --pending_;
  // The gathered shards are new weights: their version moves, so the models'
  // compute-dtype copies are remade (NOTE [cast once per step] in models/common/cast_cache.h).
  buffer_.buckets()[b]->data.unsafeGetTensorImpl()->bump_version();  // views share the counter
}

void ZeroOptimizer::wait_gather() {
  for (size_t b = 0; pending_ > 0 && b < gathers_.size(); ++b) wait_gather(b);
}

}  // namespace trident
