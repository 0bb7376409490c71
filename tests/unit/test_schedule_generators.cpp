// Generator invariants over p 1..8, v 1..3 and the micro-batch counts of
// sweep_microbatches (1..32 up to p = 4; beyond, every count up to 2p + 3 and
// 3p, 4p): every supported case validates, unsupported ones are rejected with
// the values named.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "schedules/generators.h"
#include "schedules/validate.h"

using namespace trident::sched;

namespace {

int count_kind(const ActionList& list, ActionKind k) {
  return static_cast<int>(std::count_if(list.begin(), list.end(), [&](const Action& a) { return a.kind == k; }));
}

}  // namespace

bool expected_supported(const std::string& kind, int p, int m, int v) {
  if (kind == "interleaved") return v == 1 || m >= p;
  if (kind == "zb-v" || kind == "v-half" || kind == "v-min") return v == 2;
  if (kind == "dualpipev") return v == 2 && m >= 2 * p;
  return v == 1;
}

// The micro-batch counts swept at p stages: every count to 32 while generation
// is cheap (p <= 4); beyond, every count up to 2p + 3 (fewer than, equal to and
// between the multiples that change a generator's rounds: m < p, m = p, m < 2p
// for dualpipev, uneven counts past 2p) and the multiples 3p and 4p. Generation
// searches send orders within a work bound (defer_coupled_sends), about 0.3 s a
// case at p = 8, m = 32: all of 1..32 at every p took 29 s, 20 of them interleaved.
std::vector<int> sweep_microbatches(int p) {
  std::vector<int> ms;
  for (int m = 1; m <= 32; ++m)
    if (p <= 4 || m <= 2 * p + 3 || m == 3 * p || m == 4 * p) ms.push_back(m);
  return ms;
}

TEST(ScheduleGenerators, EverySupportedCaseValidatesAndOthersAreRejected) {
  int supported = 0, rejected = 0, cases = 0;
  for (const std::string& kind : schedule_kinds())
    for (int p = 1; p <= 8; ++p)
      for (int m : sweep_microbatches(p))
        for (int v = 1; v <= 3; ++v) {
          ++cases;
          if (!expected_supported(kind, p, m, v)) {
            try {
              generate(kind, p, m, v);
              ADD_FAILURE() << kind << " p=" << p << " m=" << m << " v=" << v << " was accepted";
            } catch (const ScheduleError& e) {
              const std::string msg = e.what();
              EXPECT_NE(msg.find("p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v)),
                        std::string::npos) << msg;
              ++rejected;
            }
            continue;
          }
          const Schedule s = generate(kind, p, m, v);
          ValidationReport rep;
          ASSERT_NO_THROW(rep = validate(s)) << kind << " p=" << p << " m=" << m << " v=" << v;
          EXPECT_EQ(s.placement, v_kind(kind) ? Placement::v : Placement::loop);
          EXPECT_EQ(rep.communication_added, p * v == 1);  // one stage: nothing to send
          EXPECT_EQ(rep.split_backward, kind != "gpipe" && kind != "1f1b" && kind != "interleaved");
          if (kind != "dualpipev") {  // dualpipev splits only some backwards
            EXPECT_EQ(rep.compute_actions, p * m * v * (rep.split_backward ? 3 : 2));
          }
          EXPECT_EQ(rep.messages, 2 * m * (p * v - 1));
          // The compute-only form validates the same, communication implied.
          const ValidationReport implied = validate(generate_compute(kind, p, m, v));
          EXPECT_EQ(implied.messages, rep.messages);
          EXPECT_TRUE(implied.communication_added || p * v == 1);
          ++supported;
        }
  EXPECT_EQ(supported + rejected, cases);
  EXPECT_EQ(cases, static_cast<int>(schedule_kinds().size()) * 3 * (4 * 32 + 15 + 17 + 19 + 21));
  EXPECT_GT(rejected, 0);
}

TEST(ScheduleGenerators, RejectsUnknownKindAndBadSizes) {
  try {
    generate("pipedream", 2, 4, 1);
    FAIL();
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("'pipedream'"), std::string::npos);
  }
  EXPECT_THROW(check_supported("1f1b", 0, 4, 1), ScheduleError);
  EXPECT_THROW(check_supported("gpipe", 2, 4, 2), ScheduleError);
  EXPECT_THROW(interleaved(4, 3, 2), ScheduleError);  // fewer micro-batches than stages
  EXPECT_NO_THROW(check_supported("interleaved", 4, 6, 2));
  EXPECT_THROW(check_supported("zb-v", 4, 8, 1), ScheduleError);
  EXPECT_THROW(dualpipe_v(4, 7), ScheduleError);  // needs m >= 2p
  try {
    generate("zb-w", 2, 4, 2);
    FAIL();
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("'zb-w', expected one of gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, v-half, v-min, dualpipev"),
              std::string::npos) << e.what();
  }
}

