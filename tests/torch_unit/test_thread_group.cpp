// run_thread_group (parallel/thread_group.h): many ranks of one process
// starting their collectives at the same instant, as every executor and
// data-parallel test does. libtorch's flight recorder registers a process
// group in a process-wide map at that group's first collective without
// holding its lock (NOTE [first collective] in parallel/thread_group.cpp);
// ranks that are threads of one process must not do that at the same time.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "parallel/thread_group.h"

namespace trident {
namespace {

using namespace std::chrono_literals;

// Rounds of 8 ranks whose bodies start with a collective the moment their
// group exists: each round makes 8 new process groups, so 8 registrations
// race. A corrupted map shows as a SIGSEGV (this process dies) or as wrong
// sums. A stress test: without the guard, 1 of 3 runs of 300 rounds died
// (about 1 round in 900), so one run of this test catches the race only now
// and then; with it, 4 runs of 300 rounds passed.
TEST(ThreadGroup, RanksStartingCollectivesAtOnceDoNotCorruptLibtorchsRecorder) {
  constexpr int kRanks = 8, kRounds = 60;
  for (int round = 0; round < kRounds; ++round) {
    const auto errors = run_thread_group("dp", kRanks, 20000ms, [&](Group& g) {
      at::Tensor t = at::full({4}, static_cast<double>(g.rank + 1));
      all_reduce(g, t);
      const double want = kRanks * (kRanks + 1) / 2.0;
      if (t[0].item<double>() != want)
        throw std::runtime_error("all_reduce gave " + std::to_string(t[0].item<double>()));
    });
    ASSERT_EQ(errors, std::vector<std::string>(kRanks, "")) << "round " << round;
  }
}

}  // namespace
}  // namespace trident
