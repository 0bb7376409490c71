// Learning rate at a step: linear warm-up to the peak, then cosine decay to
// the floor at the last step (as in GPT-2/Megatron recipes). Pure.
#pragma once

#include <cmath>
#include <cstdint>

namespace trident {

// step counts from 0; the first step uses warm-up fraction 1/warmup.
inline double lr_at(int64_t step, int64_t total_steps, int64_t warmup, double peak, double floor) {
  if (warmup > 0 && step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t decay_steps = total_steps - warmup;
  if (decay_steps <= 1) return peak;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(decay_steps - 1);
  const double pi = 3.14159265358979323846;
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(pi * std::min(1.0, progress)));
}

}  // namespace trident
