// The nccl-rules test backend (NOTE [NCCL rules on the CPU] in
// parallel/nccl_rules.h) against NCCL's documented point-to-point semantics:
// a pair's messages match in issue order whatever the tags; a posted receive
// holds the rank's stream; the operations of a coalesced group launch
// together; a deadlock becomes an error naming the rank and what it waits on.
// Gloo, with the same calls, is the contrast each time.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "parallel/thread_group.h"

namespace trident {
namespace {

using namespace std::chrono_literals;

at::Tensor filled(double v) { return at::full({4}, v); }

void wait_all(const Group& g, std::vector<c10::intrusive_ptr<c10d::Work>> works) {
  for (auto& w : works) wait_work(g, w, "test", -1);
}

// Rank 0 sends A (tag 1) then B (tag 2); rank 1 posts the receive tagged 2
// first. Returns what rank 1's tag-1 and tag-2 buffers got.
std::pair<double, double> crossed_tags(const std::string& backend) {
  std::pair<double, double> got{0, 0};
  const auto errors = run_thread_group("pp", 2, 10000ms, [&](Group& g) {
    if (g.rank == 0) {
      at::Tensor a = filled(1), b = filled(2);
      wait_all(g, {isend(g, a, 1, 1), isend(g, b, 1, 2)});
    } else {
      at::Tensor for_b = filled(0), for_a = filled(0);
      auto wb = irecv(g, for_b, 0, 2);
      auto wa = irecv(g, for_a, 0, 1);
      wait_all(g, {wb, wa});
      got = {for_a[0].item<double>(), for_b[0].item<double>()};
    }
  }, backend);
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""})) << backend;
  return got;
}

TEST(NcclRulesBackend, MatchesAPairsMessagesInIssueOrderNotByTag) {
  EXPECT_EQ(crossed_tags("gloo"), std::make_pair(1.0, 2.0));        // Gloo matches by tag
  EXPECT_EQ(crossed_tags("nccl-rules"), std::make_pair(2.0, 1.0));  // NCCL: the first send fills the first receive
}

// Each rank sends to the other, then receives: a send completes only when
// it is received, so as separate operations both block; coalesced they
// launch together and complete.
std::vector<std::string> exchange(const std::string& backend, bool coalesced) {
  return run_thread_group("pp", 2, 2000ms, [&](Group& g) {
    const int peer = 1 - g.rank;
    at::Tensor out = filled(g.rank + 1), in = filled(0);
    if (coalesced) {
      std::vector<P2POp> ops{{true, out, peer, 0}, {false, in, peer, 0}};
      wait_all(g, batch_isend_irecv(g, ops));
    } else {
      wait_work(g, isend(g, out, peer, 0), "send", -1);
      wait_work(g, irecv(g, in, peer, 0), "recv", -1);
    }
    if (in[0].item<double>() != peer + 1) throw std::runtime_error("received " + std::to_string(in[0].item<double>()));
  }, backend);
}

TEST(NcclRulesBackend, ASendWaitsForItsReceiveUnlessCoalesced) {
  EXPECT_EQ(exchange("nccl-rules", true), (std::vector<std::string>{"", ""}));
  const auto errors = exchange("nccl-rules", false);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("nccl-rules: rank 0 waited 1000 ms on its point-to-point stream for send #0 to rank 1"),
            std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("a deadlock under NCCL's rules"), std::string::npos) << errors[1];
}

TEST(NcclRulesBackend, APostedReceiveHoldsTheStream) {
  // Rank 0 posts a receive rank 1 only sends after it got rank 0's second
  // message. Gloo delivers the second message past the waiting receive; on
  // NCCL's stream that message never starts.
  for (const std::string backend : {"gloo", "nccl-rules"}) {
    const auto errors = run_thread_group("pp", 2, 2000ms, [&](Group& g) {
      at::Tensor x = filled(7), y = filled(0);
      if (g.rank == 0) {
        auto r = irecv(g, y, 1, 5);
        auto s = isend(g, x, 1, 6);
        wait_all(g, {s, r});
      } else {
        wait_work(g, irecv(g, y, 0, 6), "recv", -1);
        wait_work(g, isend(g, x, 0, 5), "send", -1);
      }
    }, backend);
    if (backend == "gloo") {
      EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
    } else {
      EXPECT_NE(errors[0].find("rank 0 waited 1000 ms on its point-to-point stream for receive #0 from rank 1"),
                std::string::npos) << errors[0];
    }
  }
}

TEST(NcclRulesBackend, CollectivesAreGloos) {
  const auto errors = run_thread_group("dp", 2, 10000ms, [&](Group& g) {
    at::Tensor t = filled(g.rank + 1);
    all_reduce(g, t);
    if (t[0].item<double>() != 3) throw std::runtime_error("all_reduce gave " + std::to_string(t[0].item<double>()));
  }, "nccl-rules");
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
}

// An out-of-place collective's output read before its Work is waited for
// (as soon as it changes, or after 1 s if it does not) and after: {all-gather
// before, after, reduce-scatter before, after} of element 0 on rank 1 (its
// all-gather output starts at -1; the gather brings rank 0's 1; its
// reduce-scatter part starts at -1 and gets 1 + 2). Gloo's Work does not
// report completion before a wait, so the output itself is watched.
std::vector<double> read_before_and_after_wait(const std::string& backend) {
  std::vector<double> got;
  const auto errors = run_thread_group("dp", 2, 10000ms, [&](Group& g) {
    auto unwaited = [](const at::Tensor& out) {
      const auto until = std::chrono::steady_clock::now() + 1s;
      double v = out[0].item<double>();
      while (v == -1 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(1ms);
        v = out[0].item<double>();
      }
      return v;
    };
    at::Tensor part = filled(g.rank + 1), full = at::full({8}, -1.0);
    auto w = all_gather_into_async(g, full, part);
    const double gather_before = unwaited(full);
    wait_work(g, w, "all_gather", -1);
    at::Tensor whole = at::full({8}, static_cast<double>(g.rank + 1)), mine = at::full({4}, -1.0);
    auto r = reduce_scatter_async(g, mine, whole);
    const double reduce_before = unwaited(mine);
    wait_work(g, r, "reduce_scatter", -1);
    if (g.rank == 1) got = {gather_before, full[0].item<double>(), reduce_before, mine[0].item<double>()};
  }, backend);
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""})) << backend;
  return got;
}

// NCCL defines an out-of-place collective's output only after its stream
// event (the Work's wait); Gloo writes it from its own thread as soon as it
// can, so a missing wait would go unseen. Under nccl-rules the output lands
// at the wait, so reading before it sees the old values every time.
TEST(NcclRulesBackend, IntoTensorCollectivesLandWhenWaitedFor) {
  // Gloo's all-gather output is there before the wait (its reduce-scatter
  // happens to copy out at the wait, so only the gather shows the contrast).
  const auto gloo = read_before_and_after_wait("gloo");
  ASSERT_EQ(gloo.size(), 4u);
  EXPECT_EQ(gloo[0], 1);
  EXPECT_EQ(gloo[1], 1);
  EXPECT_EQ(gloo[3], 3);
  EXPECT_EQ(read_before_and_after_wait("nccl-rules"), (std::vector<double>{-1, 1, -1, 3}));
}

}  // namespace
}  // namespace trident
