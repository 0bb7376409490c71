// Two real nodes on one machine (network namespaces joined by a veth pair):
// training across the link matches the single-node run bit for bit, the
// rendezvous waits for a late node 0 and fails within --rdzv-timeout (naming
// node, address and port) for a wrong address or port, a mismatched --nnodes
// or a node that never comes, and ranks started the way `srun` starts them
// (SLURM_* variables, no launcher) train too. Runs the built `trident`.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "multinode_util.h"
#include "run_helpers.h"

using namespace trident::testing;

// tp2 x pp2 x dp2 over 2 nodes x 4 ranks, placed so that every pipeline and
// every data-parallel group spans the link (tensor-parallel groups stay on a
// node, as on a real cluster): node 0 runs ranks 0,1 (stage 0, replica 0) and
// 6,7 (stage 1, replica 1); node 1 runs 2,3 and 4,5. Node 1 starts first.
TEST(TwoNodes, TrainsLikeOneNodeAcrossTheLink) {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  const std::vector<std::string> sets{"parallel.tp=2", "parallel.pp=2", "training.steps=4", "parallel.timeout_s=60"};
  Proc ref(launch_cmd({"--nproc-per-node", "8", "--master-port", "0"}, train_cmd(dir.path / "ref", sets)),
           dir.path / "ref.log");
  ASSERT_TRUE(ref.wait_until(Clock::now() + std::chrono::seconds(240))) << "single-node run hangs";
  ASSERT_EQ(ref.exit_code(), 0) << ref.log();

  const auto node = [&](int n, const std::string& ranks) {
    return net.in(n, launch_cmd({"--nnodes", "2", "--node-rank", std::to_string(n), "--nproc-per-node", "4",
                                 "--ranks", ranks, "--master-addr", TwoNodes::kAddr[0], "--master-port", "29500"},
                                train_cmd(dir.path / "two", sets)));
  };
  Proc node1(node(1, "2,3,4,5"), dir.path / "node1.log");
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_FALSE(node1.poll()) << "node 1 gave up before node 0 started:\n" << node1.log();
  Proc node0(node(0, "0,1,6,7"), dir.path / "node0.log");
  const auto deadline = Clock::now() + std::chrono::seconds(240);
  ASSERT_TRUE(node0.wait_until(deadline) && node1.wait_until(deadline)) << "two-node run hangs";
  const std::string log0 = node0.log(), log1 = node1.log();
  std::cout << "--- node 0 ---\n" << log0 << "--- node 1 ---\n" << log1;
  ASSERT_EQ(node0.exit_code(), 0) << log0;
  ASSERT_EQ(node1.exit_code(), 0) << log1;
  // Rank 0's rendezvous line shows where every rank listens: node 1's ranks
  // on node 1's own address.
  EXPECT_NE(log0.find("node 0 at 10.77.0.1: rank(s) 0-1, 6-7"), std::string::npos) << log0;
  EXPECT_NE(log0.find("node 1 at 10.77.0.2: rank(s) 2-5"), std::string::npos) << log0;
  expect_identical(read_metrics((dir.path / "ref/metrics.jsonl").string()),
                   read_metrics((dir.path / "two/metrics.jsonl").string()), 4);
  EXPECT_TRUE(net.empty_within(0, 2.0)) << net.pids(0);
  EXPECT_TRUE(net.empty_within(1, 2.0)) << net.pids(1);
}

