// From measured transfers to a cluster file's link figures (pure): the
// bandwidth and latency that make the step model's ring formulas (ring
// all-reduce, all-gather, one point-to-point message; planner/step.cpp)
// reproduce the timings `trident plan calibrate` measured.
#pragma once

#include <string>
#include <vector>

#include "planner/cluster.h"

namespace trident::plan {

// One measured operation: `kind` over `ranks` ranks on a message of `bytes`
// (all-reduce and point-to-point: the tensor; all-gather: the gathered whole).
struct LinkSample {
  std::string kind;  // "all_reduce" | "all_gather" | "p2p"
  int ranks = 2;
  double bytes = 0;
  double seconds = 0;
};

// The ring model's time of a sample as volume / bandwidth + steps x latency
// + calls x collective time: the bytes each link carries, the number of
// latency-bound steps, and 1 for a collective call (0 for a point-to-point
// message), whose backend has work of its own beyond its ring steps.
struct RingTerms {
  double volume_bytes = 0;
  double steps = 0;
  double calls = 0;
};
RingTerms ring_terms(const LinkSample& s);

struct LinkFit {
  double bandwidth_gbs = 0;  // GB/s, one direction
  double latency_us = 0;     // per message
  double collective_us = 0;  // per collective call
  double median_rel_error = 0, worst_rel_error = 0;  // of the fitted model over the samples
  double model_seconds(const LinkSample& s) const;   // the fitted model's time of s
};

// Least squares of the relative error (each sample weighs 1/seconds^2, so a
// 1 KiB message counts as much as a 16 MiB one) over bandwidth, latency and
// the per-call collective time, each time held >= 0. With `latency_us` >= 0
// the latency is that figure (measured some other way) and only bandwidth
// and collective time are fitted. Throws PlanError naming the bad sample
// (unknown kind, ranks < 2, bytes or seconds <= 0) or when fewer than two
// message sizes were given.
LinkFit fit_link(const std::vector<LinkSample>& samples, double latency_us = -1);

// NOTE [busy link] in measure/calibrate.cpp: an all-reduce and an all-gather of `bytes` between
// 2 ranks that compute between calls took `all_reduce_us` and `all_gather_us`. Their volume at the
// fitted bandwidth taken off, the all-reduce is 2 ring steps and a call, the all-gather 1 step and a
// call: the difference is a busy ring step's latency, the rest a call's time (each held >= 0).
struct BusyLink {
  double step_us = 0, collective_us = 0;
};
BusyLink busy_link(const LinkFit& fit, double bytes, double all_reduce_us, double all_gather_us);

// NOTE [busy link]: the bandwidth between 2 ranks that compute between calls, from their
// all-reduces of `small_bytes` and `large_bytes` (taking `small_us` and `large_us`): the ring volume
// the larger moves beyond the smaller over the time it took beyond it. 0 when the larger took no
// longer (no bandwidth fits; the caller keeps the back-to-back fit).
double busy_bandwidth_gbs(double small_bytes, double small_us, double large_bytes, double large_us);

}  // namespace trident::plan
