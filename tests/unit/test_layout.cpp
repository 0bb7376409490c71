// Layout: rank <-> coordinates and group membership over every factorization
// (tp, pp, dp) of every world size 1..64.
#include "parallel/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "core/config.h"

using trident::ConfigError;
using trident::Coords;
using trident::Layout;

namespace {

std::vector<Layout> all_layouts(int max_world) {
  std::vector<Layout> out;
  for (int w = 1; w <= max_world; ++w)
    for (int tp = 1; tp <= w; ++tp)
      for (int pp = 1; pp <= w; ++pp)
        if (w % (tp * pp) == 0) out.push_back(Layout::make(w, tp, pp, w / (tp * pp)));
  return out;
}

// Each rank appears in exactly one group of the list, every group has `size`
// members in ascending order, and group_of(r) returns r's group from the list.
template <class GroupOf>
void check_partition(const Layout& l, const std::vector<std::vector<int>>& groups, size_t size,
                     GroupOf group_of, const char* kind) {
  SCOPED_TRACE(l.describe() + " " + kind);
  std::vector<int> seen(l.world, 0);
  for (const auto& g : groups) {
    ASSERT_EQ(g.size(), size);
    ASSERT_TRUE(std::is_sorted(g.begin(), g.end()));
    for (int r : g) {
      ASSERT_GE(r, 0);
      ASSERT_LT(r, l.world);
      ++seen[r];
      ASSERT_EQ(group_of(r), g);
    }
  }
  for (int r = 0; r < l.world; ++r) ASSERT_EQ(seen[r], 1) << "rank " << r;
  // Deterministic order: by smallest member.
  for (size_t i = 1; i < groups.size(); ++i) ASSERT_LT(groups[i - 1].front(), groups[i].front());
}

}  // namespace

