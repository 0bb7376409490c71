// Action IR and text form: tokens, exact round trips, parse errors, comm pass.
#include <gtest/gtest.h>

#include "schedules/action.h"
#include "schedules/generators.h"

using namespace trident::sched;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_text(text);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ScheduleIr, TokensIncludeChunkOnlyWhenNonZero) {
  EXPECT_EQ(to_token({ActionKind::F, 3, 0}), "F3");
  EXPECT_EQ(to_token({ActionKind::B, 12, 1}), "B12.1");
  EXPECT_EQ(to_token({ActionKind::SEND_F, 0, 2}), "SF0.2");
  EXPECT_EQ(to_token({ActionKind::RECV_B, 5, 0}), "RB5");
  EXPECT_EQ(to_token({ActionKind::I, 1, 0}), "I1");
  EXPECT_EQ(to_token({ActionKind::W, 1, 0}), "W1");
}

TEST(ScheduleIr, ParsesHeaderRanksAndComments) {
  const Schedule s = parse_text("# a comment\npipeline p=2 m=2 v=2\n\n0: F0 RF1.1  # trailing\n1: W1.1 SB0\n");
  EXPECT_EQ(s.pipeline_ranks, 2);
  EXPECT_EQ(s.microbatches, 2);
  EXPECT_EQ(s.chunks, 2);
  ASSERT_EQ(s.ranks[0].size(), 2u);
  EXPECT_EQ(s.ranks[0][1], (Action{ActionKind::RECV_F, 1, 1}));
  EXPECT_EQ(s.ranks[1][0], (Action{ActionKind::W, 1, 1}));
  EXPECT_EQ(s.ranks[1][1], (Action{ActionKind::SEND_B, 0, 0}));
}

TEST(ScheduleIr, RoundTripIsExactForEveryGenerator) {
  for (int p = 1; p <= 5; ++p)
    for (int m : {1, 2, 5, 8}) {
      std::vector<Schedule> all = {gpipe(p, m), one_f_one_b(p, m), zb_h1(p, m), generate("1f1b", p, m),
                                   generate("zb-h1", p, m), generate("gpipe", p, m)};
      if (m % p == 0) {
        all.push_back(interleaved(p, m, 3));
        all.push_back(generate("interleaved", p, m, 2));
      }
      for (const Schedule& s : all) {
        const std::string text = to_text(s);
        const Schedule back = parse_text(text);
        EXPECT_EQ(back, s) << text;
        EXPECT_EQ(to_text(back), text);
      }
    }
}

TEST(ScheduleIr, ParseErrorsNameLineTokenAndExpectation) {
  std::string e = error_of("pipeline p=2 m=2 v=1\n0: F0 X1\n1:\n");
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("'X1'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected F|B|I|W"), std::string::npos) << e;

  e = error_of("pipeline p=2 m=2 v=1\n0: F2\n1:\n");
  EXPECT_NE(e.find("'F2'"), std::string::npos) << e;
  EXPECT_NE(e.find("below m=2"), std::string::npos) << e;

  e = error_of("pipeline p=2 m=2 v=1\n0: F0.1\n1:\n");
  EXPECT_NE(e.find("below v=1"), std::string::npos) << e;

  e = error_of("pipeline p=2 m=2 v=1\n1: F0\n");
  EXPECT_NE(e.find("rank label '0:'"), std::string::npos) << e;

  e = error_of("pipeline p=2 m=2 v=1\n0: F0\n");
  EXPECT_NE(e.find("1 rank lines, expected p=2"), std::string::npos) << e;

  e = error_of("pipeline p=2 m=x v=1\n");
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  EXPECT_NE(e.find("expected 'pipeline p=P m=M v=V'"), std::string::npos) << e;

  e = error_of("pipeline p=0 m=1 v=1\n");
  EXPECT_NE(e.find("p=0"), std::string::npos) << e;

  EXPECT_NE(error_of("").find("empty"), std::string::npos);
  EXPECT_NE(error_of("pipeline p=1 m=1 v=1\n0: F0F0\n").find("'F0F0'"), std::string::npos);
}

TEST(ScheduleIr, AddCommunicationSurroundsComputeAndSkipsPipelineEnds) {
  const Schedule s = add_communication(gpipe(2, 1));
  EXPECT_EQ(to_text(s), "pipeline p=2 m=1 v=1\n0: F0 SF0 RB0 B0 RD\n1: RF0 F0 B0 SB0 RD\n");
  EXPECT_TRUE(has_communication(s));
  EXPECT_FALSE(has_communication(gpipe(2, 1)));
  EXPECT_THROW(add_communication(s), ScheduleError);
}

