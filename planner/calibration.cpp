#include "planner/calibration.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <cmath>
#include <set>

namespace trident::plan {

RingTerms ring_terms(const LinkSample& s) {
  const double n = s.ranks;
  // Patarasuk and Yuan 2009: a ring all-reduce is a reduce-scatter and an all-gather, each n-1 steps
  // moving 1/n of the message per link; a point-to-point message is one step of the whole.
  if (s.kind == "all_reduce") return {2 * (n - 1) / n * s.bytes, 2 * (n - 1), 1};
  if (s.kind == "all_gather") return {(n - 1) / n * s.bytes, n - 1, 1};
  if (s.kind == "p2p") return {s.bytes, 1, 0};
  throw PlanError("link sample kind '" + s.kind + "': expected all_reduce, all_gather or p2p");
}

double LinkFit::model_seconds(const LinkSample& s) const {
  const RingTerms r = ring_terms(s);
  return r.volume_bytes / (bandwidth_gbs * 1e9) + r.steps * latency_us * 1e-6 + r.calls * collective_us * 1e-6;
}

namespace {

// Weighted least squares of t ~ sum_j x_j * col_j over the columns in `free`
// (the others held at 0) by the normal equations; false when singular.
bool solve(const std::vector<std::array<double, 3>>& cols, const std::vector<double>& t, const std::vector<double>& w,
           const std::array<bool, 3>& free, std::array<double, 3>& x) {
  std::vector<int> idx;
  for (int j = 0; j < 3; ++j)
    if (free[j]) idx.push_back(j);
  const size_t k = idx.size();
  std::vector<std::vector<double>> a(k, std::vector<double>(k + 1, 0.0));
  for (size_t i = 0; i < t.size(); ++i)
    for (size_t r = 0; r < k; ++r) {
      for (size_t c = 0; c < k; ++c) a[r][c] += w[i] * cols[i][idx[r]] * cols[i][idx[c]];
      a[r][k] += w[i] * cols[i][idx[r]] * t[i];
    }
  for (size_t c = 0; c < k; ++c) {  // Gauss-Jordan with partial pivoting
    size_t piv = c;
    for (size_t r = c + 1; r < k; ++r)
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    if (std::abs(a[piv][c]) < 1e-300) return false;
    std::swap(a[c], a[piv]);
    for (size_t r = 0; r < k; ++r)
      if (r != c) {
        const double f = a[r][c] / a[c][c];
        for (size_t cc = c; cc <= k; ++cc) a[r][cc] -= f * a[c][cc];
      }
  }
  x = {0, 0, 0};
  for (size_t r = 0; r < k; ++r) x[static_cast<size_t>(idx[r])] = a[r][k] / a[r][r];
  return true;
}

}  // namespace

LinkFit fit_link(const std::vector<LinkSample>& samples, double latency_us) {
  std::set<double> sizes;
  for (const LinkSample& s : samples) {
    const std::string at = "link sample " + s.kind + " of " + std::to_string(s.bytes) + " bytes on " +
                           std::to_string(s.ranks) + " ranks";
    ring_terms(s);  // checks the kind
    if (s.ranks < 2) throw PlanError(at + ": expected ranks >= 2");
    if (!(s.bytes > 0) || !(s.seconds > 0) || !std::isfinite(s.seconds))
      throw PlanError(at + ": expected bytes > 0 and seconds > 0, got " + std::to_string(s.seconds) + " s");
    sizes.insert(s.bytes);
  }
  if (sizes.size() < 2) throw PlanError("fit_link: expected samples of at least two message sizes");
  {  // some kind's time must grow from its smallest message to its largest
    std::map<std::string, std::pair<const LinkSample*, const LinkSample*>> span;
    for (const LinkSample& s : samples) {
      auto& [lo, hi] = span.try_emplace(s.kind, &s, &s).first->second;
      if (s.bytes < lo->bytes) lo = &s;
      if (s.bytes > hi->bytes) hi = &s;
    }
    bool grows = false;
    for (const auto& [kind, lh] : span) grows = grows || (lh.second->bytes > lh.first->bytes && lh.second->seconds > lh.first->seconds);
    if (!grows) throw PlanError("fit_link: the timings do not grow with the message size; no bandwidth fits them");
  }
  // t ~ u * volume + l * steps + c * calls, u = 1 / bandwidth; weights 1 / t^2. A fixed latency moves
  // to the left-hand side. Every subset of (l, c) left free is solved and the best fit with no negative
  // figure kept: the constrained optimum is one of them.
  const bool fixed = latency_us >= 0;
  std::vector<std::array<double, 3>> cols;
  std::vector<double> t, w;
  for (const LinkSample& s : samples) {
    const RingTerms r = ring_terms(s);
    cols.push_back({r.volume_bytes, r.steps, r.calls});
    t.push_back(s.seconds - (fixed ? r.steps * latency_us * 1e-6 : 0.0));
    w.push_back(1.0 / (s.seconds * s.seconds));
  }
  std::array<double, 3> best{0, 0, 0};
  double best_sse = std::numeric_limits<double>::infinity();
  for (int mask = 0; mask < 4; ++mask) {
    const bool l_free = (mask & 1) && !fixed, c_free = (mask & 2) != 0;
    if ((mask & 1) && fixed) continue;
    std::array<double, 3> x{};
    if (!solve(cols, t, w, {true, l_free, c_free}, x) || x[0] <= 0 || x[1] < 0 || x[2] < 0) continue;
    double sse = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      const double e = x[0] * cols[i][0] + x[1] * cols[i][1] + x[2] * cols[i][2] - t[i];
      sse += w[i] * e * e;
    }
    if (sse < best_sse) best_sse = sse, best = x;
  }
  if (!(best[0] > 0))
    throw PlanError("fit_link: the timings do not grow with the message size; no bandwidth fits them");
  LinkFit f;
  f.bandwidth_gbs = 1.0 / best[0] / 1e9;
  f.latency_us = fixed ? latency_us : best[1] * 1e6;
  f.collective_us = best[2] * 1e6;
  std::vector<double> errs;
  for (const LinkSample& s : samples) errs.push_back(std::abs(f.model_seconds(s) - s.seconds) / s.seconds);
  std::sort(errs.begin(), errs.end());
  f.median_rel_error = errs.size() % 2 ? errs[errs.size() / 2] : (errs[errs.size() / 2 - 1] + errs[errs.size() / 2]) / 2;
  f.worst_rel_error = errs.back();
  return f;
}

BusyLink busy_link(const LinkFit& fit, double bytes, double all_reduce_us, double all_gather_us) {
  const double bw = fit.bandwidth_gbs * 1e9;
  const double ar = all_reduce_us - ring_terms({"all_reduce", 2, bytes, 0}).volume_bytes / bw * 1e6;
  const double ag = all_gather_us - ring_terms({"all_gather", 2, bytes, 0}).volume_bytes / bw * 1e6;
  BusyLink b;
  b.step_us = std::max(0.0, ar - ag);
  b.collective_us = std::max(0.0, ag - b.step_us);
  return b;
}

double busy_bandwidth_gbs(double small_bytes, double small_us, double large_bytes, double large_us) {
  const double extra_bytes = ring_terms({"all_reduce", 2, large_bytes, 0}).volume_bytes -
                             ring_terms({"all_reduce", 2, small_bytes, 0}).volume_bytes;
  const double extra_us = large_us - small_us;
  if (!(extra_bytes > 0) || !(extra_us > 0)) return 0;
  return extra_bytes / (extra_us * 1e-6) / 1e9;
}

}  // namespace trident::plan