TEST(ScheduleGenerators, OneFOneBHasWarmupSteadyCooldown) {
  const int p = 4, m = 6;
  const Schedule s = one_f_one_b(p, m);
  for (int r = 0; r < p; ++r) {
    const auto& list = s.ranks[r];
    const int warmup = std::min(p - r - 1, m);
    for (int i = 0; i < warmup; ++i) EXPECT_EQ(list[i], (Action{ActionKind::F, i, 0}));
    EXPECT_EQ(list[warmup], (Action{ActionKind::F, warmup, 0}));
    EXPECT_EQ(list[warmup + 1], (Action{ActionKind::B, 0, 0}));  // steady state starts 1F1B
    EXPECT_EQ(list[list.size() - 2], (Action{ActionKind::B, m - 1, 0}));
    EXPECT_EQ(list.back(), reduce_grad(0));  // right after the last B
    EXPECT_EQ(count_kind(list, ActionKind::F), m);
  }
  EXPECT_EQ(to_text(one_f_one_b(2, 3)), "pipeline p=2 m=3 v=1\n0: F0 F1 B0 F2 B1 B2 RD\n1: F0 B0 F1 B1 F2 B2 RD\n");
}

TEST(ScheduleGenerators, InterleavedWithOneChunkIsOneFOneB) {
  EXPECT_EQ(interleaved(3, 7, 1), one_f_one_b(3, 7));
  const Schedule s = interleaved(2, 2, 2);
  EXPECT_EQ(to_text(s), "pipeline p=2 m=2 v=2\n0: F0 F1 F0.1 F1.1 B0.1 B1.1 RD.1 B0 B1 RD\n1: F0 F1 F0.1 B0.1 F1.1 B1.1 RD.1 B0 B1 RD\n");
}

TEST(ScheduleGenerators, ZbH1SplitsBackwardAndKeepsOneFOneBOrder) {
  const Schedule z = zb_h1(4, 8), o = one_f_one_b(4, 8);
  for (int r = 0; r < 4; ++r) {
    ActionList fi, fb;  // F/I order must equal 1F1B's F/B order
    for (const Action& a : z.ranks[r])
      if (a.kind != ActionKind::W) fi.push_back({a.kind == ActionKind::I ? ActionKind::B : a.kind, a.mb, a.chunk});
    EXPECT_EQ(fi, o.ranks[r]);
    EXPECT_EQ(count_kind(z.ranks[r], ActionKind::W), 8);
  }
}

TEST(ScheduleGenerators, InterleavedRoundsWhenStagesDoNotDivideMicrobatches) {
  // p=2, m=5, v=2: two rounds of 3 and 2 micro-batches; each chunk runs the
  // round's micro-batches in turn, rank 0 warms up with 2 + 3 forwards.
  const Schedule s = interleaved(2, 5, 2);
  const std::vector<Action> f0 = {{ActionKind::F, 0, 0}, {ActionKind::F, 1, 0}, {ActionKind::F, 2, 0},
                                  {ActionKind::F, 0, 1}, {ActionKind::F, 1, 1}, {ActionKind::F, 2, 1}};
  EXPECT_EQ(std::vector<Action>(s.ranks[0].begin(), s.ranks[0].begin() + 6), f0);
  EXPECT_EQ(s.ranks[0][6], (Action{ActionKind::B, 0, 1}));  // warm-up of 5, then 1F1B: F2.1 then B0.1
  EXPECT_EQ(s.ranks[0][7], (Action{ActionKind::F, 3, 0}));
}