TEST(ScheduleIr, PeersFollowLoopPlacement) {
  Schedule s = empty_schedule(2, 1, 2);  // virtual stages: 0=(r0,c0) 1=(r1,c0) 2=(r0,c1) 3=(r1,c1)
  EXPECT_EQ(peer_rank(s.stage_map(), 1, {ActionKind::SEND_F, 0, 0}), 0);  // stage 1 -> stage 2 on rank 0
  EXPECT_EQ(counterpart(s.stage_map(), 1, {ActionKind::SEND_F, 0, 0}), (Action{ActionKind::RECV_F, 0, 1}));
  EXPECT_EQ(peer_rank(s.stage_map(), 0, {ActionKind::SEND_B, 0, 1}), 1);  // stage 2 -> stage 1
  EXPECT_EQ(counterpart(s.stage_map(), 0, {ActionKind::SEND_B, 0, 1}), (Action{ActionKind::RECV_B, 0, 0}));
  EXPECT_EQ(counterpart(s.stage_map(), 0, {ActionKind::RECV_B, 0, 0}), (Action{ActionKind::SEND_B, 0, 0}));
}

TEST(ScheduleIr, VPlacementMatchesPyTorchStageToRank) {
  // PyTorch's generate_stage_to_rank_mapping(pp, stages, style="v") as its
  // test_schedule.py spells it out: (2, 4) -> 0 1 1 0; (4, 8) -> 0 1 2 3 3 2 1 0.
  const std::vector<int> two = {0, 1, 1, 0}, four = {0, 1, 2, 3, 3, 2, 1, 0};
  for (int s = 0; s < 4; ++s) EXPECT_EQ(rank_of(Placement::v, 2, s), two[s]) << s;
  for (int s = 0; s < 8; ++s) EXPECT_EQ(rank_of(Placement::v, 4, s), four[s]) << s;
  // (4, 12): the zig-zag continues down again.
  EXPECT_EQ(rank_of(Placement::v, 4, 8), 0);
  EXPECT_EQ(rank_of(Placement::v, 4, 11), 3);
  for (int p = 1; p <= 6; ++p)
    for (int v = 1; v <= 4; ++v)
      for (Placement pl : {Placement::loop, Placement::v})
        for (int r = 0; r < p; ++r) {
          const std::vector<int> held = stages_of_rank(pl, p, v, r);
          ASSERT_EQ(static_cast<int>(held.size()), v);
          for (int c = 0; c < v; ++c) {
            EXPECT_EQ(rank_of(pl, p, held[c]), r);
            EXPECT_EQ(chunk_of(p, held[c]), c);
            EXPECT_EQ(stage_of(pl, p, r, c), held[c]);
          }
        }
  EXPECT_EQ(stages_of_rank(Placement::v, 4, 2, 1), (std::vector<int>{1, 6}));  // rank r: r and 2p-1-r
  EXPECT_EQ(stages_of_rank(Placement::loop, 4, 2, 1), (std::vector<int>{1, 5}));
}

TEST(ScheduleIr, PeersFollowVPlacement) {
  Schedule s = empty_schedule(2, 1, 2, Placement::v);  // stages: 0=(r0,c0) 1=(r1,c0) 2=(r1,c1) 3=(r0,c1)
  EXPECT_EQ(peer_rank(s.stage_map(), 1, {ActionKind::SEND_F, 0, 0}), 1);  // the turn of the V stays on rank 1
  EXPECT_EQ(counterpart(s.stage_map(), 1, {ActionKind::SEND_F, 0, 0}), (Action{ActionKind::RECV_F, 0, 1}));
  EXPECT_EQ(peer_rank(s.stage_map(), 1, {ActionKind::SEND_F, 0, 1}), 0);  // stage 2 -> 3
  EXPECT_EQ(peer_rank(s.stage_map(), 0, {ActionKind::SEND_B, 0, 1}), 1);  // stage 3 -> 2
  EXPECT_EQ(counterpart(s.stage_map(), 0, {ActionKind::SEND_B, 0, 1}), (Action{ActionKind::RECV_B, 0, 1}));
}

