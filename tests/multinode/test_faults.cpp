// The fault matrix on two namespace nodes: pp=2 x dp=2 with node 0 running
// stage 0 (ranks 0, 1) and node 1 stage 1 (ranks 2, 3), parallel.timeout_s = 3.
// For each fault (rank 2 SIGKILLed, stalled by SIGSTOP or exiting 0 during
// step 3; the link cut; node 0's launcher SIGKILLed) every process is gone
// within timeout_s + 10 s of the fault, both launchers exit non-zero, the
// launcher that saw it names rank, node and what happened, both launchers
// name the job's first failure where their channel still connects them
// (NOTE [job channel]), and nothing is left in the namespaces: no process, no
// listening socket (a stale store, a launcher's channel).
// Each test prints "measured: ..." lines; launch/README.md tabulates them.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "multinode_util.h"

using namespace trident::testing;

namespace {

constexpr double kTimeoutS = 3;
constexpr int kFaultStep = 2;  // fires once rank 0 has logged step 2: inside step 3

enum class Trigger { kInProcess, kCutLink, kKillNode0 };

struct FaultResult {
  std::string log[2];
  int exit_code[2] = {-1, -1};
  double fault_to_exit[2] = {-1, -1};  // seconds from the fault to each launcher's exit
};

// The launcher's closing "the job's first failure: ..." line starts with
// `head` and contains each of `parts`.
bool names_first_failure(const std::string& log, const std::string& head, const std::string& part1,
                         const std::string& part2 = "") {
  const std::string key = "trident launch: the job's first failure: ";
  const size_t at = log.find(key);
  if (at == std::string::npos) return false;
  const std::string line = log.substr(at + key.size(), log.find('\n', at) - at - key.size());
  const bool ok = line.rfind(head, 0) == 0 && line.find(part1) != std::string::npos &&
                  line.find(part2) != std::string::npos;
  if (!ok) std::cout << "first-failure line: " << line << "\n";
  return ok;
}

long count_lines(const fs::path& p) {
  const std::string text = slurp(p);
  return static_cast<long>(std::count(text.begin(), text.end(), '\n'));
}

// Runs both nodes until they end (or 150 s pass), injecting the fault.
void run_with_fault(const TwoNodes& net, const TempDir& dir, Trigger trigger, const std::string& fault,
                    FaultResult& result) {
  // Two layers (one per stage): a rank reaches its next collective within
  // milliseconds of the fault, so the measured time is the timeout's, not
  // the model's (the machine's cores are shared).
  const std::vector<std::string> sets{"parallel.pp=2", "model.layers=2", "training.steps=1000",
                                      "parallel.timeout_s=" + std::to_string(kTimeoutS)};
  std::vector<std::pair<std::string, std::string>> env;
  if (!fault.empty()) env.emplace_back("TRIDENT_FAULT", fault);
  std::unique_ptr<Proc> node[2];
  for (int n : {1, 0})
    node[n] = std::make_unique<Proc>(
        net.in(n, launch_cmd({"--nnodes", "2", "--node-rank", std::to_string(n), "--nproc-per-node", "2",
                              "--master-addr", TwoNodes::kAddr[0], "--rdzv-timeout", "60"},
                             train_cmd(dir.path / "run", sets))),
        dir.path / ("node" + std::to_string(n) + ".log"), env);
  const auto deadline = Clock::now() + std::chrono::seconds(150);
  std::optional<Clock::time_point> fault_at, first_error[2], verdict[2];
  auto both_done = [&] {
    const bool d0 = node[0]->poll(), d1 = node[1]->poll();  // both polled: each exit time is its own
    return d0 && d1;
  };
  while (Clock::now() < deadline && !both_done()) {
    // When a rank's error first shows (printed after unwinding, just before
    // it exits) and when its launcher reports the first failure, its own
    // rank's (after reaping it) or another node's: which part of the time to
    // exit is the collective timeout.
    for (int n : {0, 1}) {
      if (!fault_at || (first_error[n] && verdict[n])) continue;
      const std::string log = node[n]->log();
      if (!first_error[n] && log.find("trident train: error:") != std::string::npos) first_error[n] = Clock::now();
      if (!verdict[n] && (log.find("trident launch: rank") != std::string::npos ||
                          log.find("trident launch: node") != std::string::npos))
        verdict[n] = Clock::now();
    }
    if (!fault_at) {
      if (trigger == Trigger::kInProcess) {
        for (int n : {0, 1})
          if (node[n]->log().find("TRIDENT_FAULT: rank 2 injects") != std::string::npos) fault_at = Clock::now();
      } else if (count_lines(dir.path / "run/metrics.jsonl") >= kFaultStep) {
        fault_at = Clock::now();
        if (trigger == Trigger::kCutLink) {
          EXPECT_TRUE(net.cut_link());
        }
        if (trigger == Trigger::kKillNode0) ::kill(node[0]->pid(), SIGKILL);  // ranks go by PR_SET_PDEATHSIG
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int n : {0, 1}) {
    result.log[n] = node[n]->log();
    std::cout << "--- node " << n << " ---\n" << result.log[n];
  }
  ASSERT_TRUE(node[0]->done() && node[1]->done()) << "a launcher still runs 150 s after the start";
  ASSERT_TRUE(fault_at.has_value()) << "the fault never fired (training ended first?)";
  for (int n : {0, 1}) {
    result.exit_code[n] = node[n]->exit_code();
    result.fault_to_exit[n] = std::chrono::duration<double>(node[n]->ended() - *fault_at).count();
    std::cout << "measured: node " << n << " launcher exited " << result.exit_code[n] << " at fault + "
              << result.fault_to_exit[n] << " s";
    auto since_fault = [&](const std::optional<Clock::time_point>& t) {
      return t ? std::to_string(std::chrono::duration<double>(*t - *fault_at).count()) + " s" : std::string("-");
    };
    std::cout << " (first rank error at fault + " << since_fault(first_error[n]) << ", launcher's verdict at fault + "
              << since_fault(verdict[n]) << ")";
    std::cout << "\n";
    EXPECT_NE(result.exit_code[n], 0) << "node " << n;
    EXPECT_LE(result.fault_to_exit[n], kTimeoutS + 10) << "node " << n;
    EXPECT_TRUE(net.empty_within(n, 2.0)) << "processes left in node " << n << ": " << net.pids(n);
    EXPECT_EQ(net.listeners_within(n, 2.0), "") << "listening sockets left in node " << n;
  }
}

}  // namespace

TEST(Faults, RankKilledMidStep) {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  FaultResult r;
  run_with_fault(net, dir, Trigger::kInProcess, "rank=2,step=2,kind=kill", r);
  EXPECT_EQ(r.exit_code[1], 128 + 9);
  EXPECT_NE(r.log[1].find("trident launch: rank 2 on node 1 (pid "), std::string::npos);
  EXPECT_NE(r.log[1].find("was killed by signal 9 (SIGKILL)"), std::string::npos);
  // Node 0 hears of it from node 1's launcher, and both name it as the cause.
  EXPECT_NE(r.log[0].find("trident launch: node 1 reports: rank 2 on node 1 (pid "), std::string::npos);
  for (int n : {0, 1}) {
    EXPECT_TRUE(names_first_failure(r.log[n], "rank 2 on node 1 (pid ", "was killed by signal 9 (SIGKILL)")) << n;
    // Node 1 sent its ranks' last progress records: node 0's diagnosis knows where rank 2 was.
    EXPECT_NE(r.log[n].find("trident launch: diagnosis: "), std::string::npos) << n;
    EXPECT_NE(r.log[n].find("rank 2 died (was killed by signal 9 (SIGKILL)) at "), std::string::npos) << n;
  }
}

TEST(Faults, RankStallsInCollective) {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  FaultResult r;
  run_with_fault(net, dir, Trigger::kInProcess, "rank=2,step=2,kind=stall", r);
  EXPECT_NE(r.log[1].find("rank 2 on node 1 (pid "), std::string::npos);
  EXPECT_NE(r.log[1].find("was stopped by signal 19 (SIGSTOP)"), std::string::npos);
  // Its peers give up after the collective timeout and say so.
  EXPECT_NE((r.log[0] + r.log[1]).find("timed out"), std::string::npos);
  // Node 0 hears of the stop at once, and both verdicts name it.
  EXPECT_NE(r.log[0].find("trident launch: node 1 reports: rank 2 on node 1 (pid "), std::string::npos);
  for (int n : {0, 1})
    EXPECT_TRUE(names_first_failure(r.log[n], "", "rank 2", "SIGSTOP")) << n;
}

TEST(Faults, RankExitsZeroEarly) {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  FaultResult r;
  run_with_fault(net, dir, Trigger::kInProcess, "rank=2,step=2,kind=exit0", r);
  // Wherever the first failure was (node 1's rank 3, or node 0's ranks on a
  // reset connection), both verdicts name the early exit as what preceded it.
  for (int n : {0, 1})
    EXPECT_TRUE(names_first_failure(r.log[n], "", "rank 2", "exited with status 0")) << n;
}

TEST(Faults, LinkCut) {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  FaultResult r;
  run_with_fault(net, dir, Trigger::kCutLink, "", r);
  for (int n : {0, 1}) {
    EXPECT_NE(r.log[n].find("trident launch: rank "), std::string::npos) << "node " << n;
    EXPECT_NE(r.log[n].find(" on node " + std::to_string(n) + " (pid "), std::string::npos) << "node " << n;
    // The cut link also carries the launchers' channel: each says whom it did not hear from.
    EXPECT_TRUE(names_first_failure(r.log[n], "", "(no word from the launcher of node(s) " + std::to_string(1 - n) + ")"))
        << n;
  }
}

TEST(Faults, StoreHostKilled) {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  FaultResult r;
  run_with_fault(net, dir, Trigger::kKillNode0, "", r);
  EXPECT_EQ(r.exit_code[0], 128 + 9);  // our SIGKILL
  // Node 1's launcher sees node 0's launcher go and stops its ranks without
  // waiting for their connection errors.
  const std::string lost = std::string("node 0's launcher at ") + TwoNodes::kAddr[0] + ":29501 went away";
  EXPECT_NE(r.log[1].find("trident launch: " + lost), std::string::npos);
  EXPECT_TRUE(names_first_failure(r.log[1], lost, ""));
}
