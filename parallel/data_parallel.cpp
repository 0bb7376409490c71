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
  buffer_ = std::make_unique<GradBuffer>(chunks, *groups.dp, bo, [&](const Param& p) {
    return grad_place(p, tied_local, o_.sequence_parallel);
  });
  finalizer_ = std::make_unique<GradFinalizer>(
      groups, find_tied(all, tied_local), NormInputs{std::move(norm_slots), buffer_->owned_grads(), o_.zero1, o_.device});
  optimizer_ = std::make_unique<ZeroOptimizer>(*buffer_, adam);
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
  finalizer_->copy_tied();
}

}  // namespace trident
