// Restarts across two nodes (network namespaces, multinode_util.h), under
// torchrun and under `trident launch --max-restarts`. torchrun: one agent per node, one rank each (gpt-tiny as pp = 2, so the
// pipeline spans the link), rank 1 on node 1 SIGKILLed once step 7 is logged,
// --max-restarts 2, checkpoint.resume = true. Under the static rendezvous and
// under c10d's (whose agents restart a healthy node's workers without counting
// a restart, so the nodes' TORCHELASTIC_RESTART_COUNT differ), the job must
// finish with every loss, gradient norm and final tensor equal to the last bit
// to a single-node run that was never stopped.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <array>
#include <regex>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include "multinode_util.h"
#include "run_helpers.h"

using namespace trident::testing;

namespace {

const std::string kTorchrun = TRIDENT_SOURCE_DIR "/.venv/bin/torchrun";

std::vector<std::string> sets_for(const fs::path& ck) {
  return {"training.steps=12", "parallel.pp=2", "parallel.backend=nccl-rules", "checkpoint.interval=5",
          "checkpoint.resume=true", "checkpoint.dir=" + ck.string(), "logging.progress=false",
          "training.peak_tflops=1", "parallel.timeout_s=20"};
}

// Every tensor entry's index record (name, box, checksum) of a checkpoint's rank file,
// without the RNG blob (libtorch seeds it anew in each process: restart_util.h).
std::string entries_of(const fs::path& file) {
  const std::string text = slurp(file);
  const size_t from = text.find("\"entries\""), to = text.find("\"blobs\"");
  return from == std::string::npos || to == std::string::npos ? "" : text.substr(from, to - from);
}

// Both nodes exited 0; rank 0 resumed from step 5; every loss, gradient norm
// and final tensor of `dir`/run equals the uninterrupted `dir`/ref's; nothing
// is left running in either namespace.
void expect_resumed_like_the_reference(const TwoNodes& net, const fs::path& dir, std::array<int, 2> exit_codes,
                                       const std::string& log0, const std::string& log1) {
  ASSERT_EQ(exit_codes[0], 0) << log0 << "--- node 1 ---\n" << log1;
  ASSERT_EQ(exit_codes[1], 0) << log1 << "--- node 0 ---\n" << log0;
  EXPECT_NE(log0.find("checkpoint: resumed from " + (dir / "ck-run/step-00000005").string()), std::string::npos)
      << log0;
  expect_identical(read_metrics((dir / "ref/metrics.jsonl").string()), read_metrics((dir / "run/metrics.jsonl").string()),
                   12);
  for (const char* rank : {"rank-00000.json", "rank-00001.json"}) {
    const std::string a = entries_of(dir / "ck-ref/step-00000012" / rank);
    EXPECT_FALSE(a.empty()) << rank;
    EXPECT_EQ(a, entries_of(dir / "ck-run/step-00000012" / rank)) << rank;
  }
  EXPECT_TRUE(net.empty_within(0, 2.0)) << net.pids(0);
  EXPECT_TRUE(net.empty_within(1, 2.0)) << net.pids(1);
}

// A run on this node alone, outside the namespaces: the reference the restarted runs are compared with.
void train_on_one_node(const fs::path& dir, const std::string& name, int ranks, const std::vector<std::string>& sets) {
  Proc ref(launch_cmd({"--nproc-per-node", std::to_string(ranks), "--master-port", "0"}, train_cmd(dir / name, sets)),
           dir / (name + ".log"));
  ASSERT_TRUE(ref.wait_until(Clock::now() + std::chrono::seconds(120))) << "single-node run hangs";
  ASSERT_EQ(ref.exit_code(), 0) << ref.log();
}

void torchrun_restarts(const std::vector<std::string>& rdzv) {
  TwoNodes net;
  REQUIRE_NODES(net);
  ASSERT_EQ(::access(kTorchrun.c_str(), X_OK), 0) << kTorchrun << " is missing";
  TempDir dir;
  train_on_one_node(dir.path, "ref", 2, sets_for(dir.path / "ck-ref"));
  if (::testing::Test::HasFatalFailure()) return;

  auto node = [&](int n) {
    std::vector<std::string> argv{kTorchrun, "--nnodes", "2", "--nproc-per-node", "1", "--max-restarts", "2",
                                  "--monitor-interval", "0.1"};
    for (const auto& a : rdzv)
      argv.push_back(a == "NODE_RANK" ? std::to_string(n)
                     : a == "IS_HOST" ? (n == 0 ? "is_host=1" : "is_host=0")
                     : a == "LOCAL_ADDR" ? TwoNodes::kAddr[n]
                                         : a);
    argv.push_back("--no-python");
    for (const auto& a : train_cmd(dir.path / "run", sets_for(dir.path / "ck-run"))) argv.push_back(a);
    return net.in(n, argv);
  };
  const std::vector<std::pair<std::string, std::string>> env{{"TRIDENT_FAULT", "rank=1,step=7,kind=kill"},
                                                             {"OMP_NUM_THREADS", "1"}};
  Proc node0(node(0), dir.path / "node0.log", env);
  Proc node1(node(1), dir.path / "node1.log", env);
  const auto deadline = Clock::now() + std::chrono::seconds(200);
  const bool ended = node0.wait_until(deadline) && node1.wait_until(deadline);
  const std::string log0 = node0.log(), log1 = node1.log();
  ASSERT_TRUE(ended) << "torchrun across two nodes still runs after 200 s\n--- node 0 ---\n" << log0
                     << "--- node 1 ---\n" << log1;
  EXPECT_NE(log1.find("rank 1 injects kill after step 7"), std::string::npos) << log1;
  expect_resumed_like_the_reference(net, dir.path, {node0.exit_code(), node1.exit_code()}, log0, log1);
}

// `trident launch --max-restarts` across the same two nodes (NOTE [restarts
// across nodes] in launch/launcher.cpp): rank 1 on node 1 SIGKILLed once step
// 7 is logged; both launchers restart in step (attempt 1 on the ports + 2),
// resume from step 5 and end with the single-node run's losses and tensors.
void launch_restarts() {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  train_on_one_node(dir.path, "ref", 2, sets_for(dir.path / "ck-ref"));
  if (::testing::Test::HasFatalFailure()) return;
  auto node = [&](int n) {
    return net.in(n, launch_cmd({"--nnodes", "2", "--node-rank", std::to_string(n), "--nproc-per-node", "1",
                                 "--master-addr", TwoNodes::kAddr[0], "--master-port", "29500", "--max-restarts", "2",
                                 "--rdzv-timeout", "30"},
                                train_cmd(dir.path / "run", sets_for(dir.path / "ck-run"))));
  };
  const std::vector<std::pair<std::string, std::string>> env{{"TRIDENT_FAULT", "rank=1,step=7,kind=kill"}};
  Proc node0(node(0), dir.path / "node0.log", env);
  Proc node1(node(1), dir.path / "node1.log", env);
  const auto deadline = Clock::now() + std::chrono::seconds(200);
  const bool ended = node0.wait_until(deadline) && node1.wait_until(deadline);
  const std::string log0 = node0.log(), log1 = node1.log();
  ASSERT_TRUE(ended) << "trident launch across two nodes still runs after 200 s\n--- node 0 ---\n" << log0
                     << "--- node 1 ---\n" << log1;
  for (const std::string* log : {&log0, &log1}) {
    EXPECT_NE(log->find("trident launch: restarting the job (restart 1 of at most 2)"), std::string::npos) << *log;
    EXPECT_EQ(log->find("restart 2 of"), std::string::npos) << *log;
    EXPECT_NE(log->find("the job finished after 1 restart"), std::string::npos) << *log;
  }
  expect_resumed_like_the_reference(net, dir.path, {node0.exit_code(), node1.exit_code()}, log0, log1);
}

long count_lines(const fs::path& p) {
  const std::string text = fs::exists(p) ? slurp(p) : std::string();
  return static_cast<long>(std::count(text.begin(), text.end(), '\n'));
}

// The rank processes (`trident-torch train`) in node `n`'s namespace.
std::vector<pid_t> rank_pids(const TwoNodes& net, int n) {
  std::vector<pid_t> out;
  std::istringstream in(net.pids(n));
  for (long pid; in >> pid;) {
    std::string cmd = slurp("/proc/" + std::to_string(pid) + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find("trident-torch train") != std::string::npos) out.push_back(static_cast<pid_t>(pid));
  }
  return out;
}

// Slurm's --signal=USR1 reaches the tasks, here only node 1's rank: the ranks
// agree to save and stop (NOTE [preemption]), and neither launcher restarts
// the job, node 1's included, which learns it from its own rank's note.
void launch_preempted() {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  std::vector<std::string> sets = sets_for(dir.path / "ck");
  sets.push_back("training.steps=400");
  auto node = [&](int n) {
    return net.in(n, launch_cmd({"--nnodes", "2", "--node-rank", std::to_string(n), "--nproc-per-node", "1",
                                 "--master-addr", TwoNodes::kAddr[0], "--master-port", "29500", "--max-restarts", "2",
                                 "--rdzv-timeout", "20"},
                                train_cmd(dir.path / "run", sets)));
  };
  Proc node0(node(0), dir.path / "node0.log");
  Proc node1(node(1), dir.path / "node1.log");
  const auto started = Clock::now();
  while (count_lines(dir.path / "run/metrics.jsonl") < 3 && Clock::now() < started + std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::vector<pid_t> ranks = rank_pids(net, 1);
  ASSERT_EQ(ranks.size(), 1u) << net.pids(1);
  ::kill(ranks[0], SIGUSR1);
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  const bool ended = node0.wait_until(deadline) && node1.wait_until(deadline);
  const std::string log0 = node0.log(), log1 = node1.log();
  ASSERT_TRUE(ended) << "still running 120 s after the signal\n--- node 0 ---\n" << log0 << "--- node 1 ---\n" << log1;
  EXPECT_EQ(node0.exit_code(), 128 + SIGUSR1) << log0;
  EXPECT_EQ(node1.exit_code(), 128 + SIGUSR1) << log1;
  for (const std::string* log : {&log0, &log1}) {
    EXPECT_NE(log->find("trident launch: preempted by SIGUSR1, checkpoint at step "), std::string::npos) << *log;
    EXPECT_EQ(log->find("restarting"), std::string::npos) << "a preempted job is not restarted:\n" << *log;
  }
  EXPECT_TRUE(net.empty_within(0, 2.0)) << net.pids(0);
  EXPECT_TRUE(net.empty_within(1, 2.0)) << net.pids(1);
}

// --min-nodes (NOTE [shrinking] in launch/launcher.cpp): gpt-tiny as dp = 2,
// one rank per node (parallel.dp = -1: dp from WORLD_SIZE). Rank 1 freezes
// after step 7 (so the run is held there), then node 1 dies whole: every
// process in its namespace SIGKILLed, its launcher included. Node 0's
// launcher restarts alone, WORLD_SIZE 2 -> 1: dp = 1, the same global batch
// in twice the micro-batches, resumed from step 5 (saved under dp = 2,
// resharded). From step 6 on its losses and gradient norms equal, bit for
// bit, those of a fresh single-rank run resumed from a copy of that checkpoint.
void launch_shrinks() {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  const std::vector<std::string> sets{"training.steps=12", "checkpoint.interval=5", "checkpoint.keep=10",
                                      "checkpoint.resume=true", "checkpoint.dir=" + (dir.path / "ck").string(),
                                      "logging.progress=false", "training.peak_tflops=1", "parallel.timeout_s=20"};
  auto node = [&](int n) {
    return net.in(n, launch_cmd({"--nnodes", "2", "--node-rank", std::to_string(n), "--nproc-per-node", "1",
                                 "--master-addr", TwoNodes::kAddr[0], "--master-port", "29500", "--max-restarts", "2",
                                 "--min-nodes", "1", "--rdzv-timeout", "30"},
                                train_cmd(dir.path / "run", sets)));
  };
  const std::vector<std::pair<std::string, std::string>> env{{"TRIDENT_FAULT", "rank=1,step=7,kind=stall"}};
  Proc node0(node(0), dir.path / "node0.log", env);
  Proc node1(node(1), dir.path / "node1.log", env);
  const auto started = Clock::now();
  while (node1.log().find("rank 1 injects stall after step 7") == std::string::npos &&
         Clock::now() < started + std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NE(node1.log().find("rank 1 injects stall after step 7"), std::string::npos) << node1.log();
  net.kill_node(1);
  const bool ended = node0.wait_until(Clock::now() + std::chrono::seconds(150));
  const std::string log0 = node0.log();
  ASSERT_TRUE(ended) << "node 0 still runs 150 s after node 1 died\n" << log0;
  ASSERT_EQ(node0.exit_code(), 0) << log0;
  EXPECT_NE(log0.find("trident launch: node(s) 1 gone: going on with 1 of 2 nodes (--min-nodes 1), this one as "
                      "node 0, WORLD_SIZE 2 -> 1"),
            std::string::npos)
      << log0;
  EXPECT_NE(log0.find("trident launch: restarting the job (restart 1 of at most 2)"), std::string::npos) << log0;
  EXPECT_NE(log0.find("the job finished after 1 restart"), std::string::npos) << log0;
  const std::string step5 = (dir.path / "ck/step-00000005").string();
  ASSERT_NE(log0.find("checkpoint: resumed from " + step5 + " (step 5, saved under tp=1 pp=1 dp=2"), std::string::npos)
      << log0;
  EXPECT_TRUE(net.empty_within(0, 2.0)) << net.pids(0);

  // The reference: one rank, resumed from a copy of the same step-5 checkpoint.
  fs::create_directories(dir.path / "ck-ref");
  fs::copy(step5, dir.path / "ck-ref/step-00000005");
  std::ofstream(dir.path / "ck-ref/latest") << "step-00000005\n";
  std::vector<std::string> ref_sets = sets;
  ref_sets[4] = "checkpoint.dir=" + (dir.path / "ck-ref").string();
  train_on_one_node(dir.path, "ref", 1, ref_sets);
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<StepRow> run = read_metrics((dir.path / "run/metrics.jsonl").string());
  ASSERT_EQ(run.size(), 12u);
  expect_identical(read_metrics((dir.path / "ref/metrics.jsonl").string()),
                   std::vector<StepRow>(run.begin() + 5, run.end()), 7);
}

// The link between the nodes cut once step 7 is logged and restored 8 s
// later, 3 s past the ranks' collective timeout (parallel.timeout_s = 5): the
// collectives waiting across it time out before it carries again, both
// launchers restart in step once their channel carries again (it saw no RST
// or FIN), and the job ends with the uninterrupted single-node run's losses
// and final tensors. A cut shorter than the timeout raced TCP's retransmission
// backoff: a retransmission just after the restore completed the waiting
// collectives within the 5 s, no rank failed and nothing restarted (seen once
// with three tests beside it).
void launch_link_cut_restarts() {
  TwoNodes net;
  REQUIRE_NODES(net);
  TempDir dir;
  auto sets = [&](const std::string& ck) {
    std::vector<std::string> s = sets_for(dir.path / ck);
    s.insert(s.end(), {"training.steps=40", "parallel.timeout_s=5"});
    return s;
  };
  train_on_one_node(dir.path, "ref", 2, sets("ck-ref"));
  if (::testing::Test::HasFatalFailure()) return;
  auto node = [&](int n) {
    return net.in(n, launch_cmd({"--nnodes", "2", "--node-rank", std::to_string(n), "--nproc-per-node", "1",
                                 "--master-addr", TwoNodes::kAddr[0], "--master-port", "29500", "--max-restarts", "2",
                                 "--rdzv-timeout", "30"},
                                train_cmd(dir.path / "run", sets("ck-run"))));
  };
  Proc node0(node(0), dir.path / "node0.log");
  Proc node1(node(1), dir.path / "node1.log");
  const auto started = Clock::now();
  while (count_lines(dir.path / "run/metrics.jsonl") < 7 && Clock::now() < started + std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(net.cut_link());
  std::this_thread::sleep_for(std::chrono::seconds(8));
  ASSERT_TRUE(net.restore_link());
  const auto deadline = Clock::now() + std::chrono::seconds(200);
  const bool ended = node0.wait_until(deadline) && node1.wait_until(deadline);
  const std::string log0 = node0.log(), log1 = node1.log();
  ASSERT_TRUE(ended) << "still running 200 s after the link came back\n--- node 0 ---\n" << log0 << "--- node 1 ---\n"
                     << log1;
  ASSERT_EQ(node0.exit_code(), 0) << log0 << "--- node 1 ---\n" << log1;
  ASSERT_EQ(node1.exit_code(), 0) << log1 << "--- node 0 ---\n" << log0;
  for (const std::string* log : {&log0, &log1})
    EXPECT_NE(log->find("trident launch: restarting the job (restart 1 of at most 2)"), std::string::npos) << *log;
  EXPECT_NE(log0.find("checkpoint: resumed from"), std::string::npos) << log0;
  expect_identical(read_metrics((dir.path / "ref/metrics.jsonl").string()),
                   read_metrics((dir.path / "run/metrics.jsonl").string()), 40);
  for (const char* rank : {"rank-00000.json", "rank-00001.json"}) {
    const std::string a = entries_of(dir.path / "ck-ref/step-00000040" / rank);
    EXPECT_FALSE(a.empty()) << rank;
    EXPECT_EQ(a, entries_of(dir.path / "ck-run/step-00000040" / rank)) << rank;
  }
  EXPECT_TRUE(net.empty_within(0, 2.0)) << net.pids(0);
  EXPECT_TRUE(net.empty_within(1, 2.0)) << net.pids(1);
}

}  // namespace

TEST(LaunchTwoNodes, LinkCutAndRestoredRestartsBitIdentical) { launch_link_cut_restarts(); }
TEST(LaunchTwoNodes, KilledRankRestartsBitIdentical) { launch_restarts(); }
TEST(LaunchTwoNodes, PreemptedJobIsNotRestartedOnAnyNode) { launch_preempted(); }
TEST(LaunchTwoNodes, NodeGoneShrinksToTheNodesLeft) { launch_shrinks(); }

TEST(TorchrunTwoNodes, StaticRendezvousRestartsBitIdentical) {
  torchrun_restarts({"--node-rank", "NODE_RANK", "--master-addr", TwoNodes::kAddr[0], "--master-port", "29500"});
}

// The namespaces share the machine's host name, so c10d can tell neither which
// node hosts the store at the endpoint (is_host says so) nor which address is
// node 0's (--local-addr).
TEST(TorchrunTwoNodes, C10dRendezvousRestartsBitIdentical) {
  torchrun_restarts({"--rdzv-backend", "c10d", "--rdzv-endpoint", std::string(TwoNodes::kAddr[0]) + ":29400",
                     "--rdzv-id", "trident-test", "--rdzv-conf", "IS_HOST", "--local-addr", "LOCAL_ADDR"});
}