TEST(ScheduleIr, PlacementRoundTripsAndOverlappedPairsAreRefused) {
  const std::string text =
      "pipeline p=2 m=2 v=2 placement=v\n"
      "0: F0 F1 F0.1 F1.1 B1.1 RD.1 B0 B1 RD\n"
      "1: F0 F0.1 B0.1 F1 F1.1 B0 B1.1 RD.1 B1 RD\n";
  const Schedule s = parse_text(text);
  EXPECT_EQ(s.placement, Placement::v);
  ASSERT_EQ(s.ranks[0].size(), 9u);
  EXPECT_EQ(s.ranks[0][5], reduce_grad(1));
  EXPECT_EQ(to_text(s), text);
  EXPECT_EQ(parse_text("pipeline p=1 m=1 v=1 placement=loop\n0: F0 B0 RD\n").placement, Placement::loop);
  EXPECT_NE(error_of("pipeline p=1 m=1 v=1 placement=w\n0: F0 B0\n").find("placement=v"), std::string::npos);
  // NOTE [overlapped pairs]: "F+B" is a pair; anything else with a '+' says what a pair is.
  EXPECT_TRUE(parse_text("pipeline p=2 m=2 v=1\n0: F0 F1+B0 B1 RD\n1: F0 B0 F1 B1 RD\n").ranks[0][1].overlaps_next());
  EXPECT_NE(error_of("pipeline p=2 m=2 v=1\n0: F0 B0+F1 B1 RD\n1: F0 B0 F1 B1 RD\n").find("an overlapped pair F<mb>+B<mb>"),
            std::string::npos);
  EXPECT_THROW(parse_placement("zigzag"), ScheduleError);
  EXPECT_EQ(sizeof(Action), 8u);
}

TEST(ScheduleIr, ReduceGradTokenHasNoMicroBatch) {
  EXPECT_EQ(to_token(reduce_grad(0)), "RD");
  EXPECT_EQ(to_token(reduce_grad(2)), "RD.2");
  EXPECT_FALSE(is_compute(ActionKind::REDUCE_GRAD));
  EXPECT_FALSE(is_communication(ActionKind::REDUCE_GRAD));
  for (ActionKind k : {ActionKind::SEND_F, ActionKind::RECV_F, ActionKind::SEND_B, ActionKind::RECV_B})
    EXPECT_TRUE(is_communication(k));
  const Schedule s = parse_text("pipeline p=1 m=1 v=3\n0: RD RD.1 RD.2\n");
  EXPECT_EQ(s.ranks[0][0], reduce_grad(0));
  EXPECT_EQ(s.ranks[0][2], reduce_grad(2));
  EXPECT_NE(error_of("pipeline p=1 m=2 v=1\n0: RD0\n").find("bad token 'RD0'"), std::string::npos);
  EXPECT_NE(error_of("pipeline p=1 m=2 v=1\n0: RD0\n").find("or RD and optionally"), std::string::npos);
  EXPECT_NE(error_of("pipeline p=1 m=1 v=2\n0: RD.2\n").find("a chunk below v=2"), std::string::npos);
}

TEST(ScheduleIr, AddReduceGradGoesRightAfterEachChunksLastWeightGradient) {
  Schedule s = empty_schedule(1, 2, 2);
  s.ranks[0] = parse_text("pipeline p=1 m=2 v=2\n0: F0 F0.1 F1 F1.1 I0.1 I1.1 B0 W0.1 B1 W1.1\n").ranks[0];
  const Schedule r = add_reduce_grad(s);
  EXPECT_EQ(to_text(r), "pipeline p=1 m=2 v=2\n0: F0 F0.1 F1 F1.1 I0.1 I1.1 B0 W0.1 B1 RD W1.1 RD.1\n");
  EXPECT_TRUE(has_reduce_grad(r));
  EXPECT_FALSE(has_reduce_grad(s));
  EXPECT_THROW(add_reduce_grad(r), ScheduleError);
  EXPECT_EQ(with_reduce_grad(r), r);  // as written when it has them
  EXPECT_EQ(with_reduce_grad(s), r);
}

TEST(ScheduleIr, AddCommunicationKeepsReduceGradAfterTheSend) {
  Schedule s = empty_schedule(2, 2, 1);
  s.ranks[0] = {Action(ActionKind::F, 0), Action(ActionKind::F, 1), Action(ActionKind::B, 0),
                Action(ActionKind::B, 1), reduce_grad(0)};
  s.ranks[1] = {Action(ActionKind::F, 0), Action(ActionKind::B, 0), Action(ActionKind::F, 1), Action(ActionKind::B, 1),
                reduce_grad(0)};
  EXPECT_EQ(to_text(add_communication(s)),
            "pipeline p=2 m=2 v=1\n0: F0 SF0 F1 SF1 RB0 B0 RB1 B1 RD\n1: RF0 F0 B0 SB0 RF1 F1 B1 SB1 RD\n");
}
