// Layout: the rank grid {world, tp, cp, dp, pp}, and the experts' grid folded
// over it (ep), as a plain value. Pure C++ (no
// libtorch): rank <-> (tp, dp, pp) coordinates and every group's membership are
// pure functions, so the process-group code and the tests agree by construction.
#pragma once

#include <string>
#include <vector>

namespace trident {

// A rank's place in the grid; each index counts from 0.
struct Coords {
  int tp = 0;  // index within its tensor-parallel group
  int dp = 0;  // data-parallel replica
  int pp = 0;  // pipeline stage
  int cp = 0;  // place in its context-parallel group (NOTE [context grid])
  bool operator==(const Coords& o) const { return tp == o.tp && dp == o.dp && pp == o.pp && cp == o.cp; }
  bool operator!=(const Coords& o) const { return !(*this == o); }
};

// NOTE [rank order]
// tp varies fastest, then cp, then dp, then pp (Megatron's order):
//   rank = pp * (dp_size * cp_size * tp_size) + dp * (cp_size * tp_size) + cp * tp_size + tp
// so a tensor-parallel group is a block of consecutive ranks (on one node when
// nodes hold tp ranks each, where its many all-reduces are cheapest), a
// context-parallel group the next closest (its ring passes keys and values
// every layer), and a pipeline stage is a contiguous slab of dp * cp * tp ranks.
//
// NOTE [context grid]
// Context parallelism splits every sequence over the cp ranks of a group
// (NOTE [context split] in core/context_split.h); they hold the same
// parameters, so for the gradients the dp x cp ranks at one (tp, pp) are one
// data-parallel group (dp_cp_group): the dense gradients are averaged and
// ZeRO-1 shards over it, as Megatron reduces over its dp-cp group. The
// samples are the dp replicas' alone: the ranks of a cp group read the same
// samples and keep their own slices of them. cp = 1: today's grid.
//
// NOTE [expert grid]
// The MoE layers' experts are laid over the same ranks by a second folding, Megatron's "MoE
// parallel folding" (its expert rank generator orders the experts' grid etp, ep, edp, pp as the
// dense one orders tp, cp, dp, pp): per pipeline stage the tp x cp x dp ranks are etp x ep x edp.
// etp, how many ranks split each expert (its width, as the dense MLP is split), is any divisor
// of tp (tp, the default and Megatron's; 1: whole experts): tp index t is etp index t mod etp of
// token slice t / etp, and the tp / etp = n ranks of a tp group at one etp index each take 1/n of
// the micro-batch's tokens (NOTE [experts under tensor parallelism] in parallel/token_dispatcher.h).
// A rank's place u = (dp · cp + cp index) · n + tp / etp counts its etp index's token slices over
// the cp ranks and replicas (each cp rank routes its own part: experts see tokens, not sequences);
// ep varies fastest in u: an expert-parallel group is ep consecutive places at one etp index
// (ep_rank = u mod ep), rank j of it holding experts [j·E/ep, (j+1)·E/ep); the expert-data-parallel
// group is the places with the same ep_rank (edp = n · cp · dp / ep), holding the same experts and
// reducing their gradients. etp = tp: ep folds over the cp ranks and dp replicas; etp = 1 lets ep
// take the tp ranks (tp 2, dp 1, ep 2: half the experts each); ep = 1, etp = tp: edp is dp x cp.
struct Layout {
  int world = 1;
  int tp = 1;
  int pp = 1;
  int dp = 1;
  int ep = 1;  // expert-parallel size (NOTE [expert grid]); divides (tp / etp) x cp x dp
  int cp = 1;  // context-parallel size (NOTE [context grid])
  int etp = 1;  // expert tensor-parallel size (NOTE [expert grid]): a divisor of tp

  // tp / etp: the token slices of a tp group (1 when the experts split like the MLP).
  int token_slices() const { return tp / etp; }
  // NOTE [expert grid]: rank's place among the token slices of its etp index.
  int expert_place(int rank) const {
    const Coords c = coords(rank);
    return (c.dp * cp + c.cp) * token_slices() + c.tp / etp;
  }
  // The places of a stage and etp index: (tp / etp) x cp x dp.
  int expert_places() const { return token_slices() * cp * dp; }
  // The experts fold otherwise than the dense grid: their own groups are built.
  bool experts_folded() const { return ep > 1 || etp != tp; }

