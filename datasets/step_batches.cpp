// A step's token tensors: see step_batches.h, NOTE [step batches].
#include "datasets/step_batches.h"

#include <ATen/ATen.h>

#include "core/context_split.h"

namespace trident {

std::pair<at::Tensor, at::Tensor> StepBatches::operator()(int mb) {
  if (!inputs_.defined()) load();
  const int64_t mbs = shape_.micro_batch;
  return {inputs_.narrow(0, mb * mbs, mbs), targets_.narrow(0, mb * mbs, mbs)};
}

void StepBatches::load() {
  const int64_t mbs = shape_.micro_batch, s = shape_.seq_len, m = shape_.microbatches;
  // Pinned memory needs a CUDA device; the CPU's tensor is the one it computes on.
  at::Tensor tok = at::empty({m * mbs, s + 1}, at::TensorOptions(at::kLong).pinned_memory(device_.is_cuda()));
  int64_t row = 0;
  for (int64_t mb = 0; mb < m; ++mb)
    for (int64_t sample : ds_.micro_batch(step_, shape_.global_batch, shape_.dp_rank, shape_.dp, mb, mbs))
      ds_.copy_sample(sample, tok[row++].data_ptr<int64_t>());
  TORCH_INTERNAL_ASSERT(row == tok.size(0));
  if (shape_.cp > 1) {  // [inputs | targets] at this rank's positions, (m x mbs, 2 x seq / cp)
    const int64_t l = s / shape_.cp;
    const at::Tensor pos = at::tensor(context_positions(s, shape_.cp, shape_.cp_rank), at::kLong);
    at::Tensor mine = at::empty({m * mbs, 2 * l}, at::TensorOptions(at::kLong).pinned_memory(device_.is_cuda()));
    mine.narrow(1, 0, l).copy_(tok.index_select(1, pos));
    mine.narrow(1, l, l).copy_(tok.index_select(1, pos + 1));
    mine = mine.to(device_, /*non_blocking=*/true);
    inputs_ = mine.narrow(1, 0, l).contiguous();
    targets_ = mine.narrow(1, l, l).contiguous();
    return;
  }
  tok = tok.to(device_, /*non_blocking=*/true);  // the step's one host-to-device copy (none on the CPU)
  inputs_ = tok.narrow(1, 0, s).contiguous();
  targets_ = tok.narrow(1, 1, s).contiguous();
}

}  // namespace trident
