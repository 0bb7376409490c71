// Overlapped forward-backward pairs (NOTE [overlapped pairs] in
// schedules/overlap.h): which F and B become pairs, what moves, the text
// form, the validator's rules and the simulator's price.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schedules/expert_order.h"
#include "schedules/generators.h"
#include "schedules/overlap.h"
#include "schedules/simulate.h"
#include "schedules/validate.h"
#include "../schedule_helpers.h"

using namespace trident::sched;

namespace {

std::string error_of(const Schedule& s) { return trident::testing::validation_error(s); }

// The list's forwards, backwards (B, I) or W, in order, without flags.
ActionList of_kind(const ActionList& list, int which) {
  ActionList out;
  for (Action a : list) {
    const int k = a.kind == ActionKind::F ? 0 : is_backward(a.kind) ? 1 : a.kind == ActionKind::W ? 2 : -1;
    if (k == which) a.flags = 0, out.push_back(a);
  }
  return out;
}

int pairs_on(const Schedule& s, int r) {
  int n = 0;
  for (const Action& a : s.ranks[r]) n += a.overlaps_next() ? 1 : 0;
  return n;
}

TEST(OverlapPairs, EveryOverlapKindGetsPairsAndKeepsItsComputeOrder) {
  struct Case {
    const char* kind;
    int p, m, v;
  };
  for (const Case& c : {Case{"1f1b", 4, 8, 1}, Case{"interleaved", 2, 4, 2}, Case{"zb-h1", 4, 8, 1},
                        Case{"zb-v", 2, 8, 2}, Case{"dualpipev", 2, 8, 2}, Case{"1f1b", 2, 2, 1}}) {
    SCOPED_TRACE(std::string(c.kind) + " p=" + std::to_string(c.p) + " m=" + std::to_string(c.m));
    const Schedule plain = generate(c.kind, c.p, c.m, c.v);
    const Schedule paired = overlap_pairs(plain);
    EXPECT_NO_THROW(validate(paired));
    EXPECT_GT(count_pairs(paired), 0);
    for (int r = 0; r < c.p; ++r) {
      // Forwards move up to backwards; each kind keeps its order (so every
      // gradient is added in the same order: the same numbers bit for bit).
      for (int k = 0; k < 3; ++k) EXPECT_EQ(of_kind(paired.ranks[r], k), of_kind(plain.ranks[r], k)) << "rank " << r;
      EXPECT_EQ(paired.ranks[r].size(), plain.ranks[r].size());
      for (size_t i = 0; i < paired.ranks[r].size(); ++i) {
        if (!paired.ranks[r][i].overlaps_next()) continue;
        const Action &f = paired.ranks[r][i], &b = paired.ranks[r][pair_partner(paired.ranks[r], i)];
        EXPECT_EQ(f.kind, ActionKind::F);
        EXPECT_TRUE(is_backward(b.kind)) << to_token(b);
        EXPECT_FALSE(f.mb == b.mb && f.chunk == b.chunk);
      }
    }
  }
}

// A backward that is already a pair's partner is no candidate, also when
// the F's sends sit between the two: pairing a paired list changes nothing,
// with no candidate to try (not even all at once: no one-at-a-time search).
TEST(OverlapPairs, PairingAPairedListChangesNothing) {
  for (const char* kind : {"1f1b", "zb-h1"}) {
    const Schedule once = overlap_pairs(generate(kind, 4, 8));
    ASSERT_GT(count_pairs(once), 0) << kind;
    EXPECT_EQ(overlap_pairs(once, /*one_by_one=*/false), once) << kind;
  }
}

TEST(OverlapPairs, OneFOneBPairsEachBackwardWithTheForwardAfterIt) {
  // Rank r runs p-1-r warm-up forwards, then m-(p-1-r) times F then B, then
  // the rest of the backwards: each steady B but the last is followed by a
  // forward, which moves up to run with it (Megatron's extra warm-up forward).
  const int p = 4, m = 8;
  const Schedule s = overlap_pairs(generate("1f1b", p, m));
  for (int r = 0; r < p; ++r) EXPECT_EQ(pairs_on(s, r), m - p + r) << "rank " << r;
  // The receive of the forward's input sits before the pair, the F's send between its halves.
  const ActionList& r1 = s.ranks[1];
  for (size_t i = 0; i < r1.size(); ++i) {
    if (!r1[i].overlaps_next()) continue;
    const size_t j = pair_partner(r1, i);
    const Action f = r1[i], b = r1[j];
    bool recv_before = false, send_after = false;
    for (size_t k = 0; k < i; ++k) recv_before |= r1[k] == Action(ActionKind::RECV_F, f.mb, f.chunk);
    for (size_t k = i + 1; k < j; ++k) send_after |= r1[k] == Action(ActionKind::SEND_F, f.mb, f.chunk);
    EXPECT_TRUE(recv_before && send_after) << to_token(f) << to_token(b);  // the F's send between the two
    EXPECT_EQ(b.mb, f.mb - 3) << "rank 1 pairs F(k + p-1-r + 1) with B(k)";
  }
}

TEST(OverlapPairs, TextFormWritesAPairAsOneToken) {
  const Schedule s = overlap_pairs(generate("1f1b", 2, 2));
  const std::string text = to_text(s);
  EXPECT_NE(text.find(" F1+B0 "), std::string::npos) << text;  // the last stage: nothing sent
  EXPECT_EQ(parse_text(text), s);
  const Schedule z = overlap_pairs(generate("zb-h1", 4, 8));  // pairs with the F's sends inside
  const std::string ztext = to_text(z);
  EXPECT_NE(ztext.find("+SF"), std::string::npos) << ztext;
  EXPECT_EQ(parse_text(ztext), z);
  for (const Action& a : s.ranks[0]) EXPECT_EQ(to_token(a).back() == '+', a.overlaps_next()) << to_token(a);
}

TEST(OverlapPairs, ValidatorRefusesAPairThatIsNotAnFAndTheBackwardRightAfterIt) {
  // Compute-only lists: the validator adds the communication itself.
  auto with = [](const std::string& rank0) { return parse_text("pipeline p=2 m=2 v=1\n0: " + rank0 + "\n1: F0 B0 F1 B1 RD\n"); };
  EXPECT_EQ(error_of(with("F0 F1+B0 B1 RD")), "");
  EXPECT_EQ(error_of(with("F0 F1+I0 W0 B1 RD")), "");  // an I for partner, its W later
  EXPECT_THROW(parse_text("pipeline p=2 m=2 v=1\n0: F0 F1+W0 B1 RD\n1: F0 B0 F1 B1 RD\n"), ScheduleError);
  EXPECT_THROW(parse_text("pipeline p=2 m=2 v=1\n0: F0 B0+F1 B1 RD\n1: F0 B0 F1 B1 RD\n"), ScheduleError);
  // Flags set by hand where the text form cannot write them.
  Schedule s = with("F0 F1 B0 B1 RD");
  s.ranks[0][2].flags = Action::kOverlapNext;  // on B0
  EXPECT_NE(error_of(s).find("only an F may"), std::string::npos) << error_of(s);
  s = with("F0 F1 B0 B1 RD");
  s.ranks[0][1].flags = 2;
  EXPECT_NE(error_of(s).find("the only flag is the overlapped pair's"), std::string::npos) << error_of(s);
  s = with("F0 B0 F1 B1 RD");
  s.ranks[0][0].flags = Action::kOverlapNext;  // F0 with its own B0
  EXPECT_NE(error_of(s).find("paired with its own backward"), std::string::npos) << error_of(s);
  // A pair waits for both inputs: rank 0's F1 cannot start before B0's gradient, which rank 1
  // makes only after its F1, which needs rank 0's F1. Two actions one after the other would run.
  EXPECT_EQ(error_of(parse_text("pipeline p=2 m=2 v=1\n0: F0 F1 B0 B1 RD\n1: F0 F1 B0 B1 RD\n")), "");
  const std::string cycle = error_of(parse_text("pipeline p=2 m=2 v=1\n0: F0 F1+B0 B1 RD\n1: F0 F1 B0 B1 RD\n"));
  EXPECT_NE(cycle.find("deadlock"), std::string::npos) << cycle;
  // Communication between the two halves of a pair.
  Schedule placed = generate("1f1b", 2, 2);
  for (size_t i = 0; i < placed.ranks[0].size(); ++i)
    if (placed.ranks[0][i] == Action(ActionKind::F, 1)) placed.ranks[0][i].flags = Action::kOverlapNext;
  EXPECT_NE(error_of(placed).find("receives the input of"), std::string::npos) << error_of(placed);
}

TEST(OverlapPairs, SimulatorPricesAPairAsTheLongestOfItsChainsAndResources) {
  EXPECT_DOUBLE_EQ(overlapped_pair_cost(1, 0, 2, 0), 3);      // nothing to hide: one after the other
  EXPECT_DOUBLE_EQ(overlapped_pair_cost(1, 0.5, 2, 0.5), 2);  // each all-to-all under the other's compute
  EXPECT_DOUBLE_EQ(overlapped_pair_cost(1, 1, 1, 1), 2);      // all communication: the network is the bound
  EXPECT_DOUBLE_EQ(overlapped_pair_cost(1, 0.9, 3, 0.1), 3);  // the longer chain alone
  // p = 2, m = 2, 1F1B, F = 1, B = 2, W = 1 and half of F and of B all-to-all.
  // Rank 1 pairs F1 with B0: rank 0 runs F0 [0,1] and F1 [1,2]; rank 1 F0
  // [1,2], then the pair once F1's input is in at 2: 2 + max(3 - 1, 1, 2, 1)
  // = 4; rank 0 B0 [4,6]; rank 1 B1 [4,6]; rank 0 B1 [6,8]. Without the pair
  // rank 1 runs F1 [3,4] and B1 [4,6] after B0 [2,3]... the step is 9.
  Costs c;
  c.forward = 1, c.backward = 2, c.weight = 1, c.expert_comm = 0.5;
  const Schedule plain = generate("1f1b", 2, 2), paired = overlap_pairs(plain);
  EXPECT_DOUBLE_EQ(simulate_stats(paired, c).step_time, 8);
  EXPECT_DOUBLE_EQ(simulate_stats(plain, c).step_time, 9);
  const Timeline t = simulate(paired, c);
  for (const TimedAction& a : t.ranks[1])
    if (a.action.mb == 0 && a.action.kind == ActionKind::B) {
      EXPECT_EQ(std::make_pair(a.start, a.end), std::make_pair(2.0, 4.0));
    }
  // Many micro-batches, all-to-alls half of each action: ZB-H1's pairs hide
  // them (its W fill the gaps), 1F1B's barely (each pair waits for the
  // forward the previous stage's pair makes), and with nothing to hide pairs
  // only wait longer. Figures of the simulator, stated to catch a change.
  auto step = [](const char* kind, int p, int m, double a, bool pairs) {
    Costs k;
    k.forward = 1, k.backward = 2, k.weight = 1, k.expert_comm = a;
    const Schedule s = generate(kind, p, m);
    return simulate_stats(pairs ? overlap_pairs(s) : s, k).step_time;
  };
  EXPECT_DOUBLE_EQ(step("zb-h1", 4, 16, 0.5, false), 51);
  EXPECT_DOUBLE_EQ(step("zb-h1", 4, 16, 0.5, true), 39);
  EXPECT_DOUBLE_EQ(step("1f1b", 2, 16, 0.5, false), 51);
  EXPECT_DOUBLE_EQ(step("1f1b", 2, 16, 0.5, true), 50);
  EXPECT_GT(step("1f1b", 2, 16, 0.0, true), step("1f1b", 2, 16, 0.0, false));
  // expert_comm is part of F and of I.
  c.expert_comm = 1.5;
  EXPECT_THROW(check_costs(c, 2, 1), ScheduleError);
}

TEST(OverlapPairs, NeedsItsInputValidAndPlaced) {
  // Compute-only: the same pairs, and add_communication() puts the partner's receive before the F.
  const Schedule bare = overlap_pairs(generate_compute("1f1b", 2, 4));
  EXPECT_EQ(count_pairs(bare), count_pairs(overlap_pairs(generate("1f1b", 2, 4))));
  EXPECT_NO_THROW(validate(add_communication(bare)));
  EXPECT_NE(to_text(add_communication(bare)).find(" RB0 F2+SF2+B0 "), std::string::npos) << to_text(add_communication(bare));
  Schedule broken = generate("1f1b", 2, 4);
  broken.ranks[1].pop_back();
  EXPECT_THROW(overlap_pairs(broken), ScheduleError);
  const Schedule gpipe = generate("gpipe", 2, 4);  // each F run before any B: only the turn, its own micro-batch
  EXPECT_EQ(overlap_pairs(gpipe), gpipe);
}

}  // namespace

