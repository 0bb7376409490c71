// Multi-node launches that go wrong end within --rdzv-timeout (+ 10 s for
// start-up and stopping) on every node, with a message naming the node, the
// address and the port, and leave no process behind. One rank per node.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include "multinode_util.h"

using namespace trident::testing;

namespace {

constexpr int kRdzvSeconds = 3;

// `trident launch` of one rank on `node` with the given launcher arguments
// (after --nproc-per-node 1 --node-rank N --rdzv-timeout 3).
std::unique_ptr<Proc> start_node(const TwoNodes& net, const TempDir& dir, int node,
                                 const std::vector<std::string>& args, const std::vector<std::string>& sets) {
  std::vector<std::string> launch{"--nproc-per-node", "1", "--node-rank", std::to_string(node), "--rdzv-timeout",
                                  std::to_string(kRdzvSeconds)};
  launch.insert(launch.end(), args.begin(), args.end());
  return std::make_unique<Proc>(net.in(node, launch_cmd(launch, train_cmd(dir.path / "run", sets))),
                                dir.path / ("node" + std::to_string(node) + ".log"));
}

// Waits for every launcher and checks that each failed within the rendezvous
// timeout + 10 s of its rank starting to rendezvous (its "joins the
// rendezvous" line; start-up before it depends on the machine's load, not on
// the rendezvous). Returns their logs.
std::vector<std::string> expect_all_fail_in_time(std::vector<std::unique_ptr<Proc>>& nodes, const TwoNodes& net) {
  const double bound = kRdzvSeconds + 10;
  std::vector<std::optional<Clock::time_point>> joining(nodes.size());
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  for (bool all_done = false; !all_done && Clock::now() < deadline;) {
    all_done = true;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!joining[i] && nodes[i]->log().find("joins the rendezvous at") != std::string::npos)
        joining[i] = Clock::now();
      all_done = nodes[i]->poll() && all_done;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<std::string> logs;
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto& p = nodes[i];
    logs.push_back(p->log());
    const bool ended = p->done();
    const double after_join =
        ended && joining[i] ? std::chrono::duration<double>(p->ended() - *joining[i]).count() : -1;
    std::cout << "--- launcher " << i << ": "
              << (ended ? "exited " + std::to_string(p->seconds()) + " s after its start, " +
                              std::to_string(after_join) + " s after its rank began the rendezvous"
                        : std::string("still running"))
              << " ---\n"
              << logs.back();
    EXPECT_TRUE(ended) << "a launcher hangs";
    if (!ended) continue;
    EXPECT_NE(p->exit_code(), 0) << logs.back();
    EXPECT_TRUE(joining[i].has_value()) << "no rank began the rendezvous:\n" << logs.back();
    if (joining[i]) {
      EXPECT_LT(after_join, bound) << logs.back();
    }
  }
  EXPECT_TRUE(net.empty_within(0, 2.0)) << net.pids(0);
  EXPECT_TRUE(net.empty_within(1, 2.0)) << net.pids(1);
  return logs;
}

const std::vector<std::string> kPp2{"parallel.pp=2", "training.steps=3"};

}  // namespace

TEST(Rendezvous, WrongMasterAddr) {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  std::vector<std::unique_ptr<Proc>> nodes;
  nodes.push_back(start_node(net, dir, 0, {"--nnodes", "2", "--master-addr", TwoNodes::kAddr[0]}, kPp2));
  nodes.push_back(start_node(net, dir, 1, {"--nnodes", "2", "--master-addr", "10.77.0.3"}, kPp2));
  const auto logs = expect_all_fail_in_time(nodes, net);
  EXPECT_NE(logs[0].find("rank(s) 1 of 2 never joined the rendezvous at 10.77.0.1:29500"), std::string::npos);
  EXPECT_NE(logs[1].find("rank 1 on node 1 could not reach the rendezvous store at 10.77.0.3:29500"),
            std::string::npos);
  EXPECT_NE(logs[1].find("trident launch: rank 1 on node 1 (pid "), std::string::npos);
}