// `srun` starts every task itself with SLURM_PROCID/NTASKS/LOCALID/NODEID;
// the job script exports only MASTER_ADDR. pp=2 with one rank per node.
TEST(TwoNodes, SlurmVariablesWithoutLauncher) {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  const std::vector<std::string> sets{"parallel.pp=2", "training.steps=3", "parallel.timeout_s=30"};
  Proc ref(launch_cmd({"--nproc-per-node", "2", "--master-port", "0"}, train_cmd(dir.path / "ref", sets)),
           dir.path / "ref.log");
  ASSERT_TRUE(ref.wait_until(Clock::now() + std::chrono::seconds(120))) << "single-node run hangs";
  ASSERT_EQ(ref.exit_code(), 0) << ref.log();
  std::vector<std::unique_ptr<Proc>> tasks;
  for (int n : {1, 0}) {  // node 1's task first: it must wait for node 0's store
    std::vector<std::string> cmd{"env", "-u", "RANK", "-u", "WORLD_SIZE", "-u", "LOCAL_RANK", "-u", "MASTER_PORT",
                                 "-u", "OMPI_COMM_WORLD_RANK", "-u", "OMPI_COMM_WORLD_SIZE", "-u", "SLURM_NNODES",
                                 "OMP_NUM_THREADS=1", "SLURM_PROCID=" + std::to_string(n), "SLURM_NTASKS=2",
                                 "SLURM_LOCALID=0", "SLURM_NODEID=" + std::to_string(n),
                                 std::string("MASTER_ADDR=") + TwoNodes::kAddr[0]};
    for (const auto& a : train_cmd(dir.path / "slurm", sets)) cmd.push_back(a);
    tasks.push_back(std::make_unique<Proc>(net.in(n, cmd), dir.path / ("task" + std::to_string(n) + ".log")));
    if (n == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  for (auto& t : tasks) ASSERT_TRUE(t->wait_until(deadline)) << "srun-style task hangs:\n" << t->log();
  const std::string log0 = tasks[1]->log();
  std::cout << "--- task 0 (node 0) ---\n" << log0 << "--- task 1 (node 1) ---\n" << tasks[0]->log();
  ASSERT_EQ(tasks[1]->exit_code(), 0) << log0;
  ASSERT_EQ(tasks[0]->exit_code(), 0) << tasks[0]->log();
  EXPECT_NE(log0.find("node 1 at 10.77.0.2: rank(s) 1"), std::string::npos) << log0;
  expect_identical(read_metrics((dir.path / "ref/metrics.jsonl").string()),
                   read_metrics((dir.path / "slurm/metrics.jsonl").string()), 3);
  EXPECT_TRUE(net.empty_within(0, 2.0)) << net.pids(0);
  EXPECT_TRUE(net.empty_within(1, 2.0)) << net.pids(1);
}

// Debian maps a host's own name to 127.0.1.1 in /etc/hosts. When node 0's
// --master-addr is such a name, its ranks must still listen on an address
// node 1 can reach (not loopback), or the first cross-node connection fails.
TEST(TwoNodes, MasterHostNameMappedToLoopbackOnNode0) {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  net.set_hosts(0, "127.0.0.1 localhost\n127.0.1.1 trident-node0\n");
  net.set_hosts(1, std::string("127.0.0.1 localhost\n") + TwoNodes::kAddr[0] + " trident-node0\n");
  const std::vector<std::string> sets{"parallel.pp=2", "training.steps=3", "parallel.timeout_s=30"};
  std::unique_ptr<Proc> node[2];
  for (int n : {0, 1})
    node[n] = std::make_unique<Proc>(
        net.in(n, launch_cmd({"--nnodes", "2", "--node-rank", std::to_string(n), "--nproc-per-node", "1",
                              "--master-addr", "trident-node0", "--rdzv-timeout", "60"},
                             train_cmd(dir.path / "run", sets))),
        dir.path / ("node" + std::to_string(n) + ".log"));
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  for (auto& p : node) ASSERT_TRUE(p->wait_until(deadline)) << "run hangs:\n" << p->log();
  const std::string log0 = node[0]->log();
  std::cout << "--- node 0 ---\n" << log0 << "--- node 1 ---\n" << node[1]->log();
  EXPECT_EQ(node[0]->exit_code(), 0) << log0;
  EXPECT_EQ(node[1]->exit_code(), 0) << node[1]->log();
  EXPECT_NE(log0.find("node 0 at 10.77.0.1: rank(s) 0; node 1 at 10.77.0.2: rank(s) 1"), std::string::npos) << log0;
}
