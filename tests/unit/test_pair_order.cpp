// NOTE [pair order] (schedules/pair_order.h): every generated schedule, every
// chunk count, p in {2,3,4,6,8} and m in 1..64, passes NCCL's rules (a
// pair's sends and receives are one sequence; no cycle under one stream per
// rank, a group launched as one, a receive holding its stream); the orders
// that break them are refused naming the pair and the message, or the
// deadlocked ranks.
#include <gtest/gtest.h>

#include <string>

#include "schedules/generators.h"
#include "schedules/pair_order.h"
#include "schedules/validate.h"
#include "../schedule_helpers.h"

using namespace trident::sched;
using trident::testing::unordered_communication;

namespace {

Schedule prefetched(const Schedule& s) { return trident::testing::with_prefetched_receives(s); }

std::string error_of(const Schedule& s) {
  try {
    check_pair_order(s);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(PairOrder, EveryGeneratorPassesForEveryShape) {
  int checked = 0;
  for (const std::string& kind : schedule_kinds()) {
    if (kind == "file") continue;
    for (int v : {0, 2, 3, 4}) {
      if (v != 0 && kind != "interleaved") continue;
      const int chunks = v == 0 ? default_chunks(kind) : v;
      for (int p : {2, 3, 4, 6, 8})
        for (int m = 1; m <= 64; ++m) {
          try {
            check_supported(kind, p, m, chunks);
          } catch (const ScheduleError&) {
            continue;
          }
          const Schedule s = trident::testing::placed(kind, p, m, chunks);
          EXPECT_EQ(error_of(s), "") << kind << " p=" << p << " m=" << m << " v=" << chunks;
          ++checked;
        }
    }
  }
  EXPECT_GT(checked, 1800);  // every kind ran, not just a few
}

TEST(PairOrder, EvaluationListsPass) {
  for (int p : {2, 3, 4, 6, 8})
    for (int v : {1, 2, 3})
      for (Placement pl : {Placement::loop, Placement::v})
        for (int m : {1, 2, 5, 8}) {
          if (pl == Placement::v && v != 2) continue;
          Schedule s = empty_schedule(p, m, v, pl);
          for (int r = 0; r < p; ++r) s.ranks[r] = forward_only_actions(s.stage_map(), r, m);
          EXPECT_EQ(error_of(s), "") << "p=" << p << " v=" << v << " m=" << m << " " << placement_name(pl);
        }
}

TEST(PairOrder, PrefetchedReceivesDeadlockGpipe) {
  // gpipe p = 2, m = 1 with its receives prefetched: rank 0's stream holds RB0
  // before SF0, rank 1's holds RF0 before SB0; neither send launches.
  const Schedule s = prefetched(generate("gpipe", 2, 1));
  const std::string e = error_of(s);
  EXPECT_TRUE(has(e, "deadlock under NCCL's rules")) << e;
  EXPECT_TRUE(has(e, "rank 0 position 0 (RB0) waits for rank 1's send #0")) << e;
  EXPECT_TRUE(has(e, "rank 1 position 0 (RF0) waits for rank 0's send #0")) << e;
  // Every kind's lists deadlock that way; as the executor posts them, none does.
  for (const std::string kind : {"gpipe", "1f1b", "zb-h1", "zb-v", "dualpipev"}) {
    const int m = kind == "dualpipev" ? 4 : 3;
    EXPECT_TRUE(has(error_of(prefetched(generate(kind, 2, m))), "deadlock")) << kind;
    EXPECT_EQ(error_of(generate(kind, 2, m)), "") << kind;
  }
}

TEST(PairOrder, MessagesOutOfOrderWouldSwapUnderNccl) {
  // zb-v p = 2, m = 3: rank 0 sends SF2 before SB0.1, rank 1 took RB0.1 first.
  const std::string e = error_of(unordered_communication(generate_compute("zb-v", 2, 3)));
  EXPECT_TRUE(has(e, "pair order: rank 0's message #2 to rank 1 is rank 0 position 5 (SF2)")) << e;
  EXPECT_TRUE(has(e, "rank 1's receive #2 from rank 0 is rank 1 position 12 (RB0.1)")) << e;
  // Interleaved p = 2, m = 5: B0 is sent before F3, F3 was received first.
  EXPECT_TRUE(has(error_of(unordered_communication(generate_compute("interleaved", 2, 5, 2))), "pair order:"));
  // dualpipev p = 3, m = 6 too.
  EXPECT_TRUE(has(error_of(unordered_communication(generate_compute("dualpipev", 3, 6))), "pair order:"));
  // add_communication() orders them (each receiver follows its sender).
  for (const auto& [kind, p, m, v] : std::vector<std::tuple<std::string, int, int, int>>{
           {"zb-v", 2, 3, 2}, {"interleaved", 2, 5, 2}, {"dualpipev", 3, 6, 2}, {"dualpipev", 4, 8, 2}})
    EXPECT_EQ(error_of(trident::testing::placed(kind, p, m, v)), "") << kind;
}

TEST(PairOrder, OrderedListsKeepTheirComputesAndOnlyMoveReceivesEarlier) {
  for (const auto& [kind, p, m, v] : std::vector<std::tuple<std::string, int, int, int>>{
           {"zb-v", 2, 3, 2}, {"zb-v", 4, 9, 2}, {"interleaved", 2, 5, 2}, {"interleaved", 3, 7, 3}, {"dualpipev", 3, 6, 2}}) {
    const Schedule before = unordered_communication(generate_compute(kind, p, m, v));
    const Schedule after = trident::testing::placed(kind, p, m, v);
    for (int r = 0; r < p; ++r) {
      ActionList a, b;  // everything but the receives, in order
      for (const Action& x : before.ranks[r])
        if (x.kind != ActionKind::RECV_F && x.kind != ActionKind::RECV_B) a.push_back(x);
      for (const Action& x : after.ranks[r])
        if (x.kind != ActionKind::RECV_F && x.kind != ActionKind::RECV_B) b.push_back(x);
      EXPECT_EQ(a, b) << kind << " rank " << r;
      ASSERT_EQ(before.ranks[r].size(), after.ranks[r].size());
      // Each receive is at or before its old place, counted in computes before it.
      auto computes_before = [](const ActionList& list, Action recv) {
        int n = 0;
        for (const Action& x : list) {
          if (x == recv) return n;
          n += is_compute(x.kind);
        }
        return -1;
      };
      for (const Action& x : before.ranks[r]) {
        if (x.kind == ActionKind::RECV_F || x.kind == ActionKind::RECV_B) {
          EXPECT_LE(computes_before(after.ranks[r], x), computes_before(before.ranks[r], x)) << to_token(x);
        }
      }
    }
  }
  // A schedule whose pairs agree already is unchanged.
  EXPECT_EQ(generate("1f1b", 4, 8), unordered_communication(generate_compute("1f1b", 4, 8)));
}

TEST(PairOrder, ValidateRefusesAFileOutOfPairOrder) {
  // A file with explicit communication is checked as written (the loaders keep it).
  const Schedule bad = with_reduce_grad(unordered_communication(generate_compute("zb-v", 2, 3)));
  try {
    validate(bad);
    FAIL() << "validate() accepted a list NCCL would swap";
  } catch (const ScheduleError& e) {
    EXPECT_TRUE(has(e.what(), "pair order: rank 0's message #2 to rank 1")) << e.what();
    EXPECT_TRUE(has(e.what(), "[SF2]")) << e.what();  // the grid marks both ends
  }
  // Compute-only files get ordered communication, and pass.
  EXPECT_NO_THROW(validate(generate_compute("zb-v", 2, 3)));
}
