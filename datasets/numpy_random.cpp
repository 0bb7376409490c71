// NOTE [numpy RandomState]: MT19937 as numpy's legacy RandomState seeds and draws it.
#include "datasets/numpy_random.h"

#include <string>

#include "datasets/errors.h"

namespace trident::data {

namespace {

// The smallest 2^k - 1 >= v.
uint64_t mask_above(uint64_t v) {
  v |= v >> 1;
  v |= v >> 2;
  v |= v >> 4;
  v |= v >> 8;
  v |= v >> 16;
  v |= v >> 32;
  return v;
}

}  // namespace

NumpyRandomState::NumpyRandomState(uint32_t seed) { init_genrand(seed); }

NumpyRandomState::NumpyRandomState(const std::vector<uint32_t>& key) {
  if (key.empty()) throw DataError("a RandomState seed array must not be empty");
  if (key.size() == 1) {  // numpy squeezes a one-element array to an integer seed
    init_genrand(key[0]);
    return;
  }
  // init_by_array (the reference MT19937 code): init_genrand(19650218), then two
  // passes mixing the key in.
  init_genrand(19650218u);
  const size_t n = key.size();
  size_t i = 1, j = 0;
  for (size_t k = kN > n ? kN : n; k > 0; --k) {
    key_[i] = (key_[i] ^ ((key_[i - 1] ^ (key_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
    ++i, ++j;
    if (i >= kN) {
      key_[0] = key_[kN - 1];
      i = 1;
    }
    if (j >= n) j = 0;
  }
  for (size_t k = kN - 1; k > 0; --k) {
    key_[i] = (key_[i] ^ ((key_[i - 1] ^ (key_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      key_[0] = key_[kN - 1];
      i = 1;
    }
  }
  key_[0] = 0x80000000u;  // the most significant bit set: a non-zero initial state
  pos_ = kN;
}

void NumpyRandomState::init_genrand(uint32_t seed) {
  for (int p = 0; p < kN; ++p) {
    key_[static_cast<size_t>(p)] = seed;
    seed = 1812433253u * (seed ^ (seed >> 30)) + static_cast<uint32_t>(p + 1);
  }
  pos_ = kN;
}

void NumpyRandomState::generate() {
  constexpr int kM = 397;
  constexpr uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu, kMatrix = 0x9908b0dfu;
  for (int i = 0; i < kN; ++i) {
    const uint32_t y = (key_[i] & kUpper) | (key_[(i + 1) % kN] & kLower);
    key_[i] = key_[(i + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrix : 0u);
  }
  pos_ = 0;
}

uint32_t NumpyRandomState::next_uint32() {
  if (pos_ == kN) generate();
  uint32_t y = key_[static_cast<size_t>(pos_++)];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t NumpyRandomState::next_uint64() {
  const uint64_t hi = next_uint32();
  return hi << 32 | next_uint32();
}

uint64_t NumpyRandomState::interval(uint64_t max) {
  if (max == 0) return 0;
  const uint64_t mask = mask_above(max);
  uint64_t value;
  if (max <= 0xffffffffull) {
    while ((value = (next_uint32() & mask)) > max) {
    }
  } else {
    while ((value = (next_uint64() & mask)) > max) {
    }
  }
  return value;
}

int64_t NumpyRandomState::randint(int64_t low, int64_t high) {
  if (low >= high)
    throw DataError("randint(" + std::to_string(low) + ", " + std::to_string(high) + "): expected low < high");
  const uint64_t rng = static_cast<uint64_t>(high) - static_cast<uint64_t>(low) - 1;
  return static_cast<int64_t>(static_cast<uint64_t>(low) + interval(rng));
}

}  // namespace trident::data
