// Generator invariants over p 1..8, m 1..32, v 1..3: every supported case
// validates, unsupported ones are rejected with the values named.
#include <gtest/gtest.h>

#include <algorithm>

#include "schedules/generators.h"
#include "schedules/validate.h"

using namespace trident::sched;

namespace {

int count_kind(const std::vector<Action>& list, ActionKind k) {
  return static_cast<int>(std::count_if(list.begin(), list.end(), [&](const Action& a) { return a.kind == k; }));
}

}  // namespace

TEST(ScheduleGenerators, EverySupportedCaseValidatesAndOthersAreRejected) {
  int supported = 0, rejected = 0;
  for (const std::string kind : {"gpipe", "1f1b", "interleaved", "zb-h1"})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m)
        for (int v = 1; v <= 3; ++v) {
          const bool expect_ok = kind == "interleaved" ? (v == 1 || m % p == 0) : v == 1;
          if (!expect_ok) {
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
          EXPECT_EQ(rep.communication_added, p * v == 1);  // one stage: nothing to send
          EXPECT_EQ(rep.split_backward, kind == "zb-h1");
          EXPECT_EQ(rep.compute_actions, p * m * v * (kind == "zb-h1" ? 3 : 2));
          EXPECT_EQ(rep.messages, 2 * m * (p * v - 1));
          ++supported;
        }
  EXPECT_EQ(supported + rejected, 4 * 8 * 32 * 3);
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
  EXPECT_THROW(interleaved(4, 6, 2), ScheduleError);
  EXPECT_NO_THROW(check_supported("interleaved", 4, 6, 1));
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
    EXPECT_EQ(list.back(), (Action{ActionKind::B, m - 1, 0}));
    EXPECT_EQ(count_kind(list, ActionKind::F), m);
  }
  EXPECT_EQ(to_text(one_f_one_b(2, 3)), "pipeline p=2 m=3 v=1\n0: F0 F1 B0 F2 B1 B2\n1: F0 B0 F1 B1 F2 B2\n");
}

TEST(ScheduleGenerators, InterleavedWithOneChunkIsOneFOneB) {
  EXPECT_EQ(interleaved(3, 7, 1), one_f_one_b(3, 7));
  const Schedule s = interleaved(2, 2, 2);
  EXPECT_EQ(to_text(s), "pipeline p=2 m=2 v=2\n0: F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1\n1: F0 F1 F0.1 B0.1 F1.1 B1.1 B0 B1\n");
}

TEST(ScheduleGenerators, ZbH1SplitsBackwardAndKeepsOneFOneBOrder) {
  const Schedule z = zb_h1(4, 8), o = one_f_one_b(4, 8);
  for (int r = 0; r < 4; ++r) {
    std::vector<Action> fi, fb;  // F/I order must equal 1F1B's F/B order
    for (const Action& a : z.ranks[r])
      if (a.kind != ActionKind::W) fi.push_back({a.kind == ActionKind::I ? ActionKind::B : a.kind, a.mb, a.chunk});
    EXPECT_EQ(fi, o.ranks[r]);
    EXPECT_EQ(count_kind(z.ranks[r], ActionKind::W), 8);
  }
}
