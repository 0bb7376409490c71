// A step's token tensors: see step_batches.h, NOTE [step batches].
#include "datasets/step_batches.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/context_split.h"
#include "datasets/documents.h"

namespace trident {

std::pair<at::Tensor, at::Tensor> StepBatches::operator()(int mb) {
  if (!inputs_.defined()) load();
  const int64_t mbs = shape_.micro_batch;
  return {inputs_.narrow(0, mb * mbs, mbs), targets_.narrow(0, mb * mbs, mbs)};
}

DocumentBatch StepBatches::documents(int mb) {
  if (!inputs_.defined()) load();
  if (!shape_.documents.any()) return {};
  DocumentBatch d = documents_.at(static_cast<size_t>(mb));
  const int64_t mbs = shape_.micro_batch;
  d.position_ids = position_ids_.narrow(0, mb * mbs, mbs);
  d.loss_mask = loss_mask_.narrow(0, mb * mbs, mbs);
  if (padded_.at(static_cast<size_t>(mb))) d.real = real_.narrow(0, mb * mbs, mbs);
  return d;
}

DocumentCounts StepBatches::counts() {
  if (!inputs_.defined()) load();
  return counts_;
}

namespace {

// Adds one sample's documents and padding (NOTE [document counts]) to `c`; real[j] = 0 where
// input j is padding, else 1. mask: the sample's loss-mask bytes, or nullptr (no padding).
void count_documents(const int64_t* inputs, const uint8_t* mask, int64_t seq_len, int64_t eod, DocumentCounts& c,
                     float* real) {
  int64_t start = 0;
  for (int64_t j = 0; j < seq_len; ++j) {
    real[j] = 1;
    if (eod < 0 || inputs[j] != eod) continue;
    const bool padding = j == start && mask != nullptr && mask[j] == 0;
    if (padding) real[j] = 0;
    (padding ? c.padding : c.documents) += 1;
    start = j + 1;
  }
  if (start < seq_len) c.documents += 1;
}

}  // namespace

void StepBatches::load_documents(const std::vector<int64_t>& samples, const at::Tensor& tok) {
  const int64_t mbs = shape_.micro_batch, s = shape_.seq_len, rows = tok.size(0);
  const data::DocumentOptions& o = shape_.documents;
  at::Tensor pos = at::empty({rows, s}, at::kLong), loss = at::empty({rows, s}, at::kFloat);
  at::Tensor real = at::empty({rows, s}, at::kFloat);
  std::vector<uint8_t> mask(o.completion_only_loss ? static_cast<size_t>(s + 1) : 0);
  std::vector<int32_t> cu;
  documents_.assign(static_cast<size_t>(rows / mbs), {});
  padded_.assign(static_cast<size_t>(rows / mbs), false);
  for (int64_t row = 0; row < rows; ++row) {
    if (o.completion_only_loss) ds_.copy_sample_loss_mask(samples[static_cast<size_t>(row)], mask.data());
    const data::SampleDocuments d =
        data::sample_documents(tok[row].data_ptr<int64_t>(), mask.empty() ? nullptr : mask.data(), s, o);
    const double padding_before = counts_.padding;
    count_documents(tok[row].data_ptr<int64_t>(), mask.empty() ? nullptr : mask.data(), s, o.eod, counts_,
                    real[row].data_ptr<float>());
    if (counts_.padding > padding_before) padded_[static_cast<size_t>(row / mbs)] = true;
    std::copy(d.position_ids.begin(), d.position_ids.end(), pos[row].data_ptr<int64_t>());
    std::copy(d.loss_mask.begin(), d.loss_mask.end(), loss[row].data_ptr<float>());
    DocumentBatch& b = documents_[static_cast<size_t>(row / mbs)];
    if (row % mbs == 0) cu.assign(1, 0);
    std::vector<int64_t>& lengths = b.lengths.emplace_back();
    for (size_t k = 1; k < d.cu_seqlens.size(); ++k) {
      cu.push_back(static_cast<int32_t>((row % mbs) * s) + d.cu_seqlens[k]);
      lengths.push_back(d.cu_seqlens[k] - d.cu_seqlens[k - 1]);
      b.max_seqlen = std::max<int64_t>(b.max_seqlen, lengths.back());
    }
    for (int64_t j = 0; j < s && !b.restarts; ++j) b.restarts = d.position_ids[static_cast<size_t>(j)] != j;
    if (row % mbs == mbs - 1)
      b.cu_seqlens = at::tensor(cu, at::kInt).to(device_);
  }
  if (shape_.cp > 1) {  // this rank's positions, as its inputs
    const at::Tensor mine = at::tensor(context_positions(s, shape_.cp, shape_.cp_rank), at::kLong);
    pos = pos.index_select(1, mine);
    loss = loss.index_select(1, mine);
    real = real.index_select(1, mine);
  }
  counts_.loss_tokens = loss.sum().item<double>();  // host values, read before the copy
  if (std::find(padded_.begin(), padded_.end(), true) != padded_.end()) {  // else no copy: no micro-batch reads it
    const at::Tensor real_per_mb = real.view({rows / mbs, -1}).sum(1).to(at::kLong);
    for (int64_t mb = 0; mb < rows / mbs; ++mb)
      documents_[static_cast<size_t>(mb)].real_tokens = real_per_mb[mb].item<int64_t>();
    real_ = real.to(device_);
  }
  position_ids_ = pos.to(device_);
  loss_mask_ = loss.to(device_);
}

void StepBatches::load() {
  const int64_t mbs = shape_.micro_batch, s = shape_.seq_len, m = shape_.microbatches;
  // Pinned memory needs a CUDA device; the CPU's tensor is the one it computes on.
  at::Tensor tok = at::empty({m * mbs, s + 1}, at::TensorOptions(at::kLong).pinned_memory(device_.is_cuda()));
  int64_t row = 0;
  std::vector<int64_t> samples;
  for (int64_t mb = 0; mb < m; ++mb)
    for (int64_t sample : ds_.micro_batch(step_, shape_.global_batch, shape_.dp_rank, shape_.dp, mb, mbs)) {
      ds_.copy_sample(sample, tok[row++].data_ptr<int64_t>());
      samples.push_back(sample);
    }
  TORCH_INTERNAL_ASSERT(row == tok.size(0));
  if (shape_.documents.any()) load_documents(samples, tok);
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
