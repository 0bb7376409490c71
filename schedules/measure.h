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
// processes of one host): over receives whose rank was already idle when the
// matching send was posted, the time from that send to the data being there.
// `s` is the schedule (with communication) the timeline ran. 0 when no such receive.
double measured_latency(const Schedule& s, const Timeline& shared_clock);

// Chrome trace ("traceEvents"), one process per rank (pid = global rank),
// compute actions, receive waits and phases as "X" events in microseconds.
std::string render_chrome_ranks(const std::vector<RankRecording>& ranks, const std::string& title);

}  // namespace trident::sched
