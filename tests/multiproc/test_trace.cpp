// logging.trace on a tp2 x pp2 x dp2 run (8 ranks, interleaved v = 2): the
// trace.json rank 0 writes holds every rank; each rank's compute spans carry
// their list index, appear in the order of that rank's schedule and never
// overlap; gradient sync and the optimizer follow the last compute. The
// expected order comes from the same generator the run used (called here,
// in this process): what this proves is that the run executed, and the trace
// recorded, the generator's list in order on every rank of the 3D layout. It
// does not check the generator itself (test_schedule_generators.cpp and the
// validator do).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "parallel/layout.h"
#include "schedules/generators.h"
#include "core/json.h"
#include "tests/run_helpers.h"

namespace trident {
namespace {

struct Event {
  std::string name, cat;
  double ts = 0, dur = 0;
  int index = -1;
};

TEST(Trace, EveryRankInScheduleOrderWithoutOverlap) {
  const std::string dir = testing::temp_dir() + "trident_trace";
  const auto r = testing::run_command(
      testing::bin("trident") + " launch --nproc-per-node 8 --master-port 0 -- " + testing::bin("trident") + " train --config " +
      testing::src("configs/gpt-tiny.toml") +
      " --set parallel.tp=2 --set parallel.pp=2 --set parallel.dp=2 --set schedule.kind=interleaved"
      " --set schedule.chunks=2 --set training.steps=2 --set logging.trace=true --set logging.trace_step=2"
      " --set logging.dir=" + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream f(dir + "/trace.json");
  ASSERT_TRUE(f) << "no trace.json";
  std::stringstream text;
  text << f.rdbuf();
  const json::Value doc = json::parse(text.str(), dir + "/trace.json");
  std::map<int, std::vector<Event>> events;
  std::set<int> named;
  for (const json::Value& e : json::as_array(json::at(doc, "traceEvents", "trace.json"), "traceEvents")) {
    const std::string ph = json::as_string(json::at(e, "ph", "an event"), "ph");
    const std::string name = json::as_string(json::at(e, "name", "an event"), "name");
    const int pid = static_cast<int>(json::as_int(json::at(e, "pid", "an event"), "pid"));
    if (ph == "M" && name == "process_name") named.insert(pid);
    if (ph != "X") continue;
    const json::Value* args = json::find(e, "args");
    const json::Value* index = args ? json::find(*args, "index") : nullptr;
    events[pid].push_back({name, json::as_string(json::at(e, "cat", "an event"), "cat"),
                           json::as_double(json::at(e, "ts", "an event"), "ts"),
                           json::as_double(json::at(e, "dur", "an event"), "dur"),
                           index ? static_cast<int>(json::as_int(*index, "index")) : -1});
  }
  const Layout layout = Layout::make(8, 2, 2, 2);
  const sched::Schedule s = sched::generate("interleaved", 2, 4, 2);  // m = 16 / (2 per micro-batch x dp 2)
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_TRUE(named.count(rank)) << "rank " << rank << " has no process in the trace";
    const auto& list = s.ranks.at(static_cast<size_t>(layout.coords(rank).pp));
    std::vector<std::string> expected, got;
    for (const auto& a : list)
      if (sched::is_compute(a.kind)) expected.push_back(sched::to_token(a));
    double last_end = -1, compute_end = 0;
    std::map<std::string, double> phase_start;
    for (const Event& e : events[rank]) {
      if (e.cat == "phase") {
        phase_start[e.name] = e.ts;
        continue;
      }
      if (e.cat != "compute") continue;
      got.push_back(e.name);
      ASSERT_GE(e.index, 0) << e.name;
      EXPECT_EQ(sched::to_token(list.at(static_cast<size_t>(e.index))), e.name) << "rank " << rank;
      EXPECT_GE(e.ts + 1e-3, last_end) << "rank " << rank << ": " << e.name << " overlaps the compute before it";
      last_end = e.ts + e.dur;
      compute_end = std::max(compute_end, last_end);
    }
    EXPECT_EQ(got, expected) << "rank " << rank;
    ASSERT_TRUE(phase_start.count("grad-sync") && phase_start.count("optimizer")) << "rank " << rank;
    EXPECT_GE(phase_start["grad-sync"] + 1e-3, compute_end) << "rank " << rank;
    EXPECT_GE(phase_start["optimizer"], phase_start["grad-sync"]) << "rank " << rank;
  }
  std::ifstream svg(dir + "/timeline.svg");
  EXPECT_TRUE(svg) << "no timeline.svg";
}

}  // namespace
}  // namespace trident