TEST(Layout, MakeRejectsBadFactorsNamingEach) {
  try {
    Layout::make(8, 2, 4, 2);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("layout: tp(2) x pp(4) x dp(2) = 16 but WORLD_SIZE = 8"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Layout::make(4, 0, 4, 1), ConfigError);
  EXPECT_THROW(Layout::make(4, 4, 1, -1), ConfigError);
  EXPECT_THROW(Layout::make(0, 1, 1, 1), ConfigError);
  EXPECT_NO_THROW(Layout::make(12, 3, 2, 2));
}

TEST(Layout, MegatronOrderExample) {
  // world 8 = tp 2 x dp 2 x pp 2: ranks 0..3 are stage 0, tp pairs {0,1} {2,3}.
  const Layout l = Layout::make(8, 2, 2, 2);
  EXPECT_EQ(l.coords(5), (Coords{1, 0, 1}));
  EXPECT_EQ(l.rank(Coords{1, 1, 0}), 3);
  EXPECT_EQ(l.tp_group(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(l.dp_group(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(l.pp_group(5), (std::vector<int>{1, 5}));
  EXPECT_EQ(l.model_parallel_group(5), (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(l.embedding_group(2), (std::vector<int>{2, 6}));
  EXPECT_EQ(l.all_tp_groups(), (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.all_dp_groups(), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.all_pp_groups(), (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(l.prev_pp_rank(5), 1);
  EXPECT_EQ(l.next_pp_rank(5), -1);
  EXPECT_EQ(l.next_pp_rank(5, /*wrap=*/true), 1);
  EXPECT_EQ(l.describe(), "world 8 = tp 2 x dp 2 x pp 2");
  EXPECT_EQ(l.describe(5), "rank 5: tp 1 dp 0 pp 1");
  EXPECT_NE(l.describe_grid().find("stage 1: [4 5 | 6 7]"), std::string::npos) << l.describe_grid();
}

// NOTE [expert grid]: world 16 = tp 2 x dp 4 x pp 2 with ep 2. Stage 0's
// replicas are dp 0..3 (ranks 2d + tp); an expert-parallel group is two
// consecutive replicas at one tp index, the expert-data-parallel group the
// replicas at the same place in theirs. Megatron's folding with etp = tp:
// for each (tp, pp), ep x edp is the dp axis, ep fastest.
TEST(Layout, ExpertGridFoldsOverTheDataParallelReplicas) {
  const Layout l = Layout::make(16, 2, 2, 4, 2);
  EXPECT_EQ(l.ep_group(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(l.ep_group(5), (std::vector<int>{5, 7}));  // tp 1, dp 2
  EXPECT_EQ(l.expert_dp_group(0), (std::vector<int>{0, 4}));
  EXPECT_EQ(l.expert_dp_group(7), (std::vector<int>{3, 7}));  // dp 3: place 1 of ep group {5, 7}
  EXPECT_EQ(l.ep_rank(7), 1);
  EXPECT_EQ(l.expert_dp_rank(7), 1);
  EXPECT_EQ(l.all_ep_groups(), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7},
                                                               {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(l.all_expert_dp_groups(), (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7},
                                                                      {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  // Every rank is in one group of each kind, and a group's ep x edp ranks are
  // exactly one dp group: the experts' grid uses the dense grid's ranks.
  for (int r = 0; r < l.world; ++r) {
    std::set<int> both;
    for (int a : l.ep_group(r))
      for (int b : l.expert_dp_group(a)) both.insert(b);
    const std::vector<int> dp = l.dp_group(r);
    EXPECT_EQ(both, std::set<int>(dp.begin(), dp.end())) << "rank " << r;
  }
  EXPECT_EQ(l.describe(), "world 16 = tp 2 x dp 4 x pp 2; experts: ep 2 x edp 2");
  EXPECT_EQ(l.describe(7), "rank 7: tp 1 dp 3 pp 0 ep 1 edp 1");
  // ep = 1: one rank per ep group, and the experts' data-parallel group is dp's.
  const Layout one = Layout::make(8, 2, 2, 2);
  for (int r = 0; r < one.world; ++r) {
    EXPECT_EQ(one.ep_group(r), (std::vector<int>{r}));
    EXPECT_EQ(one.expert_dp_group(r), one.dp_group(r));
  }
  EXPECT_THROW(Layout::make(8, 1, 2, 4, 3), ConfigError);  // 3 does not divide dp 4
  EXPECT_THROW(Layout::make(8, 1, 2, 4, 0), ConfigError);
}

// NOTE [expert grid] with etp: against megatron-core's RankGenerator for the
// experts (parallel_state.py: order "tp-ep-dp-pp" with tp = etp and dp = edp,
// so rank = etp_r + etp·(ep_r + ep·(edp_r + edp·pp_r))), written out here as
// that closed form. Every layout of up to 16 ranks with cp = 1, etp tp or 1:
// each rank's ep and edp indices, and its groups as the closed form's ranks.
TEST(Layout, ExpertGridIsMegatronsFoldingForEveryEtp) {
  int checked = 0;
  for (int world : {1, 2, 4, 8, 16})
    for (int tp = 1; tp <= world; tp *= 2)
      for (int cp = 1; cp <= 2 && tp * cp <= world; cp *= 2)
      for (int pp = 1; tp * cp * pp <= world; pp *= 2)
        for (int etp = 1; etp <= tp; etp *= 2)  // every divisor of a power of 2
          for (int ep = 1; ep <= world; ep *= 2) {
            // The experts' grid etp x ep x edp x pp over the dense tp x cp x dp x pp (the cp ranks
            // fold into ep and edp as the dp replicas do).
            const int dp = world / (tp * cp * pp), stage = world / pp, edp = stage / (etp * ep);
            if (stage % (etp * ep) != 0) {
              EXPECT_THROW(Layout::make(world, tp, pp, dp, ep, cp, etp), ConfigError);
              continue;
            }
            const Layout l = Layout::make(world, tp, pp, dp, ep, cp, etp);
            const auto megatron = [&](int etp_r, int ep_r, int edp_r, int pp_r) {
              return etp_r + etp * (ep_r + ep * (edp_r + edp * pp_r));
            };
            for (int r = 0; r < world; ++r) {
              const int etp_r = r % etp, ep_r = r / etp % ep, edp_r = r / (etp * ep) % edp, pp_r = r / stage;
              ASSERT_EQ(l.ep_rank(r), ep_r) << l.describe() << " rank " << r;
              ASSERT_EQ(l.expert_dp_rank(r), edp_r) << l.describe() << " rank " << r;
              std::vector<int> ep_group, edp_group;
              for (int j = 0; j < ep; ++j) ep_group.push_back(megatron(etp_r, j, edp_r, pp_r));
              for (int j = 0; j < edp; ++j) edp_group.push_back(megatron(etp_r, ep_r, j, pp_r));
              ASSERT_EQ(l.ep_group(r), ep_group) << l.describe() << " rank " << r;
              ASSERT_EQ(l.expert_dp_group(r), edp_group) << l.describe() << " rank " << r;
            }
            ++checked;
          }
  EXPECT_GT(checked, 80);
  // cp 2 x dp 2, ep 4: each of the four ranks holds a quarter of the experts; ep 2 pairs the cp ranks.
  EXPECT_EQ(Layout::make(4, 1, 1, 2, 4, 2, 1).ep_group(3), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(Layout::make(4, 1, 1, 2, 2, 2, 1).ep_group(2), (std::vector<int>{2, 3}));
  EXPECT_EQ(Layout::make(4, 1, 1, 2, 2, 2, 1).expert_dp_group(2), (std::vector<int>{0, 2}));
  // tp 2, dp 1, etp 1, ep 2: the two tp ranks hold half the experts each.
  const Layout folded = Layout::make(2, 2, 1, 1, 2, 1, 1);
  EXPECT_EQ(folded.ep_group(1), (std::vector<int>{0, 1}));
  EXPECT_EQ(folded.expert_dp_group(1), (std::vector<int>{1}));
  EXPECT_TRUE(folded.experts_folded());
  EXPECT_EQ(folded.describe(), "world 2 = tp 2 x dp 1 x pp 1; experts: etp 1 x ep 2 x edp 1");
  EXPECT_FALSE(Layout::make(4, 2, 1, 2, 1, 1, 2).experts_folded());  // etp = tp, ep 1: the dense grid
  EXPECT_THROW(Layout::make(4, 2, 1, 2, 1, 1, 4), ConfigError);       // etp above tp
  EXPECT_THROW(Layout::make(8, 4, 1, 2, 1, 1, 3), ConfigError);       // etp not dividing tp
  // tp 4, etp 2: tp index t is part t mod 2 of token slice t / 2.
  const Layout mixed = Layout::make(4, 4, 1, 1, 2, 1, 2);
  EXPECT_EQ(mixed.etp_group(1), (std::vector<int>{0, 1}));
  EXPECT_EQ(mixed.token_slice_group(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(mixed.ep_group(1), (std::vector<int>{1, 3}));  // the two slices hold half the experts each
  EXPECT_EQ(mixed.describe(), "world 4 = tp 4 x dp 1 x pp 1; experts: etp 2 x ep 2 x edp 1");
  EXPECT_THROW(Layout::make(4, 2, 1, 2, 4, 1, 2), ConfigError);       // ep 4 does not divide dp 2 at etp = tp
  EXPECT_NO_THROW(Layout::make(4, 2, 1, 2, 4, 1, 1));                 // ... but divides (tp / etp) x dp
}

// NOTE [rank order], NOTE [context grid]: world 16 = tp 2 x cp 2 x dp 2 x pp 2,
// Megatron's order tp, cp, dp, pp: a cp group is the ranks tp apart at one
// (tp, dp, pp); the gradients' group is every dp x cp rank at one (tp, pp),
// which is the union of the cp groups of one dp group; the samples' dp group
// keeps the cp index.
TEST(Layout, ContextGridSitsBetweenTpAndDp) {
  const Layout l = Layout::make(16, 2, 2, 2, 1, 2);
  EXPECT_EQ(l.coords(7), (Coords{1, 1, 0, 1}));  // 7 = ((0·2 + 1)·2 + 1)·2 + 1
  EXPECT_EQ(l.rank(Coords{1, 1, 1, 0}), 13);
  EXPECT_EQ(l.tp_group(7), (std::vector<int>{6, 7}));
  EXPECT_EQ(l.cp_group(7), (std::vector<int>{5, 7}));
  EXPECT_EQ(l.dp_group(7), (std::vector<int>{3, 7}));
  EXPECT_EQ(l.dp_cp_group(7), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(l.pp_group(7), (std::vector<int>{7, 15}));
  EXPECT_EQ(l.model_parallel_group(7), (std::vector<int>{6, 7, 14, 15}));
  EXPECT_EQ(l.all_cp_groups(), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7},
                                                               {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(l.all_dp_cp_groups(), (std::vector<std::vector<int>>{{0, 2, 4, 6}, {1, 3, 5, 7},
                                                                  {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(l.describe(), "world 16 = tp 2 x cp 2 x dp 2 x pp 2");
  EXPECT_EQ(l.describe(7), "rank 7: tp 1 cp 1 dp 1 pp 0");
  EXPECT_NE(l.describe_grid().find("stage 1: [8 9 / 10 11 | 12 13 / 14 15]"), std::string::npos) << l.describe_grid();
  for (int r = 0; r < l.world; ++r) {
    ASSERT_EQ(l.rank(l.coords(r)), r);
    std::set<int> both;
    for (int a : l.dp_group(r))
      for (int b : l.cp_group(a)) both.insert(b);
    const std::vector<int> g = l.dp_cp_group(r);
    EXPECT_EQ(both, std::set<int>(g.begin(), g.end())) << "rank " << r;
  }
  // cp = 1: the gradients' group is dp's, and a cp group is the rank alone.
  const Layout one = Layout::make(8, 2, 2, 2);
  for (int r = 0; r < one.world; ++r) {
    EXPECT_EQ(one.dp_cp_group(r), one.dp_group(r));
    EXPECT_EQ(one.cp_group(r), (std::vector<int>{r}));
  }
  EXPECT_THROW(Layout::make(8, 2, 2, 2, 1, 2), ConfigError);  // tp 2 x cp 2 x dp 2 x pp 2 = 16
  EXPECT_THROW(Layout::make(8, 1, 1, 4, 16, 2), ConfigError);  // ep 16 does not divide cp x dp = 8
}

TEST(Layout, OutOfRangeRanksAndCoordsThrow) {
  const Layout l = Layout::make(4, 2, 2, 1);
  EXPECT_THROW(l.coords(4), std::out_of_range);
  EXPECT_THROW(l.coords(-1), std::out_of_range);
  EXPECT_THROW(l.rank(Coords{2, 0, 0}), std::out_of_range);
  EXPECT_THROW(l.rank(Coords{0, 1, 0}), std::out_of_range);
  EXPECT_THROW(l.tp_group(9), std::out_of_range);
}

TEST(Layout, CoordsAndRankInvertEverywhere) {
  for (const Layout& l : all_layouts(64)) {
    std::set<std::tuple<int, int, int>> seen;
    for (int r = 0; r < l.world; ++r) {
      const Coords c = l.coords(r);
      ASSERT_EQ(l.rank(c), r) << l.describe();
      ASSERT_TRUE(c.tp >= 0 && c.tp < l.tp && c.dp >= 0 && c.dp < l.dp && c.pp >= 0 && c.pp < l.pp);
      ASSERT_EQ(r, c.pp * l.dp * l.tp + c.dp * l.tp + c.tp);
      seen.insert({c.tp, c.dp, c.pp});
    }
    ASSERT_EQ(seen.size(), static_cast<size_t>(l.world));
  }
}

TEST(Layout, GroupsPartitionRanksWithSharedCoordinates) {
  size_t layouts = 0;
  for (const Layout& l : all_layouts(64)) {
    ++layouts;
    check_partition(l, l.all_tp_groups(), l.tp, [&](int r) { return l.tp_group(r); }, "tp");
    check_partition(l, l.all_dp_groups(), l.dp, [&](int r) { return l.dp_group(r); }, "dp");
    check_partition(l, l.all_pp_groups(), l.pp, [&](int r) { return l.pp_group(r); }, "pp");
    check_partition(l, l.all_model_parallel_groups(), l.tp * l.pp,
                    [&](int r) { return l.model_parallel_group(r); }, "mp");
    if (HasFatalFailure()) return;
    for (int r = 0; r < l.world; ++r) {
      const Coords c = l.coords(r);
      for (int m : l.tp_group(r)) {
        ASSERT_EQ(l.coords(m).dp, c.dp);
        ASSERT_EQ(l.coords(m).pp, c.pp);
      }
      for (int m : l.dp_group(r)) {
        ASSERT_EQ(l.coords(m).tp, c.tp);
        ASSERT_EQ(l.coords(m).pp, c.pp);
      }
      const auto pg = l.pp_group(r);
      for (int s = 0; s < l.pp; ++s) {
        ASSERT_EQ(l.coords(pg[s]).pp, s);  // ascending stage order
        ASSERT_EQ(l.coords(pg[s]).tp, c.tp);
        ASSERT_EQ(l.coords(pg[s]).dp, c.dp);
      }
      for (int m : l.model_parallel_group(r)) ASSERT_EQ(l.coords(m).dp, c.dp);
    }
  }
  EXPECT_GT(layouts, 300u);  // every factorization of 1..64 was visited
}

TEST(Layout, EmbeddingGroupsHoldFirstAndLastStages) {
  for (const Layout& l : all_layouts(64)) {
    SCOPED_TRACE(l.describe());
    const auto groups = l.all_embedding_groups();
    ASSERT_EQ(groups.size(), static_cast<size_t>(l.tp * l.dp));
    std::vector<int> seen(l.world, 0);
    for (const auto& g : groups) {
      ASSERT_EQ(g.size(), l.pp == 1 ? 1u : 2u);
      for (int m : g) ++seen[m];
      ASSERT_TRUE(l.is_first_stage(g.front()));
      ASSERT_TRUE(l.is_last_stage(g.back()));
      ASSERT_EQ(l.coords(g.front()).tp, l.coords(g.back()).tp);
      ASSERT_EQ(l.coords(g.front()).dp, l.coords(g.back()).dp);
    }
    for (int r = 0; r < l.world; ++r) {
      const bool end_stage = l.is_first_stage(r) || l.is_last_stage(r);
      ASSERT_EQ(seen[r], end_stage ? 1 : 0) << "rank " << r;
      const auto g = l.embedding_group(r);
      ASSERT_EQ(l.coords(g.front()).tp, l.coords(r).tp);
      ASSERT_EQ(l.coords(g.front()).dp, l.coords(r).dp);
      if (end_stage) {
        ASSERT_NE(std::find(g.begin(), g.end(), r), g.end());
      }
    }
  }
}

TEST(Layout, PipelineNeighboursAreConsistent) {
  for (const Layout& l : all_layouts(64)) {
    SCOPED_TRACE(l.describe());
    for (int r = 0; r < l.world; ++r) {
      const Coords c = l.coords(r);
      const int next = l.next_pp_rank(r), prev = l.prev_pp_rank(r);
      ASSERT_EQ(next == -1, c.pp == l.pp - 1);
      ASSERT_EQ(prev == -1, c.pp == 0);
      ASSERT_EQ(l.is_first_stage(r), c.pp == 0);
      ASSERT_EQ(l.is_last_stage(r), c.pp == l.pp - 1);
      if (next != -1) {
        ASSERT_EQ(l.prev_pp_rank(next), r);
        ASSERT_EQ(l.coords(next).pp, c.pp + 1);
        ASSERT_EQ(l.coords(next).tp, c.tp);
        ASSERT_EQ(l.coords(next).dp, c.dp);
      }
      if (prev != -1) {
        ASSERT_EQ(l.next_pp_rank(prev), r);
      }
      // Wrapping walks the whole pipeline ring back to r in pp steps.
      ASSERT_EQ(l.prev_pp_rank(l.next_pp_rank(r, true), true), r);
      int walk = r;
      for (int i = 0; i < l.pp; ++i) walk = l.next_pp_rank(walk, true);
      ASSERT_EQ(walk, r);
      ASSERT_EQ(l.next_pp_rank(r, true), l.pp == 1 ? r : (next == -1 ? l.stage_rank(r, 0) : next));
    }
  }
}
