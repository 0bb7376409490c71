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
  finalizer_ = std::make_unique<GradFinalizer>(groups, find_tied(all, tied_local), std::move(norm_slots));
  optimizer_ = std::make_unique<ZeroOptimizer>(*buffer_, adam);
}

void DataParallel::finish_grad_sync() {
  buffer_->reduce([&](at::Tensor sp_grads) { finalizer_->reduce_model_parallel(sp_grads); });
}

void DataParallel::step(double lr, const std::optional<at::Tensor>& skip) {
  optimizer_->step(lr, skip);
  finalizer_->copy_tied();
}

}  // namespace trident
