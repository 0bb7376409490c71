// Measured pipelines: turning the executor's per-rank recordings into the
// simulator's Timeline (so stats() and the renderers apply unchanged), the
// per-kind costs a run measured (so the simulator can predict that run), a
// text form to ship a rank's recording to rank 0, and a Chrome trace of many
// ranks with the trainer's phases (gradient sync, optimizer). Pure C++.
#pragma once

#include <string>
#include <vector>

#include "schedules/simulate.h"

namespace trident::sched {

// A named span outside the action list (grad-sync, optimizer), in the same
// units as the timeline it belongs to.
struct Phase {
  std::string name;
  double start = 0, end = 0;
};

// One rank's recording of one step: actions with absolute times in
// microseconds (any clock), the phases, and `origin`, the step's start on
// that rank in the same clock.
struct RankRecording {
  int rank = 0;  // global rank
  double origin_us = 0;
  std::vector<TimedAction> actions;
  std::vector<Phase> phases;
};

// Text form, one item per line: "origin US", "a TOKEN START END", "p NAME START END".
std::string to_text(const RankRecording& r);
RankRecording recording_from_text(const std::string& text, int rank);  // throws ScheduleError

// The Timeline of one pipeline: ranks[i] is pipeline rank i's recording;
// every rank's times become milliseconds after its own origin (us_per_unit = 1000).
Timeline to_timeline(const std::vector<RankRecording>& pipeline, int microbatches, int chunks);

// Mean duration of each compute kind over the recordings, per FULL stage
// (a chunk's mean times v), in the timeline's units. B is measured B, or I + W
// when the schedule splits it; weight is W (0 when the run had no W).
struct MeasuredCosts {
  Costs costs;
  double f = 0, b = 0, i = 0, w = 0;  // per chunk, as measured (0 when absent)
  int samples = 0;
};
MeasuredCosts measured_costs(const std::vector<Timeline>& steps);

// Mean link latency of a timeline whose ranks share one clock (threads, or
// processes of one host), over the receives NOTE [measured link latency] counts.
// `s` is the schedule (with communication) the timeline ran. 0 when no such receive.
double measured_latency(const Schedule& s, const Timeline& shared_clock);

// Sums of measured compute durations of one virtual stage, per kind F, B, I, W.
struct KindSums {
  double sum[4] = {0, 0, 0, 0};
  double count[4] = {0, 0, 0, 0};
  void add(ActionKind k, double duration);  // ignores communication
};

// The simulator's costs for a run from its per-virtual-stage sums (index =
// virtual stage): Costs::stage_costs = each stage's mean F, B (or I + W when
// the run split it) and W, and the given link latency. A stage with no
// samples of a kind gets the mean of the stages that have them.
Costs costs_from_stage_sums(const std::vector<KindSums>& stages, std::vector<double> latency);

// NOTE [measured link latency] What the simulator calls latency: from the last operation of a
// receive's group becoming ready (its send posted; a send of the group's, its receive posted) to
// the receive's data being there. The executor waits for whole groups at a receive's consumer
// (its F, or its B or I), so a receive's end is an arrival only when its rank sat waiting at that
// consumer already when the group became ready: that choice does not depend on how long the
// message took (choosing receives that waited long would), and leaves out those that arrived
// during a compute run between post and consumer (interleaved posts receives computes ahead:
// counted, they would read as far longer latencies). Ranks may each use their own clock: each
// neighbouring pair's offset is half the difference of its two directions' mean d (L + o and
// L - o), the timelines are put on rank 0's clock, and a link's latency is still the mean of its
// two directions' means. A direction with no such receive (a balanced pipeline, a few steps,
// under load) takes the mean of every receive its rank waited for at the consumer, the larger
// figure; a link with a direction never waited for is left out.
struct LinkLatency {
  std::vector<double> per_boundary;  // p*v-1 values, boundary s -> s+1; links left out get `mean`, local hand-overs 0
  double mean = 0;                   // over the links measured; 0 when none
  int links = 0;                     // links measured (both directions)
  int samples = 0;                   // receives used
};
// `s` is the schedule with communication the timelines ran; each timeline one
// step, every rank's times in its own clock, in one unit (min_wait too).
LinkLatency measured_link_latency(const Schedule& s, const std::vector<Timeline>& steps, double min_wait);

// Chrome trace ("traceEvents"), one process per rank (pid = global rank),
// compute actions, receive waits and phases as "X" events in microseconds.
std::string render_chrome_ranks(const std::vector<RankRecording>& ranks, const std::string& title);

}  // namespace trident::sched