  // Validates every factor >= 1, tp * cp * pp * dp == world (check_layout_factors,
  // core/config.h), etp dividing tp (0: tp) and ep dividing (tp / etp) x cp x dp; throws
  // ConfigError naming every factor, e.g. "layout: tp(2) x pp(4) x dp(2) = 16 but
  // WORLD_SIZE = 8".
  static Layout make(int world, int tp, int pp, int dp, int ep = 1, int cp = 1, int etp = 0);

  Coords coords(int rank) const;  // throws std::out_of_range for rank outside [0, world)
  int rank(const Coords& c) const;  // throws std::out_of_range for indices outside the grid

  // Groups containing `rank`, members in ascending rank order (for pp_group this
  // is ascending stage order).
  std::vector<int> tp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  std::vector<int> model_parallel_group(int rank) const;  // the tp * pp ranks sharing rank's dp and cp indices
  // NOTE [context grid]: the cp ranks splitting rank's sequences, and the
  // dp x cp ranks averaging its dense gradients (the dp group at cp = 1).
  std::vector<int> cp_group(int rank) const;
  std::vector<int> dp_cp_group(int rank) const;
  // First and last pipeline stage at rank's (tp, dp): they hold the tied word
  // embedding and all-reduce its gradient. A single rank when pp == 1; for ranks
  // on a middle stage, the group of its own (tp, dp) column all the same.
  std::vector<int> embedding_group(int rank) const;

  // NOTE [expert grid]: the ep ranks holding one expert set's shares, and the
  // edp ranks holding the same experts; rank's index in each.
  std::vector<int> ep_group(int rank) const;
  std::vector<int> expert_dp_group(int rank) const;
  int ep_rank(int rank) const { return expert_place(rank) % ep; }
  int expert_dp_rank(int rank) const { return expert_place(rank) / ep; }
  // NOTE [expert grid]: within rank's tp group, the etp ranks splitting its experts (one token
  // slice), and the tp / etp ranks taking one slice each at its etp index.
  std::vector<int> etp_group(int rank) const;
  std::vector<int> token_slice_group(int rank) const;

  // Every group of a kind, ordered by smallest member. Every rank computes the
  // same lists, so creating process groups by iterating them in order is safe
  // (c10d needs every rank to create every group in the same order).
  std::vector<std::vector<int>> all_tp_groups() const;
  std::vector<std::vector<int>> all_dp_groups() const;
  std::vector<std::vector<int>> all_pp_groups() const;
  std::vector<std::vector<int>> all_model_parallel_groups() const;
  std::vector<std::vector<int>> all_embedding_groups() const;
  std::vector<std::vector<int>> all_cp_groups() const;
  std::vector<std::vector<int>> all_dp_cp_groups() const;
  std::vector<std::vector<int>> all_ep_groups() const;
  std::vector<std::vector<int>> all_etp_groups() const;
  std::vector<std::vector<int>> all_token_slice_groups() const;
  std::vector<std::vector<int>> all_expert_dp_groups() const;

  // Pipeline neighbours at the same (tp, cp, dp). Without wrap they are -1 past the
  // ends; with wrap the last stage's next is the first stage and vice versa,
  // which is how interleaved schedules pass a micro-batch from virtual chunk v
  // on the last stage to chunk v + 1 on the first.
  int prev_pp_rank(int rank, bool wrap = false) const;
  int next_pp_rank(int rank, bool wrap = false) const;
  int stage_rank(int rank, int stage) const;  // the rank at `stage` with rank's (tp, cp, dp)
  bool is_first_stage(int rank) const { return coords(rank).pp == 0; }
  bool is_last_stage(int rank) const { return coords(rank).pp == pp - 1; }

  // "world 8 = tp 2 x dp 2 x pp 2" (one line; "tp 2 x cp 2 x dp 1 x pp 2"
  // with cp > 1; with ep > 1 followed by "; experts: ep 2 x edp 1").
  std::string describe() const;
  // "rank 5: tp 1 dp 0 pp 1" (one line, for start-up logs; " cp 1" after tp's
  // index with cp > 1).
  std::string describe(int rank) const;
  // One line per pipeline stage listing its ranks as a dp x (cp x tp) grid.
  std::string describe_grid() const;

  bool operator==(const Layout& o) const {
    return world == o.world && tp == o.tp && pp == o.pp && dp == o.dp && ep == o.ep && cp == o.cp && etp == o.etp;
  }
  bool operator!=(const Layout& o) const { return !(*this == o); }
};

}  // namespace trident