namespace {

// NOTE [all-to-all order] in schedules/expert_order.h.
TEST(ExpertOrder, ForwardsInLayerOrderBackwardsReversedAndNoneWithoutMoeLayers) {
  const Schedule s = generate("1f1b", 2, 2);  // rank 0: F0 F1 B0 B1
  const auto calls = expert_calls(s.ranks[0], {{1, 2}});
  const std::vector<ExpertCall> fwd = {{0, 0, 1}, {0, 0, 2}, {1, 0, 1}, {1, 0, 2}};
  const std::vector<ExpertCall> bwd = {{0, 0, 2}, {0, 0, 1}, {1, 0, 2}, {1, 0, 1}};
  EXPECT_EQ(calls[0], fwd);
  EXPECT_EQ(calls[1], bwd);
  const Schedule v = generate("zb-v", 2, 4);  // chunk 0 without MoE layers: only chunk 1's calls
  const auto vcalls = expert_calls(v.ranks[0], {{}, {6}});
  EXPECT_EQ(vcalls[0].size(), 4u);
  for (const ExpertCall& c : vcalls[0]) EXPECT_EQ(c.layer, 6);
}

TEST(ExpertOrder, PairsKeepEachGroupsOrderAndAPlantedSwapIsRefusedNamingRankMicroBatchAndLayer) {
  const Schedule plain = generate("1f1b", 2, 8), paired = overlap_pairs(plain);
  const std::vector<std::vector<int>> moe = {{0, 1}};
  // A pair moves forwards up past backwards: each group's own order is unchanged.
  EXPECT_NO_THROW(check_expert_order({&plain.ranks[1], &paired.ranks[1]}, {4, 5}, moe));
  ActionList swapped = paired.ranks[1];  // the planted bug: one replica runs F3 before F2
  size_t f2 = 0, f3 = 0;
  for (size_t i = 0; i < swapped.size(); ++i) {
    if (swapped[i].kind == ActionKind::F && swapped[i].mb == 2) f2 = i;
    if (swapped[i].kind == ActionKind::F && swapped[i].mb == 3) f3 = i;
  }
  std::swap(swapped[f2].mb, swapped[f3].mb);
  try {
    check_expert_order({&paired.ranks[1], &swapped}, {4, 5}, moe);
    FAIL() << "a swapped forward passed";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 5 issues its forward all-to-all number 4 for micro-batch 3 layer 0 "
                                         "where rank 4 of its expert-parallel group issues micro-batch 2 layer 0"),
              std::string::npos)
        << e.what();
  }
}

