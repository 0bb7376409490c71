// Document boundaries inside a sample (data.reset_position_ids,
// data.reset_attention_mask, data.eod_mask_loss) and the completion-only loss
// mask of prompt-completion data (data.completion_only_loss): what a sample
// carries beside its tokens and labels, and the loss-mask file that
// `trident data prepare` writes beside a Megatron dataset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trident::data {

// What a run asks of its samples beyond tokens and labels (all off: nothing).
struct DocumentOptions {
  bool reset_position_ids = false, reset_attention_mask = false, eod_mask_loss = false;
  bool completion_only_loss = false;  // read each dataset's PREFIX.lossmask (NOTE [loss-mask file])
  int64_t eod = -1;                   // the end-of-document id; -1 = none (then only completion_only_loss)
  bool any() const { return reset_position_ids || reset_attention_mask || eod_mask_loss || completion_only_loss; }
};

// NOTE [sample documents] (megatron-core 0.16 gpt_dataset.py, _get_ltor_masks_and_position_ids)
// A sample is L + 1 tokens t; its inputs are t[0..L), its labels t[1..L]. Everything below is
// read from the inputs alone, as megatron-core reads its `tokens`:
//   documents: an eod at input position i (i < L - 1) ends a document at i inclusive, so the
//     next one starts at i + 1 (reset_attention_mask; without it the sample is one document).
//     The boundaries are cumulative lengths: 0 = c_0 < c_1 < ... < c_D = L, position j in
//     document k iff c_k <= j < c_{k+1}; j attends to j' iff j' <= j in the same document.
//   position_ids: j - c_k of j's document with reset_position_ids, else j (the eod itself is
//     its document's last position; the restart is after it). Boundaries for positions come
//     from eods even when reset_attention_mask is off.
//   loss_mask[j] (float, weighs the loss of label t[j+1]): 0 where input t[j] is the eod
//     with eod_mask_loss (so the prediction made *from* the eod is dropped, not the eod's own);
//     with completion_only_loss also 0 where the mask file gives label t[j+1] 0 (a prompt or
//     padding token: the loss of predicting it is dropped, as TRL's labels -100 do); else 1.
struct SampleDocuments {
  std::vector<int64_t> position_ids;  // L
  std::vector<float> loss_mask;       // L
  std::vector<int32_t> cu_seqlens;    // D + 1: 0, ..., L
};

// sample: L + 1 tokens; mask: their L + 1 loss-mask bytes (nullptr unless completion_only_loss).
SampleDocuments sample_documents(const int64_t* sample, const uint8_t* mask, int64_t seq_len,
                                 const DocumentOptions& o);

// NOTE [loss-mask file]
// PREFIX.lossmask goes beside a Megatron dataset PREFIX.bin/.idx: 8 bytes of magic
// "TRDLMSK1", a little-endian u64 token count n (PREFIX.bin's tokens, every sequence back to
// back), then n bytes, one per token of PREFIX.bin in its order: 1 = the loss of predicting
// this token counts (a completion token, and the eod that ends it), 0 = it does not (prompt,
// padding). numpy reads it as np.fromfile(f, np.uint8, offset=16). A file whose count is not
// PREFIX.bin's, or that holds a byte other than 0 or 1, is refused naming it.
void write_loss_mask_file(const std::string& prefix, const std::vector<uint8_t>& mask);
// Reads PREFIX.lossmask; `tokens` is PREFIX.bin's token count. Throws DataError naming the file.
std::vector<uint8_t> read_loss_mask_file(const std::string& prefix, uint64_t tokens);
std::string loss_mask_path(const std::string& prefix);

}  // namespace trident::data
