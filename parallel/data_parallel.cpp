// Data parallelism's three parts put together: see data_parallel.h.
#include "parallel/data_parallel.h"

namespace trident {

DataParallel::DataParallel(const std::vector<std::vector<Param*>>& chunks, DataParallelGroups groups,
                           DataParallelOptions opts, AdamWOptions adam, const std::map<std::string, bool>& tied_local,
                           std::map<std::string, size_t> norm_slots)
    : o_(opts) {
  std::vector<Param*> all;
  for (const auto& c : chunks) all.insert(all.end(), c.begin(), c.end());
  GradBufferOptions bo;
  bo.bucket_mb = o_.bucket_mb;
  bo.overlap = o_.overlap;
  bo.sharded = o_.zero1;
  bo.device = o_.device;
  bo.expert_dp = groups.expert_dp;
  const bool expert_parallel = groups.expert_parallel();
  buffer_ = std::make_unique<GradBuffer>(chunks, *groups.dp, bo, [&](const Param& p) {
    return grad_place(p, tied_local, o_.sequence_parallel, expert_parallel);
  });
  TiedParams tied = find_tied(all, tied_local);
  for (size_t c = 0, k = 0; c < chunks.size(); k += chunks[c].size(), ++c) chunk_start_.push_back(k);
  for (const auto& pair : tied.pairs)
    for (size_t k = 0; k < all.size(); ++k)
      if (all[k] == pair.first) tied_primaries_.push_back(k);
  finalizer_ = std::make_unique<GradFinalizer>(
      groups, std::move(tied), NormInputs{std::move(norm_slots), buffer_->owned_grads(), o_.zero1, o_.device});
  optimizer_ = std::make_unique<ZeroOptimizer>(*buffer_, adam, o_.zero1 && o_.overlap_param_gather);
}

// NOTE [gradient finalisation], top-down.
void DataParallel::finish_grad_sync() {
  buffer_->wait_reduction();                                           // 1
  finalizer_->reduce_model_parallel(buffer_->sequence_parallel_grads());  // 2
  buffer_->reduce_late();                                              // 3
}

at::Tensor DataParallel::clip_grads(double max_norm) {
  const at::Tensor norm = finalizer_->grad_norm();  // 4
  if (max_norm > 0)                                 // 5, on the device (NOTE [device guard] in framework/trainer.cpp)
    buffer_->scale(at::where(norm > max_norm, at::full_like(norm, max_norm).div_(norm + 1e-6), 1.0));
  return norm;
}

void DataParallel::step(double lr, const std::optional<at::Tensor>& skip) {
  optimizer_->step(lr, skip);  // 6
  tied_pending_ = optimizer_->gather_pending() && !tied_primaries_.empty();
  if (!tied_pending_) finalizer_->copy_tied();
}

void DataParallel::param_read(int chunk, size_t index) {
  if (!tied_pending_ && !optimizer_->gather_pending()) return;
  const size_t k = chunk_start_.at(static_cast<size_t>(chunk)) + index;
  if (tied_pending_ && buffer_->buckets()[buffer_->bucket_of(k)]->local) {
    // A tied copy (the local bucket: never gathered) takes its primaries' gathered values.
    for (size_t primary : tied_primaries_) optimizer_->wait_gather(buffer_->bucket_of(primary));
    finalizer_->copy_tied();
    tied_pending_ = false;
    return;
  }
  optimizer_->wait_gather(buffer_->bucket_of(k));
}

bool DataParallel::overlaps_param_gather() const {
  return o_.zero1 && o_.overlap_param_gather && buffer_->dp().size() > 1;
}

void DataParallel::wait_params() {
  optimizer_->wait_gather();
  if (tied_pending_) finalizer_->copy_tied(), tied_pending_ = false;
}

}  // namespace trident