// One member's list from its tokens (NOTE [all-to-all order]'s inputs:
// only F, B, I and W matter; a chunk suffix ".1" as in the text form).
ActionList list_of(const std::string& tokens) { return parse_text("pipeline p=1 m=8 v=2\n0: " + tokens).ranks[0]; }

// The validator's message for members written as tokens (global ranks 4, 5,
// 6, ... in order), "" where it accepts them.
std::string order_error(const std::vector<std::string>& members, const std::vector<std::vector<int>>& moe) {
  std::vector<ActionList> lists;
  for (const std::string& m : members) lists.push_back(list_of(m));
  std::vector<const ActionList*> ptrs;
  std::vector<int> ranks;
  for (size_t i = 0; i < lists.size(); ++i) ptrs.push_back(&lists[i]), ranks.push_back(4 + static_cast<int>(i));
  try {
    check_expert_order(ptrs, ranks, moe);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

// Every way a member's sequence can part from the first member's, on either
// group, is refused naming the member's global rank, the group, the call's
// number and both sides' calls: a skipped call (at the end, in the middle, or
// on the first member's side), a backward order swapped (B, or I: both
// all-to-alls of the backward group), another chunk's layer first, and a
// third member differing where the second agrees.
TEST(ExpertOrder, EveryWayOfPartingIsRefusedNamingRankGroupNumberAndBothCalls) {
  const std::vector<std::vector<int>> one = {{0, 1}}, two = {{0, 1}, {3}};
  struct Case {
    std::vector<std::string> members;
    std::vector<std::vector<int>> moe;
    std::string message;
  };
  const Case cases[] = {
      {{"F0 F1 B0 B1", "F0 F1 B0"}, one,
       "rank 5 issues its backward all-to-all number 2 for nothing (its sequence ends there) where rank 4 of its "
       "expert-parallel group issues micro-batch 1 layer 1"},
      {{"F0 F1 F2 B0 B1 B2", "F0 F2 B0 B1 B2"}, one,
       "rank 5 issues its forward all-to-all number 2 for micro-batch 2 layer 0 where rank 4 of its expert-parallel "
       "group issues micro-batch 1 layer 0"},
      {{"F0 B0", "F0 F1 B0"}, one,
       "rank 5 issues its forward all-to-all number 2 for micro-batch 1 layer 0 where rank 4 of its expert-parallel "
       "group issues nothing (its sequence ends there)"},
      {{"F0 F1 B0 B1", "F0 F1 B1 B0"}, one,
       "rank 5 issues its backward all-to-all number 0 for micro-batch 1 layer 1 where rank 4 of its expert-parallel "
       "group issues micro-batch 0 layer 1"},
      {{"F0 F1 I0 I1 W0 W1", "F0 F1 I1 W1 I0 W0"}, one,
       "rank 5 issues its backward all-to-all number 0 for micro-batch 1 layer 1 where rank 4 of its expert-parallel "
       "group issues micro-batch 0 layer 1"},
      {{"F0 F0.1 B0.1 B0", "F0.1 F0 B0.1 B0"}, two,
       "rank 5 issues its forward all-to-all number 0 for micro-batch 0 layer 3 where rank 4 of its expert-parallel "
       "group issues micro-batch 0 layer 0"},
      {{"F0 F1 B0 B1", "F0 F1 B0 B1", "F1 F0 B0 B1"}, one,
       "rank 6 issues its forward all-to-all number 0 for micro-batch 1 layer 0 where rank 4 of its expert-parallel "
       "group issues micro-batch 0 layer 0"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(order_error(c.members, c.moe), "expert all-to-all order: " + c.message +
                                                 ": NCCL would match the two (NOTE [all-to-all order] in "
                                                 "schedules/expert_order.h)")
        << c.members.front() << " | " << c.members.back();
}

// What NCCL matches is each group's own sequence: the forward's and the
// backward's all-to-alls run on two groups (NOTE [two expert groups] in
// parallel/expert_parallel.h), so an F moved past a B, a W moved anywhere, B
// in place of I and W, or a chunk without MoE layers reordered changes
// neither sequence and is accepted.
TEST(ExpertOrder, ReorderingsThatKeepEachGroupsSequenceAreAccepted) {
  const std::vector<std::vector<int>> one = {{0, 1}}, two = {{0, 1}, {}};
  EXPECT_EQ(order_error({"F0 F1 B0 B1", "F0 B0 F1 B1"}, one), "");
  EXPECT_EQ(order_error({"F0 F1 I0 I1 W0 W1", "F0 F1 I0 W0 I1 W1"}, one), "");
  EXPECT_EQ(order_error({"F0 F1 B0 B1", "F0 F1 I0 I1 W1 W0"}, one), "");
  EXPECT_EQ(order_error({"F0 F0.1 B0.1 B0", "F0.1 F0 B0 B0.1"}, two), "");
}

}  // namespace