TEST(ScheduleGenerators, ZbVHasTheVShape) {
  for (int p = 1; p <= 6; ++p)
    for (int m : {1, p, 2 * p, 3 * p + 1}) {
      const Schedule s = zb_v(p, m);
      for (int r = 0; r < p; ++r) {
        const auto& list = s.ranks[r];
        // Rank r starts with min(m, 2(p-r)-1) chunk-0 forwards (the down-stroke).
        const int down = std::min(m, 2 * (p - r) - 1);
        for (int i = 0; i < down; ++i) EXPECT_EQ(list[i], (Action{ActionKind::F, i, 0})) << "p=" << p << " r=" << r;
        // Its first backward is chunk 1's input gradient of micro-batch 0
        // (the bottom of the V turns round first), right after a chunk-1 forward.
        auto first_i = std::find_if(list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::I; });
        ASSERT_NE(first_i, list.end());
        EXPECT_EQ(*first_i, (Action{ActionKind::I, 0, 1}));
        EXPECT_EQ((first_i - 1)->kind, ActionKind::F);
        EXPECT_EQ((first_i - 1)->chunk, 1);
        EXPECT_EQ(count_kind(list, ActionKind::W), 2 * m);
      }
    }
}

TEST(ScheduleGenerators, EveryKindPlacesOneReduceGradRightAfterEachChunksLastWeightGradient) {
  for (const std::string& kind : schedule_kinds())
    for (int p = 1; p <= 5; ++p)
      for (int m : {1, 2, 5, 2 * p, 2 * p + 3}) {
        const int v = kind == "interleaved" ? 3 : default_chunks(kind);
        try {
          check_supported(kind, p, m, v);
        } catch (const ScheduleError&) {
          continue;
        }
        const Schedule s = generate_compute(kind, p, m, v);
        for (int r = 0; r < p; ++r) {
          const auto& list = s.ranks[r];
          for (int c = 0; c < v; ++c) {
            int last_weights = -1, reduce = -1, reduces = 0;
            for (int i = 0; i < static_cast<int>(list.size()); ++i) {
              if (list[i].chunk != c) continue;
              if (adds_weight_grads(list[i].kind)) last_weights = i;
              if (list[i].kind == ActionKind::REDUCE_GRAD) reduce = i, ++reduces;
            }
            EXPECT_EQ(reduces, 1) << kind << " p=" << p << " m=" << m << " rank " << r << " chunk " << c;
            EXPECT_EQ(reduce, last_weights + 1) << kind << " p=" << p << " m=" << m << " rank " << r << " chunk " << c;
          }
        }
        // With communication: after the chunk's last B or W and nothing but that B's SEND_B between them.
        const Schedule full = generate(kind, p, m, v);
        for (const auto& list : full.ranks)
          for (size_t i = 0; i < list.size(); ++i) {
            if (list[i].kind != ActionKind::REDUCE_GRAD) continue;
            ASSERT_GE(i, 1u);
            const Action& before = list[i - 1];
            EXPECT_TRUE(adds_weight_grads(before.kind) || before.kind == ActionKind::SEND_B) << kind << " " << to_token(before);
          }
      }
}

TEST(ScheduleGenerators, ChunksDefaultToWhatTheKindNeeds) {
  EXPECT_EQ(default_chunks("zb-v"), 2);
  EXPECT_EQ(default_chunks("dualpipev"), 2);
  EXPECT_EQ(default_chunks("v-half"), 2);
  EXPECT_EQ(default_chunks("v-min"), 2);
  for (const std::string kind : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "file"}) EXPECT_EQ(default_chunks(kind), 1) << kind;
  EXPECT_THROW(default_chunks("zb-w"), ScheduleError);
  EXPECT_EQ(generate("zb-v", 4, 8), generate("zb-v", 4, 8, 2));  // v = 0: the kind's default
  EXPECT_EQ(generate_compute("dualpipev", 2, 4).chunks, 2);
  EXPECT_EQ(generate("1f1b", 2, 4).chunks, 1);
  try {  // an explicit other value is an error naming it
    generate("zb-v", 4, 8, 3);
    FAIL();
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("kind 'zb-v' with p=4 m=8 v=3: this kind runs two chunks per rank in a V, expected v=2"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(generate("dualpipev", 2, 4, 1), ScheduleError);
}
