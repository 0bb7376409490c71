// NOTE [group waits] (schedules/group_waits.h): a compute that needs a tensor
// received in a group also waits for that group's sends, which complete only
// when their receivers post. The grouped run is held against the simulator
// (which lets a compute wait for its own input only): equal when no group
// holds a compute back, longer when one does; defer_coupled_sends() moves
// only sends, keeps NCCL's pair order, and never lengthens the grouped step.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schedules/generators.h"
#include "schedules/group_waits.h"
#include "schedules/pair_order.h"
#include "schedules/simulate.h"

using namespace trident::sched;

namespace {

// The simulator's step for per-action costs F = 1, B = 2 (it divides a full
// stage's costs by v): what a list takes when no compute waits on a send.
double ideal_step(const Schedule& s) { return simulate_stats(s, unit_costs(s.chunks)).step_time; }

ActionList computes(const ActionList& list) {
  ActionList out;
  for (const Action& a : list)
    if (!is_communication(a.kind)) out.push_back(a);
  return out;
}

}  // namespace

// Interleaved at p = 2 (m = 16, v = 2): add_communication() groups rank 0's
// SF2 with the RB0.1 that B0.1 needs, and rank 1 posts SF2's receive only
// after its own F1.1 and B1.1; every steady-state step waits so. Moving the
// sends gives back the simulator's step exactly.
TEST(GroupWaits, InterleavedAtTwoRanksWaitsOnItsSendsUntilTheyMove) {
  const Schedule placed = add_communication(generate_compute("interleaved", 2, 16, 2));
  const double ideal = ideal_step(placed);
  EXPECT_DOUBLE_EQ(ideal, 99.0);  // 16 x 2 chunks x (1 + 2) = 96 busy per rank, 3 of warm-up and cool-down
  const double coupled = grouped_step_time(placed);
  EXPECT_GT(coupled, 1.3 * ideal) << "the groups should hold the computes back";
  const Schedule moved = defer_coupled_sends(placed);
  EXPECT_DOUBLE_EQ(grouped_step_time(moved), ideal);
  EXPECT_NO_THROW(check_pair_order(moved));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(computes(moved.ranks[r]), computes(placed.ranks[r])) << "rank " << r;
  EXPECT_EQ(generate("interleaved", 2, 16, 2), moved);  // what a run executes
}

// What a run and `trident bench bubble` predict: the simulator's busy times
// with the grouped step. Where groups hold computes back (interleaved at p = 2
// before its sends move) the step and the bubble are the grouped run's, not
// the plain simulation's; where none do (1F1B), both agree.
TEST(GroupWaits, PredictedStatsTakeTheGroupedStep) {
  const Schedule placed = add_communication(generate_compute("interleaved", 2, 16, 2));
  const Costs costs = unit_costs(placed.chunks);
  const TimelineStats plain = simulate_stats(placed, costs), grouped = grouped_stats(placed, costs);
  EXPECT_DOUBLE_EQ(grouped.step_time, grouped_step_time(placed, costs));
  EXPECT_GT(grouped.step_time, 1.3 * plain.step_time);
  EXPECT_EQ(grouped.busy, plain.busy);
  double busy = 0;
  for (double b : grouped.busy) busy += b;
  EXPECT_NEAR(grouped.bubble_fraction, 1 - busy / (2 * grouped.step_time), 1e-12);
  EXPECT_GT(grouped.bubble_fraction, plain.bubble_fraction + 0.2);
  const Schedule onef = add_communication(generate_compute("1f1b", 4, 8, 1));
  EXPECT_DOUBLE_EQ(grouped_stats(onef, unit_costs(1)).bubble_fraction, simulate_stats(onef, unit_costs(1)).bubble_fraction);
}

// 1F1B's exchanges already pair each send with the receive its peer needs
// next: no group holds a compute back, so nothing moves.
TEST(GroupWaits, OneFOneBHasNothingToMove) {
  for (int p : {2, 4})
    for (int m : {4, 8, 16}) {
      const Schedule placed = add_communication(generate_compute("1f1b", p, m, 1));
      EXPECT_DOUBLE_EQ(grouped_step_time(placed), ideal_step(placed)) << "p " << p << " m " << m;
      EXPECT_EQ(defer_coupled_sends(placed), placed) << "p " << p << " m " << m;
    }
}

