// Validator: hand-broken schedules are rejected with rank, position, action,
// the reason and a grid around the spot.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "schedules/generators.h"
#include "schedules/validate.h"
#include "../schedule_helpers.h"

using namespace trident::sched;

namespace {

std::string error_of(const Schedule& s) { return trident::testing::validation_error(s); }

void erase(ActionList& list, Action a) {
  auto it = std::find(list.begin(), list.end(), a);
  ASSERT_NE(it, list.end());
  list.erase(it);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A hand-written schedule with its REDUCE_GRAD actions added as the loaders add them.
Schedule parse(const std::string& text) { return with_reduce_grad(parse_text(text)); }

}  // namespace

TEST(ScheduleValidate, AcceptsComputeOnlyByAddingCommunication) {
  const ValidationReport rep = validate(one_f_one_b(3, 4));
  EXPECT_TRUE(rep.communication_added);
  EXPECT_EQ(rep.messages, 2 * 4 * 2);
}

TEST(ScheduleValidate, MissingBackward) {
  Schedule s = one_f_one_b(3, 4);
  erase(s.ranks[1], {ActionKind::B, 2, 0});
  const std::string e = error_of(s);
  EXPECT_TRUE(has(e, "rank 1: micro-batch 2 chunk 0")) << e;
  EXPECT_TRUE(has(e, "expected one backward")) << e;
  EXPECT_TRUE(has(e, "[F2]")) << e;  // the grid marks the forward left without backward
  EXPECT_TRUE(has(e, "rank 2 ")) << e;
}

TEST(ScheduleValidate, WeightGradientBeforeInputGradient) {
  Schedule s = zb_h1(2, 2);
  auto& list = s.ranks[1];
  auto i0 = std::find(list.begin(), list.end(), Action{ActionKind::I, 0, 0});
  auto w0 = std::find(list.begin(), list.end(), Action{ActionKind::W, 0, 0});
  std::iter_swap(i0, w0);
  const std::string e = error_of(s);
  EXPECT_TRUE(has(e, "runs W before I")) << e;
  EXPECT_TRUE(has(e, "[W0]")) << e;
}

TEST(ScheduleValidate, MessagesMatchInPairOrder) {
  // Rank 0 sends mb 1's activation before mb 0's; rank 1 receives 0 first.
  // Under NCCL (no tags) mb 1's activation would land in mb 0's buffer
  // (NOTE [pair order]): refused, naming both ends.
  Schedule s = parse(
      "pipeline p=2 m=2 v=1\n"
      "0: F0 F1 SF1 SF0 RB0 B0 RB1 B1\n"
      "1: RF0 F0 B0 SB0 RF1 F1 B1 SB1\n");
  const std::string e = error_of(s);
  EXPECT_TRUE(has(e, "pair order: rank 0's message #0 to rank 1 is rank 0 position 2 (SF1)")) << e;
  EXPECT_TRUE(has(e, "rank 1's receive #0 from rank 0 is rank 1 position 0 (RF0)")) << e;
  // Both ends in one order per pair: rank 1 posts both receives first and
  // runs mb 1 before mb 0, rank 0 receives the gradients in that order.
  s = parse(
      "pipeline p=2 m=2 v=1\n"
      "0: F0 SF0 F1 SF1 RB1 RB0 B0 B1\n"
      "1: RF0 RF1 F1 B1 SB1 F0 B0 SB0\n");
  ValidationReport rep;
  ASSERT_NO_THROW(rep = validate(s)) << error_of(s);
  EXPECT_EQ(rep.messages, 4);
}

TEST(ScheduleValidate, Deadlock) {
  // Rank 0 keeps one micro-batch in flight, rank 1 wants both forwards first.
  Schedule s = parse("pipeline p=2 m=2 v=1\n0: F0 B0 F1 B1\n1: F0 F1 B0 B1\n");
  std::string e = error_of(s);
  EXPECT_TRUE(has(e, "deadlock")) << e;
  EXPECT_TRUE(has(e, "rank 0 position 1 (B0) waits for SB0 from rank 1")) << e;
  EXPECT_TRUE(has(e, "rank 1 position 1 (F1) waits for SF1 from rank 0")) << e;
  EXPECT_TRUE(has(e, "[B0]")) << e;
  EXPECT_TRUE(has(e, "[F1]")) << e;
  // With explicit communication the wait is at the compute; the receive was only posted.
  e = error_of(add_communication(s));
  EXPECT_TRUE(has(e, "rank 0 position 3 (B0) waits for SB0 from rank 1")) << e;
}

TEST(ScheduleValidate, MissingOrMisplacedCommunication) {
  Schedule s = generate("1f1b", 2, 2);
  erase(s.ranks[1], {ActionKind::RECV_F, 1, 0});
  std::string e = error_of(s);
  EXPECT_TRUE(has(e, "rank 1: micro-batch 1 chunk 0")) << e;
  EXPECT_TRUE(has(e, "has 0 x RF1, expected 1")) << e;

  s = parse("pipeline p=2 m=1 v=1\n0: SF0 F0 RB0 B0\n1: RF0 F0 B0 SB0\n");
  e = error_of(s);
  EXPECT_TRUE(has(e, "sends SF0 before the compute that produces it")) << e;

  s = parse("pipeline p=2 m=1 v=1\n0: F0 SF0 RB0 B0 SB0\n1: RF0 F0 B0 SB0\n");
  e = error_of(s);
  EXPECT_TRUE(has(e, "rank 0: micro-batch 0 chunk 0 (virtual stage 0) has 1 x SB0, expected 0")) << e;
}

TEST(ScheduleValidate, ForwardOrderMayDifferAcrossStages) {
  // Rank 1 runs mb 1 before mb 0 while rank 0 sends in order: fine by tag.
  Schedule s = parse("pipeline p=2 m=2 v=1\n0: F0 F1 B0 B1\n1: F1 F0 B0 B1\n");
  EXPECT_NO_THROW(validate(s)) << error_of(s);
  // A receive posted after its compute is still an error.
  s = parse("pipeline p=2 m=1 v=1\n0: F0 SF0 RB0 B0\n1: F0 RF0 B0 SB0\n");
  EXPECT_TRUE(has(error_of(s), "receives RF0 after the compute that needs it")) << error_of(s);
}

TEST(ScheduleValidate, VPlacement) {
  Schedule s = generate("dualpipev", 2, 4, 2);
  EXPECT_NO_THROW(validate(s));
  // V placement: rank 0 holds stages 0 and 3; the same lists under loop
  // placement (stages 0 and 2) are a different, deadlocking pipeline.
  s = generate_compute("zb-v", 2, 4, 2);
  EXPECT_NO_THROW(validate(s));
  s.placement = Placement::loop;
  EXPECT_TRUE(has(error_of(s), "deadlock")) << error_of(s);
}

TEST(ScheduleValidate, DuplicateForwardAndWrongShape) {
  Schedule s = gpipe(2, 2);
  s.ranks[0].insert(s.ranks[0].begin(), Action{ActionKind::F, 1, 0});
  EXPECT_TRUE(has(error_of(s), "has 2 forwards F, expected exactly 1"));
  s = gpipe(2, 2);
  s.ranks.pop_back();
  EXPECT_TRUE(has(error_of(s), "1 rank lists"));
  s = gpipe(2, 2);
  s.ranks[0][0].mb = 7;
  EXPECT_TRUE(has(error_of(s), "outside m=2"));
}

TEST(ScheduleValidate, MutatedSchedulesFailWithAScheduleError) {
  // The validator checks fast first and re-checks in detail only to name an
  // error, and the run keeps one message slot per (stage, mb): whatever the
  // mutation, the answer must be "valid" or a ScheduleError with a grid,
  // never an internal error or a crash.
  std::mt19937 rng(13);
  int rejected = 0, accepted = 0;
  for (const std::string kind : {"1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev"})
    for (int p : {2, 3})
      for (bool comm : {false, true}) {
        const int v = kind == "interleaved" ? 2 : default_chunks(kind), m = 2 * p;
        const Schedule base = comm ? generate(kind, p, m, v) : generate_compute(kind, p, m, v);
        for (int trial = 0; trial < 150; ++trial) {
          Schedule s = base;
          auto& list = s.ranks[rng() % p];
          const size_t i = rng() % list.size();
          switch (rng() % 5) {
            case 0: list.erase(list.begin() + i); break;
            case 1: list.insert(list.begin() + i, list[rng() % list.size()]); break;
            case 2: std::swap(list[i], list[rng() % list.size()]); break;
            case 3: list[i].mb = static_cast<int>(rng() % (m + 1)); break;  // sometimes out of range
            default: list[i] = reduce_grad(list[i].chunk); break;  // a REDUCE_GRAD too many, or misplaced
          }
          try {
            validate(s);
            ++accepted;
          } catch (const ScheduleError& e) {
            EXPECT_TRUE(has(e.what(), "invalid schedule")) << e.what();
            ++rejected;
          }
        }
      }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(accepted, 10);  // e.g. swapping two independent actions
}

TEST(ScheduleValidate, ReduceGradMissing) {
  Schedule s = generate("zb-v", 2, 4);
  erase(s.ranks[1], reduce_grad(1));
  const std::string e = error_of(s);
  EXPECT_TRUE(has(e, "rank 1 chunk 1 (virtual stage 2) has no REDUCE_GRAD RD.1, expected one right after its last B or W"))
      << e;
  // A list without any: the validator never implies one (only the file loaders add them).
  EXPECT_TRUE(has(error_of(parse_text("pipeline p=1 m=1 v=1\n0: F0 B0\n")), "has no REDUCE_GRAD RD")) << error_of(s);
}

TEST(ScheduleValidate, ReduceGradDuplicate) {
  Schedule s = generate_compute("1f1b", 2, 3);
  s.ranks[0].insert(s.ranks[0].end() - 1, reduce_grad(0));
  const std::string e = error_of(s);
  EXPECT_TRUE(has(e, "rank 0 chunk 0 (virtual stage 0) has two REDUCE_GRAD RD")) << e;
  EXPECT_TRUE(has(e, "expected exactly one per chunk")) << e;
  EXPECT_TRUE(has(e, "[RD]")) << e;
}

TEST(ScheduleValidate, ReduceGradBeforeAWeightGradient) {
  // zb-h1 rank 1 ends "... W2 W3 RD": move the RD before the last W.
  Schedule s = generate_compute("zb-h1", 2, 4);
  auto& list = s.ranks[1];
  std::iter_swap(list.end() - 1, list.end() - 2);
  std::string e = error_of(s);
  EXPECT_TRUE(has(e, "rank 1 chunk 0 (virtual stage 1): rank 1 position " + std::to_string(list.size() - 2) +
                         " (RD) comes before rank 1 position " + std::to_string(list.size() - 1) + " (W3)"))
      << e;
  EXPECT_TRUE(has(e, "must follow every B, I and W of the chunk")) << e;
  // Before an I (which frees the activations but adds no weight gradient) is an error too.
  s = parse_text("pipeline p=1 m=1 v=1\n0: F0 RD I0 W0\n");
  EXPECT_TRUE(has(error_of(s), "(RD) comes before rank 0 position 3 (W0)")) << error_of(s);
  // With explicit communication: after its SEND_B is fine, before the B is not.
  s = generate("1f1b", 2, 2);
  EXPECT_EQ(to_text(s), "pipeline p=2 m=2 v=1\n0: F0 SF0 F1 SF1 RB0 B0 RB1 B1 RD\n1: RF0 F0 B0 SB0 RF1 F1 B1 SB1 RD\n");
  auto& r1 = s.ranks[1];
  std::rotate(r1.end() - 3, r1.end() - 1, r1.end());  // ... RD B1 SB1
  EXPECT_TRUE(has(error_of(s), "(RD) comes before rank 1 position 7 (B1)")) << error_of(s);
  // A REDUCE_GRAD with a micro-batch (which no token can show) is rejected.
  s = generate_compute("gpipe", 1, 2);
  s.ranks[0].back().mb = 1;
  EXPECT_TRUE(has(error_of(s), "is a REDUCE_GRAD with micro-batch 1, expected 0")) << error_of(s);
}

// Schedules of a million actions or more are run while another thread checks
// them (NOTE [run beside the checks] in engine.cpp): an action the run cannot
// even index still gets the checks' error naming it, and a valid one passes.
TEST(ScheduleValidate, LargeSchedulesCheckedBesideTheRun) {
  Schedule s = interleaved(16, 32768, 2);  // 2 M compute actions
  EXPECT_EQ(validate(s).compute_actions, 2 * 16 * 32768 * 2);
  Schedule bad = s;
  bad.ranks[3][1000].mb = 40000;  // past m
  std::string e = error_of(bad);
  EXPECT_TRUE(has(e, "rank 3 position 1000")) << e;
  EXPECT_TRUE(has(e, "outside m=32768")) << e;
  bad = s;
  bad.ranks[15].back().chunk = 7;  // past v, on the last rank's last action
  e = error_of(bad);
  EXPECT_TRUE(has(e, "rank 15 position " + std::to_string(s.ranks[15].size() - 1))) << e;
  bad = s;
  std::swap(bad.ranks[0][0], bad.ranks[0][2 * 32768 * 2 - 1]);  // rank 0's first F after its last B
  e = error_of(bad);
  EXPECT_TRUE(has(e, "rank 0")) << e;
  EXPECT_TRUE(has(e, "before its F")) << e;
}
