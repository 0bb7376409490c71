// The optimizer of data parallelism: AdamW over the elements this rank owns
// (parallel/dp_shard.h), and under ZeRO-1 the all-gather of the updated
// shards (NOTE [ZeRO-1 reduce-scatter] there).
#pragma once

#include <memory>
#include <optional>

#include "core/optimizer.h"

namespace trident {

class GradBuffer;

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
