// A step's token tensors on the device, read from a run's samples
// (datasets/training_data.h): what the trainer hands its executor, one
// micro-batch at a time (NOTE [step batches]).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "datasets/dataset.h"
#include "datasets/documents.h"

namespace trident {

// Which samples of a step one DP rank reads, and their shape.
struct BatchShape {
  int64_t global_batch = 0, micro_batch = 0, seq_len = 0;
  int64_t microbatches = 1;  // per step per DP rank
  int64_t dp_rank = 0, dp = 1;
  int64_t cp_rank = 0, cp = 1;  // this rank keeps its chunks of each sample (NOTE [context split])
  data::DocumentOptions documents;  // off: no DocumentBatch (TrainingData::documents)
};

// NOTE [document batch]
// With any of data.reset_position_ids, reset_attention_mask, eod_mask_loss or
// completion_only_loss, micro-batch mb also has (NOTE [sample documents] in
// datasets/documents.h says what each holds, as megatron-core's GPTDataset builds it):
//   position_ids  (mbs, seq / cp) int64, device: each input's position (this cp rank's chunks);
//   loss_mask     (mbs, seq / cp) float32, device: 1 where the target's loss counts, 0 where
//                 it is dropped; weighs targets element for element;
//   cu_seqlens    (D + 1) int32, device: the document boundaries of the micro-batch's whole
//                 samples (every cp rank holds all) with its rows end to end, row r at r x seq:
//                 0 first, mbs x seq last, each r x seq one of them (flash attention's
//                 cu_seqlens_q and cu_seqlens_k); max_seqlen the longest document;
//   lengths       host: each row's document lengths (cu_seqlens' differences within the row),
//                 which spans a stage's attention computes without reading the device;
//   restarts      whether any position_ids differ from the undivided sample's 0, 1, ...
// With none of them the tensors are undefined and nothing is computed or copied.
struct DocumentBatch {
  at::Tensor position_ids, loss_mask, cu_seqlens;
  // (mbs, seq / cp) float32, device: 0 on padding, 1 elsewhere (NOTE [document counts]);
  // undefined when the micro-batch's whole samples hold no padding (alike on every cp rank:
  // whether the balancing losses take their real-token form, with its collectives, is the
  // group's). real_tokens: its sum.
  at::Tensor real;
  int64_t real_tokens = 0;
  int64_t max_seqlen = 0;
  std::vector<std::vector<int64_t>> lengths;
  bool restarts = false;
};

// NOTE [document counts]
// What a step's samples hold, for its metrics and its token-weighted loss, counted on the host
// when they are read (one DP rank's share; the trainer sums the ranks'):
//   loss_tokens  the loss mask's sum over the rank's rows at its cp positions (the labels the loss
//                counts: NOTE [token-weighted loss] in models/common/loss_mask.h);
//   padding      end-of-document tokens alone in their document (right after another one, or
//                first in the sample) that the loss-mask file marks 0: the padding `trident data
//                prepare --pack-seq-len` writes (an example's own end is marked 1). Without a
//                loss-mask file (data.completion_only_loss) nothing is padding: an eod after an
//                eod in plain text is an empty document;
//   documents    the other documents, whole samples (every cp rank counts the same ones).
// Without an end-of-document token each sample is one document with no padding.
struct DocumentCounts {
  double loss_tokens = 0, documents = 0, padding = 0;
};

// NOTE [step batches]
// A step's inputs and targets, (m x mbs, seq) int64 each, are read when its
// first micro-batch is asked for (only the first and last pipeline stages
// ask) and go to the device in one copy: on CUDA from pinned host memory
// with non_blocking, so the host queues it and goes on, and the kernels that
// read it run after it on the same stream. Micro-batch k is rows
// [k x mbs, (k+1) x mbs) of them, a view. On the CPU there is no copy and the
// rows hold what a per-micro-batch load held (same samples, same order).
// Under context parallelism the ranks of a cp group read the same samples
// and each keeps only its seq / cp positions of them (NOTE [context split]),
// sliced on the host before the copy: targets at the positions after the
// inputs' in the whole sample, so the shift comes before the split.
class StepBatches {
 public:
  StepBatches(const data::SampleSource& ds, int64_t step, BatchShape shape, c10::Device device)
      : ds_(ds), step_(step), shape_(shape), device_(device) {}
  // Micro-batch mb's (inputs, targets), (mbs, seq / cp) each.
  std::pair<at::Tensor, at::Tensor> operator()(int mb);
  // Micro-batch mb's document tensors (NOTE [document batch]); undefined tensors when the
  // shape asks for none.
  DocumentBatch documents(int mb);
  // The step's document counts (NOTE [document counts]); zeros when the shape asks for none.
  DocumentCounts counts();

 private:
  void load();
  // Positions, loss masks and boundaries of rows `samples` of tok (m x mbs, seq + 1).
  void load_documents(const std::vector<int64_t>& samples, const at::Tensor& tok);

  const data::SampleSource& ds_;
  int64_t step_;
  BatchShape shape_;
  c10::Device device_;
  at::Tensor inputs_, targets_;  // (m x mbs, seq) on device_
  at::Tensor position_ids_, loss_mask_, real_;  // (m x mbs, seq / cp) on device_, when shape_.documents.any()
  std::vector<DocumentBatch> documents_;  // per micro-batch
  std::vector<bool> padded_;              // per micro-batch: whether its whole samples hold padding
  DocumentCounts counts_;
};

}  // namespace trident