// Sends moved past the computes that need their peer's answer first are a
// deadlock under the grouped rules: rank 0's SF1 after F0.1, which waits for
// RF0.1; rank 1's SF0 (which RF0.1 meets, NCCL matching in order) after F1,
// which waits for RF1, which meets rank 0's SF1.
TEST(GroupWaits, ADeadlockedOrderHasNoStepTime) {
  Schedule s = add_communication(generate_compute("interleaved", 2, 16, 2));
  ASSERT_GT(grouped_step_time(s), 0);
  const auto move_after = [](ActionList& list, const Action& send, const Action& compute) {
    const auto find = [&](const Action& a) {
      for (size_t i = 0; i < list.size(); ++i)
        if (list[i] == a) return static_cast<std::ptrdiff_t>(i);
      ADD_FAILURE() << "missing " << to_token(a);
      return std::ptrdiff_t{0};
    };
    list.erase(list.begin() + find(send));
    list.insert(list.begin() + find(compute) + 1, send);
  };
  move_after(s.ranks[0], Action(ActionKind::SEND_F, 1, 0), Action(ActionKind::F, 0, 1));
  EXPECT_GT(grouped_step_time(s), 0);  // one of the two alone still runs
  move_after(s.ranks[1], Action(ActionKind::SEND_F, 0, 0), Action(ActionKind::F, 1, 0));
  EXPECT_LT(grouped_step_time(s), 0);
  EXPECT_THROW(check_pair_order(s), ScheduleError);  // the validator agrees
}

// A group starts on its rank's stream only after the group before it has
// completed (NOTE [pair order]). Rank 1's SB0 waits behind RF1, which meets
// rank 0's SF1, posted after B0, which needs SB0: a deadlock, although each
// group is posted by its host in time. The timed run is the validator's run,
// so the two agree; with RF1 after SB0 the same computes take 12 (by hand:
// rank 0 F0 [0, 1], waits for SB0 (posted at 4), B0 [4, 6], F1 [6, 7], waits
// for SB1 (posted at 10), B1 [10, 12]).
TEST(GroupWaits, AGroupStartsAfterTheGroupBeforeItOnItsStream) {
  using K = ActionKind;
  Schedule s;
  s.pipeline_ranks = 2;
  s.microbatches = 2;
  s.ranks = {{{K::F, 0}, {K::SEND_F, 0}, {K::RECV_B, 0}, {K::B, 0}, {K::F, 1}, {K::SEND_F, 1}, {K::RECV_B, 1}, {K::B, 1}},
             {{K::RECV_F, 0}, {K::F, 0}, {K::RECV_F, 1}, {K::B, 0}, {K::SEND_B, 0}, {K::F, 1}, {K::B, 1}, {K::SEND_B, 1}}};
  EXPECT_LT(grouped_step_time(s), 0);
  EXPECT_THROW(check_pair_order(s), ScheduleError);
  s.ranks[1] = {{K::RECV_F, 0}, {K::F, 0}, {K::B, 0}, {K::SEND_B, 0}, {K::RECV_F, 1}, {K::F, 1}, {K::B, 1}, {K::SEND_B, 1}};
  EXPECT_DOUBLE_EQ(grouped_step_time(s), 12.0);
  EXPECT_NO_THROW(check_pair_order(s));
}

// Every generator's list at p in {2, 4}: the pass keeps the computes and the
// pair order and never makes the grouped step longer.
TEST(GroupWaits, EveryKindKeepsItsComputesAndOrder) {
  int moved_any = 0;
  for (const std::string& kind : schedule_kinds()) {
    if (kind == "file") continue;
    for (int p : {2, 4})
      for (int m : {8, 16}) {
        const int v = kind == "interleaved" ? 2 : 0;
        const Schedule placed = add_communication(generate_compute(kind, p, m, v));
        const Schedule moved = defer_coupled_sends(placed);
        const std::string what = kind + " p " + std::to_string(p) + " m " + std::to_string(m);
        ASSERT_GT(grouped_step_time(placed), 0) << what;
        EXPECT_LE(grouped_step_time(moved), grouped_step_time(placed)) << what;
        EXPECT_GE(grouped_step_time(moved), ideal_step(placed) - 1e-9) << what;
        EXPECT_NO_THROW(check_pair_order(moved)) << what;
        for (int r = 0; r < p; ++r) EXPECT_EQ(computes(moved.ranks[r]), computes(placed.ranks[r])) << what;
        moved_any += !(moved == placed);
      }
  }
  EXPECT_GT(moved_any, 0);
}
