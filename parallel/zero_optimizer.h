// The optimizer of data parallelism: AdamW over the elements this rank owns,
// and under ZeRO-1 the all-gather of the updated shards. Which elements a rank
// owns is decided here, once (owned_range), for the buffer, the norm and the
// clipping as much as for the optimizer.
//
// NOTE [ZeRO-1 reduce-scatter]
// With zero = 1 each DP rank keeps AdamW state for, and updates, only its
// 1/dp shard of every bucket (buckets are padded to a multiple of dp). A
// bucket's gradients are reduced by one asynchronous reduce-scatter
// (c10d's _reduce_scatter_base, which libtorch 2.x's Gloo and NCCL both
// have): each rank receives the sum of its own shard only, (n-1)/n of the
// bucket sent per rank against an all-reduce's 2(n-1)/n, into a shard-sized
// buffer that is copied into the bucket's shard once waited for. It starts as
// soon as the bucket's gradients are final, as zero = 0's all-reduce does, so
// it overlaps the backward the same way. After the step the updated shards
// are all-gathered into the flat parameter buffer in one _allgather_base.
// Gradients outside a rank's shard are left unreduced and are never read
// (the norm, the clipping and the optimizer see the shard only). The sums of
// a reduce-scatter are ordered differently from an all-reduce's, so zero = 1
// agrees with zero = 0 within fp32 rounding, not bit for bit.
#pragma once

#include <cstdint>
#include <memory>

#include "core/optimizer.h"

namespace trident {

class GradBuffer;

// Elements [lo, hi) of a bucket.
struct ShardRange {
  int64_t lo = 0, hi = 0;
};

// What DP rank `rank` of `size` owns of a bucket of `padded` elements (a
// multiple of size) whose first `used` hold parameters: everything used when
// not sharded, else the rank-th of `size` equal parts.
ShardRange owned_range(int64_t padded, int64_t used, int size, int rank, bool sharded);

class ZeroOptimizer {
 public:
  // AdamW over what this rank owns of every bucket of `buffer` but its local
  // one (tied copies are stepped through their primaries); sharded (ZeRO-1)
  // when the buffer is.
  ZeroOptimizer(GradBuffer& buffer, AdamWOptions adam);
  // One AdamW update, then (sharded, dp > 1) the all-gather of every bucket's shards.
  void step(double lr, const std::optional<at::Tensor>& skip = std::nullopt);
  AdamW& adam() { return *adam_; }
  const AdamW& adam() const { return *adam_; }

 private:
  GradBuffer& buffer_;
  std::unique_ptr<AdamW> adam_;
};

}  // namespace trident