// Node 0 as it should be, node 1 with --master-port `port`: both fail in
// time, node 0 naming the rank that never joined. Returns node 1's log.
std::string node1_with_master_port(const std::string& port) {
  TwoNodes net;
  if (!net.skip_reason().empty()) return "skipped: " + net.skip_reason();
  if (!net.error().empty()) {
    ADD_FAILURE() << net.error();
    return "";
  }
  TempDir dir;
  std::vector<std::unique_ptr<Proc>> nodes;
  nodes.push_back(start_node(net, dir, 0, {"--nnodes", "2", "--master-addr", TwoNodes::kAddr[0]}, kPp2));
  nodes.push_back(start_node(
      net, dir, 1, {"--nnodes", "2", "--master-addr", TwoNodes::kAddr[0], "--master-port", port}, kPp2));
  const auto logs = expect_all_fail_in_time(nodes, net);
  EXPECT_NE(logs[0].find("rank(s) 1 of 2 never joined the rendezvous at 10.77.0.1:29500"), std::string::npos);
  return logs[1];
}

TEST(Rendezvous, WrongPort) {
  const std::string log = node1_with_master_port("29510");
  if (log.rfind("skipped: ", 0) == 0) GTEST_SKIP() << log;
  EXPECT_NE(log.find("rank 1 on node 1 could not reach the rendezvous store at 10.77.0.1:29510"), std::string::npos);
}

// The wrong port is the one node 0's launcher listens on for the other
// launchers (--master-port + 1): the rank finds a server there that is not the
// store, and says so at once instead of waiting for rank 0.
TEST(Rendezvous, WrongPortIsNodeZerosLauncherChannel) {
  const std::string log = node1_with_master_port("29501");
  if (log.rfind("skipped: ", 0) == 0) GTEST_SKIP() << log;
  EXPECT_NE(log.find("rank 1 on node 1 reached 10.77.0.1:29501, but what listens there is not the rendezvous store"),
            std::string::npos);
}

// Node 1 believes in 3 nodes: WORLD_SIZE 3 against rank 0's 2 (pp = 1, so
// both world sizes make a valid layout and the rendezvous must catch it).
TEST(Rendezvous, MismatchedNnodes) {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  const std::vector<std::string> sets{"training.global_batch_size=12", "training.steps=3"};
  std::vector<std::unique_ptr<Proc>> nodes;
  nodes.push_back(start_node(net, dir, 0, {"--nnodes", "2", "--master-addr", TwoNodes::kAddr[0]}, sets));
  nodes.push_back(start_node(net, dir, 1, {"--nnodes", "3", "--master-addr", TwoNodes::kAddr[0]}, sets));
  const auto logs = expect_all_fail_in_time(nodes, net);
  const std::string what =
      "rank 1 on node 1 has WORLD_SIZE 3 but rank 0 at 10.77.0.1:29500 has 2: --nnodes or --nproc-per-node differ";
  EXPECT_NE(logs[0].find(what), std::string::npos);
  EXPECT_NE(logs[1].find(what), std::string::npos);
  // Bad input on both nodes (NOTE [exit statuses]), whichever hears of it first.
  for (const auto& node : nodes) EXPECT_EQ(node->exit_code(), 2);
}

TEST(Rendezvous, NodeThatNeverArrives) {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  std::vector<std::unique_ptr<Proc>> nodes;
  nodes.push_back(start_node(net, dir, 0, {"--nnodes", "2", "--master-addr", TwoNodes::kAddr[0]}, kPp2));
  const auto logs = expect_all_fail_in_time(nodes, net);
  EXPECT_NE(logs[0].find("rank(s) 1 of 2 never joined the rendezvous at 10.77.0.1:29500 within 3 s (node(s) 0 did"),
            std::string::npos);
  EXPECT_EQ(nodes[0]->exit_code(), 1) << "a node that never came is the run's failure, not bad input";
}
