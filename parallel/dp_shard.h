// What a data-parallel rank owns of the gradient buffer: the elements it
// reduces into, takes the norm of, clips and steps. Shared by the three parts
// of data parallelism (parallel/data_parallel.h), decided here once.
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
#include <stdexcept>
#include <string>

#include <ATen/core/Tensor.h>

#include "core/param.h"

namespace trident {

// Elements [lo, hi) of a bucket.
struct ShardRange {
  int64_t lo = 0, hi = 0;
};

// What DP rank `rank` of `size` owns of a bucket of `padded` elements (a
// multiple of size) whose first `used` hold parameters: everything used when
// not sharded, else the rank-th of `size` equal parts.
inline ShardRange owned_range(int64_t padded, int64_t used, int size, int rank, bool sharded) {
  if (size < 1 || rank < 0 || rank >= size || padded % size != 0 || used > padded)
    throw std::logic_error("owned_range: bucket of " + std::to_string(padded) + " elements (" + std::to_string(used) +
                           " used) for rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (!sharded) return {0, used};
  const int64_t shard = padded / size;
  return {rank * shard, rank * shard + shard};
}

// What this rank owns of one parameter's gradient: elements
// [offset, offset + numel) of the flattened parameter, and their gradient (a
// view of its bucket).
struct OwnedGrad {
  Param* param = nullptr;
  int64_t offset = 0, numel = 0;
  at::Tensor grad;
  int group_rank = 0;  // this rank's index in the group its bucket is reduced over
};

}  // namespace trident
