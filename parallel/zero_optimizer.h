// The optimizer of data parallelism: AdamW over the elements this rank owns
// (parallel/dp_shard.h), and under ZeRO-1 the all-gather of the updated
// shards (NOTE [ZeRO-1 reduce-scatter] there).
//
// NOTE [overlapped parameter gather]
// Under ZeRO-1 each rank steps only its shard of every bucket; the all-gather that brings the
// other ranks' updated shards is what the next forward needs, not the step itself. With
// `overlap_gather` (Megatron's overlap_param_gather) step() only starts the gathers, bucket by
// bucket in the order the forward reads them (the late bucket first: its layer norms and tied
// embedding belong to every chunk; then the first layers' buckets to the last layers'), and the
// first read of a parameter in the next forward finishes the gather of its bucket: the models
// report each read (Stage::set_read_gate in models/common/model.h, through CastCache), and
// DataParallel::param_read waits. So bucket k's gather runs while the layers before it compute,
// and all of them while the step's host work (logging, the next batch) runs. Anything else that
// reads the parameters between steps (evaluation, a checkpoint, the end of training) calls
// wait_gather() first. The gathered values are the same bits either way: only when they land
// moves. On NCCL the gathers run on the DP communicator while the forward's pipeline transfers
// run on the PP one, as Megatron's overlapped gather does.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/optimizer.h"

namespace trident {

class GradBuffer;

class ZeroOptimizer {
 public:
  // AdamW over what this rank owns of every bucket of `buffer` but its local
  // one (tied copies are stepped through their primaries); sharded (ZeRO-1)
  // when the buffer is. overlap_gather: NOTE [overlapped parameter gather].
  ZeroOptimizer(GradBuffer& buffer, AdamWOptions adam, bool overlap_gather = false);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;
  // One AdamW update, then (sharded, dp > 1) the all-gather of every bucket's
  // shards: finished here, or with overlap_gather only started.
  void step(double lr, const std::optional<at::Tensor>& skip = std::nullopt);
  // Finishes the started gather of `bucket` (an index into the buffer's
  // buckets); nothing when none is pending.
  void wait_gather(size_t bucket);
  void wait_gather();  // every started gather
  bool gather_pending() const { return pending_ > 0; }
  AdamW& adam() { return *adam_; }
  const AdamW& adam() const { return *adam_; }

 private:
  struct Gather;

  GradBuffer& buffer_;
  std::unique_ptr<AdamW> adam_;
  bool overlap_gather_;
  std::vector<std::unique_ptr<Gather>> gathers_;  // per bucket; null when none is started
  int pending_ = 0;                               // gathers started and not finished
};

}  // namespace trident
