#include "planner/calibration.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace trident::plan {

RingTerms ring_terms(const LinkSample& s) {
  const double n = s.ranks;
  // Patarasuk and Yuan 2009: a ring all-reduce is a reduce-scatter and an all-gather, each n-1 steps
  // moving 1/n of the message per link; a point-to-point message is one step of the whole.
  if (s.kind == "all_reduce") return {2 * (n - 1) / n * s.bytes, 2 * (n - 1)};
  if (s.kind == "all_gather") return {(n - 1) / n * s.bytes, n - 1};
  if (s.kind == "p2p") return {s.bytes, 1};
  throw PlanError("link sample kind '" + s.kind + "': expected all_reduce, all_gather or p2p");
}

LinkFit fit_link(const std::vector<LinkSample>& samples) {
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
  // t ~ u * volume + l * steps, u = 1 / bandwidth; weights 1 / t^2.
  double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
  for (const LinkSample& s : samples) {
    const RingTerms r = ring_terms(s);
    const double w = 1.0 / (s.seconds * s.seconds);
    sxx += w * r.volume_bytes * r.volume_bytes, sxy += w * r.volume_bytes * r.steps, syy += w * r.steps * r.steps;
    sxt += w * r.volume_bytes * s.seconds, syt += w * r.steps * s.seconds;
  }
  const double det = sxx * syy - sxy * sxy;
  double u = det != 0 ? (sxt * syy - syt * sxy) / det : 0, l = det != 0 ? (sxx * syt - sxy * sxt) / det : 0;
  if (l < 0 || det == 0) l = 0, u = sxt / sxx;  // latency held at 0
  if (!(u > 0))
    throw PlanError("fit_link: the timings do not grow with the message size; no bandwidth fits them");
  LinkFit f;
  f.bandwidth_gbs = 1.0 / u / 1e9;
  f.latency_us = l * 1e6;
  std::vector<double> errs;
  for (const LinkSample& s : samples) {
    const RingTerms r = ring_terms(s);
    errs.push_back(std::abs(u * r.volume_bytes + l * r.steps - s.seconds) / s.seconds);
  }
  std::sort(errs.begin(), errs.end());
  f.median_rel_error = errs.size() % 2 ? errs[errs.size() / 2] : (errs[errs.size() / 2 - 1] + errs[errs.size() / 2]) / 2;
  f.worst_rel_error = errs.back();
  return f;
}

}  // namespace trident::plan
