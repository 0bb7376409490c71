// numpy.random.RandomState (the legacy generator numpy keeps bit-stable for
// reproducibility) written again in C++: Megatron's GPTDataset shuffles its
// document and sample indices with RandomState(seed).shuffle, so reproducing its
// sample order means reproducing these draws bit for bit.
//
// NOTE [numpy RandomState] (numpy 2.x, random/_mt19937.pyx, random/mtrand.pyx,
// random/src/distributions/distributions.c, random/src/mt19937/):
//   - the generator is MT19937 (Matsumoto and Nishimura 1998) with its standard
//     tempering; RandomState(int) seeds it with init_genrand(seed) (the seed
//     must be in [0, 2^32)), RandomState(array) with init_by_array(key) (an array
//     of one element is squeezed to an integer seed first);
//   - a 64-bit draw is two 32-bit ones, the first the high half;
//   - random_interval(max), a value in [0, max]: the smallest all-ones mask >= max,
//     then draws (32-bit while max < 2^32, else 64-bit) masked until one <= max;
//   - randint(low, high) (int64, the default dtype): rng = high - low - 1, the
//     masked rejection above on rng (32-bit draws while rng fits 32 bits), plus low;
//   - shuffle of a 1-D array: for i = n-1 down to 1, swap x[i] and
//     x[random_interval(i)]; the element type does not enter the draws.
// tests/unit/test_numpy_random.cpp compares every one of these with numpy itself.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace trident::data {

class NumpyRandomState {
 public:
  // RandomState(seed): init_genrand.
  explicit NumpyRandomState(uint32_t seed);
  // RandomState(key) for a 1-D array of uint32: init_by_array (one element: numpy
  // squeezes it to an integer seed, init_genrand). Throws DataError on an empty key.
  explicit NumpyRandomState(const std::vector<uint32_t>& key);

  uint32_t next_uint32();
  uint64_t next_uint64();
  // A value in [0, max], numpy's random_interval.
  uint64_t interval(uint64_t max);
  // One draw of RandomState.randint(low, high) (int64, high exclusive). Throws DataError if low >= high.
  int64_t randint(int64_t low, int64_t high);

  // RandomState.shuffle of a 1-D array.
  template <class T>
  void shuffle(std::vector<T>& x) {
    for (std::size_t i = x.size() > 0 ? x.size() - 1 : 0; i > 0; --i) {
      const auto j = static_cast<std::size_t>(interval(i));
      std::swap(x[i], x[j]);
    }
  }

 private:
  void init_genrand(uint32_t seed);
  void generate();
  static constexpr int kN = 624;
  std::array<uint32_t, kN> key_{};
  int pos_ = kN;
};

}  // namespace trident::data
