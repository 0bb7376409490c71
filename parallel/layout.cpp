// Layout: rank <-> coordinates and group membership (see NOTE [rank order]).
#include "parallel/layout.h"

#include <cassert>
#include <sstream>
#include <stdexcept>

#include "core/config.h"

namespace trident {

namespace {

// Groups of one kind, ordered by smallest member: a rank opens a group when it
// is the smallest member of its own group.
template <class GroupOf>
std::vector<std::vector<int>> collect(int world, GroupOf group_of) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < world; ++r) {
    std::vector<int> g = group_of(r);
    assert(!g.empty());
    if (g.front() == r) out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

Layout Layout::make(int world, int tp, int pp, int dp, int ep, int cp, int etp) {
  check_layout_factors("layout", world, tp, pp, dp, ep, cp, etp);  // the one copy of these rules (core/config.h)
  Layout l;
  l.ep = ep;
  l.etp = etp == 0 ? tp : etp;
  l.cp = cp;
  l.world = world;
  l.tp = tp;
  l.pp = pp;
  l.dp = dp;
  return l;
}

Coords Layout::coords(int rank) const {
  if (rank < 0 || rank >= world) {
    throw std::out_of_range("layout: rank " + std::to_string(rank) + " outside [0, " +
                            std::to_string(world) + ")");
  }
  Coords c;
  c.tp = rank % tp;
  c.cp = (rank / tp) % cp;
  c.dp = (rank / (tp * cp)) % dp;
  c.pp = rank / (tp * cp * dp);
  return c;
}

int Layout::rank(const Coords& c) const {
  if (c.tp < 0 || c.tp >= tp || c.dp < 0 || c.dp >= dp || c.pp < 0 || c.pp >= pp || c.cp < 0 || c.cp >= cp) {
    throw std::out_of_range("layout: coordinates (tp " + std::to_string(c.tp) + ", cp " + std::to_string(c.cp) +
                            ", dp " + std::to_string(c.dp) + ", pp " + std::to_string(c.pp) +
                            ") outside the grid " + describe());
  }
  return ((c.pp * dp + c.dp) * cp + c.cp) * tp + c.tp;
}

std::vector<int> Layout::tp_group(int r) const {
  Coords c = coords(r);
  std::vector<int> g;
  for (c.tp = 0; c.tp < tp; ++c.tp) g.push_back(rank(c));
  return g;
}

std::vector<int> Layout::dp_group(int r) const {
  Coords c = coords(r);
  std::vector<int> g;
  for (c.dp = 0; c.dp < dp; ++c.dp) g.push_back(rank(c));
  return g;
}

std::vector<int> Layout::cp_group(int r) const {
  Coords c = coords(r);
  std::vector<int> g;
  for (c.cp = 0; c.cp < cp; ++c.cp) g.push_back(rank(c));
  return g;
}

std::vector<int> Layout::dp_cp_group(int r) const {
  Coords c = coords(r);
  std::vector<int> g;
  for (c.dp = 0; c.dp < dp; ++c.dp)  // dp outer, cp inner: ascending rank order
    for (c.cp = 0; c.cp < cp; ++c.cp) g.push_back(rank(c));
  return g;
}

std::vector<int> Layout::pp_group(int r) const {
  Coords c = coords(r);
  std::vector<int> g;
  for (c.pp = 0; c.pp < pp; ++c.pp) g.push_back(rank(c));
  return g;
}

std::vector<int> Layout::model_parallel_group(int r) const {
  Coords c = coords(r);
  std::vector<int> g;
  // pp outer, tp inner: ascending rank order by the rank formula.
  for (c.pp = 0; c.pp < pp; ++c.pp) {
    for (c.tp = 0; c.tp < tp; ++c.tp) g.push_back(rank(c));
  }
  return g;
}

std::vector<int> Layout::embedding_group(int r) const {
  const int first = stage_rank(r, 0);
  const int last = stage_rank(r, pp - 1);
  if (first == last) return {first};
  return {first, last};
}

std::vector<std::vector<int>> Layout::all_tp_groups() const {
  return collect(world, [this](int r) { return tp_group(r); });
}
std::vector<std::vector<int>> Layout::all_dp_groups() const {
  return collect(world, [this](int r) { return dp_group(r); });
}
std::vector<std::vector<int>> Layout::all_pp_groups() const {
  return collect(world, [this](int r) { return pp_group(r); });
}
std::vector<std::vector<int>> Layout::all_model_parallel_groups() const {
  return collect(world, [this](int r) { return model_parallel_group(r); });
}
std::vector<std::vector<int>> Layout::all_embedding_groups() const {
  return collect(world, [this](int r) { return embedding_group(r); });
}

// NOTE [expert grid]: the rank at place u of rank c's etp index and pipeline stage.
namespace {
int rank_at_place(const Layout& l, Coords c, int u) {
  const int etp_index = c.tp % l.etp, n = l.token_slices();
  c.dp = u / (n * l.cp);
  c.cp = u / n % l.cp;
  c.tp = (u % n) * l.etp + etp_index;
  return l.rank(c);
}
}  // namespace

std::vector<int> Layout::ep_group(int r) const {
  const Coords c = coords(r);
  const int first = expert_place(r) / ep * ep;
  std::vector<int> g;  // ascending places are ascending ranks (dp, cp, then tp)
  for (int u = first; u < first + ep; ++u) g.push_back(rank_at_place(*this, c, u));
  return g;
}

std::vector<int> Layout::expert_dp_group(int r) const {
  const Coords c = coords(r);
  std::vector<int> g;
  for (int u = expert_place(r) % ep; u < expert_places(); u += ep) g.push_back(rank_at_place(*this, c, u));
  return g;
}

std::vector<int> Layout::etp_group(int r) const {
  Coords c = coords(r);
  const int first = c.tp / etp * etp;
  std::vector<int> g;
  for (c.tp = first; c.tp < first + etp; ++c.tp) g.push_back(rank(c));
  return g;
}

std::vector<int> Layout::token_slice_group(int r) const {
  Coords c = coords(r);
  std::vector<int> g;
  for (c.tp = c.tp % etp; c.tp < tp; c.tp += etp) g.push_back(rank(c));
  return g;
}

std::vector<std::vector<int>> Layout::all_etp_groups() const {
  return collect(world, [this](int r) { return etp_group(r); });
}
std::vector<std::vector<int>> Layout::all_token_slice_groups() const {
  return collect(world, [this](int r) { return token_slice_group(r); });
}

std::vector<std::vector<int>> Layout::all_cp_groups() const {
  return collect(world, [this](int r) { return cp_group(r); });
}
std::vector<std::vector<int>> Layout::all_dp_cp_groups() const {
  return collect(world, [this](int r) { return dp_cp_group(r); });
}

std::vector<std::vector<int>> Layout::all_ep_groups() const {
  return collect(world, [this](int r) { return ep_group(r); });
}
std::vector<std::vector<int>> Layout::all_expert_dp_groups() const {
  return collect(world, [this](int r) { return expert_dp_group(r); });
}

int Layout::stage_rank(int r, int stage) const {
  Coords c = coords(r);
  c.pp = stage;
  return rank(c);
}

int Layout::prev_pp_rank(int r, bool wrap) const {
  const int s = coords(r).pp;
  if (s > 0) return stage_rank(r, s - 1);
  return wrap ? stage_rank(r, pp - 1) : -1;
}

int Layout::next_pp_rank(int r, bool wrap) const {
  const int s = coords(r).pp;
  if (s + 1 < pp) return stage_rank(r, s + 1);
  return wrap ? stage_rank(r, 0) : -1;
}

std::string Layout::describe() const {
  std::ostringstream os;
  os << "world " << world << " = tp " << tp;
  if (cp > 1) os << " x cp " << cp;
  os << " x dp " << dp << " x pp " << pp;
  if (experts_folded()) {
    os << "; experts: ";
    if (etp != tp) os << "etp " << etp << " x ";
    os << "ep " << ep << " x edp " << expert_places() / ep;
  }
  return os.str();
}

std::string Layout::describe(int r) const {
  const Coords c = coords(r);
  std::ostringstream os;
  os << "rank " << r << ": tp " << c.tp;
  if (cp > 1) os << " cp " << c.cp;
  os << " dp " << c.dp << " pp " << c.pp;
  if (experts_folded()) os << " ep " << ep_rank(r) << " edp " << expert_dp_rank(r);
  return os.str();
}

std::string Layout::describe_grid() const {
  std::ostringstream os;
  os << describe() << " (per stage: dp replicas separated by |, " << (cp > 1 ? "cp groups by /, " : "")
     << "tp ranks within)\n";
  for (int s = 0; s < pp; ++s) {
    os << "  stage " << s << ":";
    for (int d = 0; d < dp; ++d) {
      os << (d == 0 ? " [" : " | ");
      for (int k = 0; k < cp; ++k) {
        os << (k ? " / " : "");
        for (int t = 0; t < tp; ++t) os << (t ? " " : "") << rank(Coords{t, d, s, k});
      }
    }
    os << "]\n";
  }
  return os.str();
}

}  // namespace trident
