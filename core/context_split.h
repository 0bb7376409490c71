// Which tokens of a sequence a context-parallel rank keeps (pure, header-only):
// what the data path slices and what the model's positions and attention
// read, so both follow one rule.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace trident {

// NOTE [context split]
// Under context parallelism (parallel.cp = cp > 1) each sequence of s tokens
// is cut into 2·cp chunks of c = s / (2·cp), and rank r of the cp group keeps
// chunks r and 2·cp−1−r, in that order (Megatron-Core's causal load
// balancing): under a causal mask the early chunks attend to little and the
// late ones to much, so each rank's pair costs the same. Inputs and labels
// are both sliced by these positions from the full (already shifted) sample,
// so a label is still the token after its input; each rank's positions go to
// the position embeddings (rotary or learned), and attention uses them for
// its causal rule. cp = 1 keeps every position.
inline std::vector<int64_t> context_positions(int64_t seq_len, int64_t cp, int64_t rank) {
  std::vector<int64_t> out;
  if (cp == 1) {
    for (int64_t t = 0; t < seq_len; ++t) out.push_back(t);
    return out;
  }
  const int64_t c = seq_len / (2 * cp);
  for (const int64_t chunk : {rank, 2 * cp - 1 - rank})
    for (int64_t t = 0; t < c; ++t) out.push_back(chunk * c + t);
  return out;
}

// The pieces of every rank, back to back in group order (rank j's 2·c tokens
// at [j·2c, (j+1)·2c)), reordered to the sequence: entry t is where sequence
// position t sits in that concatenation.
inline std::vector<int64_t> context_gather_order(int64_t seq_len, int64_t cp) {
  std::vector<int64_t> where(static_cast<size_t>(seq_len));
  for (int64_t j = 0; j < cp; ++j) {
    const std::vector<int64_t> pos = context_positions(seq_len, cp, j);
    for (size_t i = 0; i < pos.size(); ++i) where[static_cast<size_t>(pos[i])] = j * 2 * (seq_len / (2 * cp)) + static_cast<int64_t>(i);
  }
  return where;
}

// NOTE [documents under context parallelism]
// Packed documents (NOTE [packed documents]) keep the split above: no padding,
// no re-layout; every cp rank holds the whole sample's document lengths. A
// query chunk meets a key chunk in the (query span, key span) pairs of each
// document both touch, by the causal rule on global positions: an earlier key
// chunk whole, the chunk itself causally, a later one not at all. The ring and
// the all-gather compute only those pairs (memory bounded by the spans) and
// pass every block on as without documents; Ulysses holds the whole sequence
// and uses document_attention. The cost: zigzag balances one document's
// triangle, not many documents'. A rank's pairs are a subset of its pairs in
// the undivided sample, so no rank works more than there, but their spread
// grows: at cp 4, seq 256, 7 uneven documents give the slowest rank 1.47x the
// mean, a 192-token document then 8-token ones 1.75x (test_context_documents
// prints them). Megatron's per-document zigzag evens it out by padding each
// document to a multiple of 2·cp.
struct DocumentSpan {
  int64_t q_begin, q_len, k_begin, k_len;  // the rank's local rows, the block's local columns
  bool causal;                             // q and k the same positions: key <= query
};

// The pairs that rank r's queries (chunks r, 2cp−1−r) attend to in the block
// of rank j (chunks j, 2cp−1−j), for one row of document lengths summing to
// the sequence (NOTE [documents under context parallelism]). Key spans of
// one query span that touch in the block's local order are one pair.
inline std::vector<DocumentSpan> document_spans(const std::vector<int64_t>& lengths, int64_t cp, int64_t r,
                                                int64_t j) {
  int64_t s = 0;
  for (int64_t len : lengths) s += len;
  const int64_t c = s / (2 * cp);
  const int64_t q_chunks[2] = {r, 2 * cp - 1 - r}, k_chunks[2] = {j, 2 * cp - 1 - j};
  std::vector<DocumentSpan> out;
  for (int64_t qi = 0; qi < 2; ++qi) {
    const int64_t q0 = q_chunks[qi] * c;
    for (int64_t d0 = 0, d = 0; d < static_cast<int64_t>(lengths.size()); d0 += lengths[static_cast<size_t>(d++)]) {
      const int64_t d1 = d0 + lengths[static_cast<size_t>(d)], qb = std::max(d0, q0), qe = std::min(d1, q0 + c);
      if (qb >= qe) continue;
      for (int64_t ki = 0; ki < 2; ++ki) {
        const int64_t k0 = k_chunks[ki] * c, kb = std::max(d0, k0), ke = std::min(d1, k0 + c);
        if (k_chunks[ki] > q_chunks[qi] || kb >= ke) continue;
        const DocumentSpan p{qi * c + qb - q0, qe - qb, ki * c + kb - k0, ke - kb, k_chunks[ki] == q_chunks[qi]};
        DocumentSpan* last = out.empty() ? nullptr : &out.back();
        if (last && !last->causal && !p.causal && last->q_begin == p.q_begin && last->k_begin + last->k_len == p.k_begin)
          last->k_len += p.k_len;
        else
          out.push_back(p);
      }
    }
  }
  return out;
}

}  // namespace trident
