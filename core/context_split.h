// Which tokens of a sequence a context-parallel rank keeps (pure, header-only):
// what the data path slices and what the model's positions and attention
// read, so both follow one rule.
#pragma once

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

}  // namespace trident
