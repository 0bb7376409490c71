// Tests for `trident launch`: the pure helpers directly, and the launcher end to
// end by running the built executable TRIDENT_BINARY_DIR/trident (built by the
// top-level build; with a partial build, build the `trident` target first).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/free_port.h"
#include "launch/fault.h"
#include "launch/job_channel.h"
#include "launch/launcher.h"
#include "launch/restart_ledger.h"

namespace fs = std::filesystem;
using namespace trident::launch;
using Clock = std::chrono::steady_clock;
using trident::HeldPort;
using trident::hold_free_port;
using trident::listening_port;

namespace {

const char* kTrident = TRIDENT_BINARY_DIR "/trident";

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory for one test's PID files and captured output.
struct TempDir {
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "trident_launch_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

// Alive means signalable and not a zombie (a zombie has already died).
bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

// The PIDs written as files named `<stem>.<rank>` in dir.
std::vector<pid_t> pids_in(const fs::path& dir, const std::string& stem) {
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(stem + ".", 0) == 0) {
      const std::string text = read_file(e.path());
      if (!text.empty()) pids.push_back(static_cast<pid_t>(std::stol(text)));
    }
  return pids;
}

bool wait_for_files(const fs::path& dir, const std::string& stem, size_t count, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (pids_in(dir, stem).size() >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// One run of `trident launch ...` with stdout and stderr captured in files.
class LauncherRun {
 public:
  LauncherRun(const std::vector<std::string>& args, const fs::path& dir,
              const std::vector<std::pair<std::string, const char*>>& env = {})
      : out_path_(dir / "launcher.out"), err_path_(dir / "launcher.err") {
    std::vector<std::string> all{kTrident, "launch"};
    all.insert(all.end(), args.begin(), args.end());
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      if (!std::freopen(out_path_.c_str(), "w", stdout) || !std::freopen(err_path_.c_str(), "w", stderr)) _exit(126);
      for (const auto& [k, v] : env) v ? ::setenv(k.c_str(), v, 1) : ::unsetenv(k.c_str());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      _exit(125);
    }
  }
  ~LauncherRun() {
    if (!done_) {
      ::kill(pid_, SIGKILL);  // its ranks follow through PR_SET_PDEATHSIG
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }

  // Waits up to `limit` seconds; on timeout kills the launcher and fails.
  void finish(double limit = 10.0) {
    const auto deadline = start_ + std::chrono::duration<double>(limit);
    while (!done_ && Clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) done_ = true;
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    out = read_file(out_path_);
    err = read_file(err_path_);
    ASSERT_TRUE(done_) << "launcher still running after " << limit << " s; its stderr so far:\n" << err;
    ASSERT_NE(exit_code(), 125) << "could not exec " << kTrident << " (build the `trident` target)";
  }
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

  int status = 0;
  double seconds = 0;
  std::string out, err;

 private:
  fs::path out_path_, err_path_;
  Clock::time_point start_;
  pid_t pid_ = -1;
  bool done_ = false;
};

// A shell prologue that records the rank's PID (pid.R) and a background job's
// (bg.R), both of which must be gone once the launcher returns.
std::string record_pids(const fs::path& dir) {
  const std::string d = dir.string();
  return "echo $$ > " + d + "/pid.$RANK; sleep 60 & echo $! > " + d + "/bg.$RANK; ";
}

// Waits (at most ~10 s) until n ranks have written a `stem`.R file. After
// record_pids(), wait on "bg": it is written last, and waiting on "pid" alone
// let a rank be stopped before it recorded its background job.
std::string await_ranks(const fs::path& dir, int n, const std::string& stem = "bg") {
  return "i=0; while [ $(ls " + dir.string() + " | grep -c '^" + stem + "\\.') -lt " + std::to_string(n) +
         " ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; ";
}

// Whether every one of `pids` is dead within `seconds`. A SIGKILL takes
// effect when the kernel next runs the process, which on a loaded machine (the
// suite runs two tests at a time on two cores) can be after its sender has
// exited: a process still alive seconds later survived it.
bool all_dead_within(const std::vector<pid_t>& pids, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  auto any_alive = [&] { return std::any_of(pids.begin(), pids.end(), alive); };
  while (any_alive() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return !any_alive();
}

// The launcher's last act is a SIGKILL to each rank's process group.
void expect_all_dead(const fs::path& dir, size_t ranks) {
  for (const char* stem : {"pid", "bg"}) {
    const auto pids = pids_in(dir, stem);
    EXPECT_EQ(pids.size(), ranks) << stem;
    all_dead_within(pids, 5.0);  // then name any survivor
    for (pid_t p : pids) EXPECT_FALSE(alive(p)) << stem << " " << p << " survived the launcher";
  }
}

int status_of_child(void (*body)()) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST(LauncherPure, DescribesExitAndSignal) {
  const int exited = status_of_child([] { _exit(3); });
  EXPECT_EQ(describe_wait_status(exited), "exited with status 3");
  EXPECT_EQ(exit_code_of(exited), 3);
  const int killed = status_of_child([] { ::raise(SIGKILL); });
  EXPECT_EQ(describe_wait_status(killed), "was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(exit_code_of(killed), 137);
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(77), "signal 77");
}

TEST(LauncherPure, RankEnvironment) {
  LaunchOptions o;
  o.nnodes = 3;
  o.node_rank = 2;
  o.nproc_per_node = 4;
  o.master_addr = "node0";
  const Environment env = rank_environment(o, 1, 4242);
  auto get = [&](const std::string& key) {
    for (const auto& [k, v] : env)
      if (k == key) return v;
    return std::string("<unset>");
  };
  EXPECT_EQ(get("RANK"), "9");
  EXPECT_EQ(get("WORLD_SIZE"), "12");
  EXPECT_EQ(get("LOCAL_RANK"), "1");
  EXPECT_EQ(get("LOCAL_WORLD_SIZE"), "4");
  EXPECT_EQ(get("GROUP_RANK"), "2");
  EXPECT_EQ(get("NODE_RANK"), "2");
  EXPECT_EQ(get("MASTER_ADDR"), "node0");
  EXPECT_EQ(get("MASTER_PORT"), "4242");
}

TEST(LauncherPure, ValidateAndPickPort) {
  LaunchOptions o;
  o.command = {"true"};
  EXPECT_NO_THROW(check_launch_options(o));
  auto bad = o;
  bad.nproc_per_node = 0;
  EXPECT_THROW(check_launch_options(bad), LaunchError);
  bad = o;
  bad.nnodes = 2;
  bad.node_rank = -1;
  EXPECT_THROW(check_launch_options(bad), LaunchError);
  bad = o;
  bad.command.clear();
  EXPECT_THROW(check_launch_options(bad), LaunchError);
  const int port = pick_free_port();
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
}

// Whether binding `port` (all interfaces, SO_REUSEADDR as c10d's store) fails with EADDRINUSE.
static bool port_taken(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool taken = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return taken;
}

// NOTE [held store port]: the held port is never free while held, is listening (so the store can
// take it), and is free again once closed; listening_port refuses what is not a listening socket.
TEST(LauncherPure, HeldPortStaysTakenUntilClosed) {
  HeldPort held = hold_free_port();
  ASSERT_GE(held.fd(), 0);
  EXPECT_TRUE(port_taken(held.port()));
  EXPECT_EQ(listening_port(held.fd()), held.port());
  EXPECT_EQ(::fcntl(held.fd(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);  // no program inherits it unasked
  const int port = held.port();
  HeldPort moved = std::move(held);
  EXPECT_EQ(held.fd(), -1);
  EXPECT_TRUE(port_taken(port));
  moved.close();
  EXPECT_FALSE(port_taken(port));
  EXPECT_THROW(listening_port(987), std::runtime_error);  // not open
  const int file = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_THROW(listening_port(file), std::runtime_error);  // not a socket
  ::close(file);
  const int unlistened = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_THROW(listening_port(unlistened), std::runtime_error);
  ::close(unlistened);
}

TEST(LauncherPure, RankListPlacesRanks) {
  EXPECT_EQ(parse_rank_list("0,1,6,7"), (std::vector<int>{0, 1, 6, 7}));
  for (const char* bad : {"", "0,,1", "a", "1,-2", "3x"}) EXPECT_THROW(parse_rank_list(bad), LaunchError) << bad;
  LaunchOptions o;
  o.command = {"true"};
  o.nnodes = 2;
  o.node_rank = 1;
  o.nproc_per_node = 2;
  o.ranks = {3, 0};
  EXPECT_NO_THROW(check_launch_options(o));
  EXPECT_EQ(global_rank(o, 0), 3);
  EXPECT_EQ(global_rank(o, 1), 0);
  o.rdzv_timeout_seconds = 2.5;
  const Environment env = rank_environment(o, 1, 4242);
  EXPECT_EQ(env[0], (std::pair<std::string, std::string>{"RANK", "0"}));
  EXPECT_NE(std::find(env.begin(), env.end(), std::pair<std::string, std::string>{"TRIDENT_RDZV_TIMEOUT_S", "2.5"}),
            env.end());
  for (const auto& ranks : {std::vector<int>{0}, std::vector<int>{0, 4}, std::vector<int>{1, 1}}) {
    auto bad = o;
    bad.ranks = ranks;
    EXPECT_THROW(check_launch_options(bad), LaunchError);
  }
  auto bad = o;
  bad.rdzv_timeout_seconds = 0;
  EXPECT_THROW(check_launch_options(bad), LaunchError);
  o.ranks.clear();
  EXPECT_EQ(global_rank(o, 1), 3);  // the default block: node_rank * nproc + local
}

TEST(LauncherPure, FaultSpec) {
  const FaultSpec f = parse_fault("rank=3,step=2,kind=stall");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.step, 2);
  EXPECT_EQ(f.kind, "stall");
  EXPECT_EQ(f.attempt, 0) << "a fault fires in the first attempt unless told otherwise";
  EXPECT_EQ(parse_fault("rank=0,step=1,kind=kill,attempt=2").attempt, 2);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"rank=1,step=1,kind=kill,attempt=-1", "attempt='-1'"},
      {"rank=1,step=2,kind=explode", "kind='explode'"},
      {"rank=1,kind=kill", "lacks step"},
      {"rank=x,step=1,kind=kill", "rank='x'"},
      {"rank=1,step=1,kind=kill,when=now", "unknown key 'when'"},
      {"rank", "not key=value"},
  };
  for (const auto& [text, message] : bad) {
    try {
      parse_fault(text);
      ADD_FAILURE() << text << " was accepted";
    } catch (const LaunchError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// NOTE [restart accounting]: two restarts; the first resumed from step 5 after
// 7 steps were done and got past step 7 at 4.0 s; the second failed at once
// (7 done again) and its successor resumed from 5 and never got past 7 before
// the job ended at 20 s. Recomputed 2 + 2; lost (4.0 - 1.0) + (20.0 - 6.0).
TEST(LauncherPure, RestartLedger) {
  RestartLedger l;
  l.failed(0, "rank 1 was killed by signal 9 (SIGKILL)", 7, 1.0);
  l.restarted(1.5);
  EXPECT_TRUE(l.catching_up());
  EXPECT_EQ(l.catch_up_target(), 7);
  l.resumed(5);
  l.caught_up(4.0);
  EXPECT_FALSE(l.catching_up());
  l.failed(1, "rank 0 exited with status 1", 6, 6.0);
  l.restarted(6.5);
  EXPECT_EQ(l.catch_up_target(), 7) << "the most steps ever done, not the last attempt's";
  l.resumed(5);
  l.ended(20.0);
  EXPECT_EQ(l.restarts(), 2);
  EXPECT_EQ(l.steps_recomputed(), 4);
  EXPECT_DOUBLE_EQ(l.seconds_lost(), 3.0 + 14.0);
  const std::vector<std::string> lines = l.report(true);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "the job finished after 2 restarts: 4 steps recomputed, 17.0 s lost");
  EXPECT_EQ(lines[1], "restart 1: after rank 1 was killed by signal 9 (SIGKILL) with 7 steps done; ranks restarted "
                      "0.5 s after the failure, resumed from step 5, past step 7 3.0 s after the failure");
  EXPECT_EQ(l.failures(), "attempt 0: rank 1 was killed by signal 9 (SIGKILL); attempt 1: rank 0 exited with status 1");
  EXPECT_EQ(l.last_failure(), "attempt 1: rank 0 exited with status 1");
}

TEST(LauncherPure, JobEventsRoundTrip) {
  const JobEvent e{JobEvent::Kind::kFailed, 1, 1764567890123, "rank 2 on node 1 (pid 7) was killed\nby signal 9"};
  const std::string line = encode(e);
  EXPECT_EQ(line, "failed 1 1764567890123 rank 2 on node 1 (pid 7) was killed by signal 9\n");
  const auto back = decode(line.substr(0, line.size() - 1));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->kind, JobEvent::Kind::kFailed);
  EXPECT_EQ(back->node, 1);
  EXPECT_EQ(back->unix_ms, 1764567890123);
  EXPECT_EQ(back->text, "rank 2 on node 1 (pid 7) was killed by signal 9");
  const auto hello = decode("hello 3 5 ");
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->kind, JobEvent::Kind::kHello);
  EXPECT_EQ(hello->text, "");
  for (const char* bad : {"", "GET / HTTP/1.1", "failed x 5 t", "failed -1 5 t", "exploded 1 5 t", "done 1"})
    EXPECT_FALSE(decode(bad).has_value()) << bad;
}

TEST(LauncherPure, JobVerdictIsTheEarliestFailureWhateverTheArrivalOrder) {
  JobVerdict v(3);
  EXPECT_FALSE(v.failed());
  EXPECT_EQ(v.silent_nodes(0), (std::vector<int>{1, 2}));
  v.add({JobEvent::Kind::kStopped, 1, 1000, "rank 2 on node 1 (pid 7) was stopped by signal 19 (SIGSTOP)"});
  v.add({JobEvent::Kind::kFailed, 0, 4500, "rank 0 on node 0 (pid 5) exited with status 1"});
  v.add({JobEvent::Kind::kFailed, 2, 4000, "rank 5 on node 2 (pid 9) exited with status 1"});  // earlier, later news
  ASSERT_TRUE(v.failed());
  EXPECT_EQ(v.first()->node, 2);
  // A stop on another node before the failure is named as the likely cause.
  EXPECT_EQ(v.describe(), "rank 5 on node 2 (pid 9) exited with status 1; "
                          "rank 2 on node 1 (pid 7) was stopped by signal 19 (SIGSTOP) 3.0 s earlier");
  EXPECT_EQ(v.notes_before_first().size(), 1u);
  // A node is heard from once its launcher said it is exiting (its progress
  // records come before that), or went away.
  EXPECT_EQ(v.silent_nodes(0), (std::vector<int>{1, 2}));
  v.add({JobEvent::Kind::kDone, 2, 5000, "exit status 1"});
  EXPECT_EQ(v.silent_nodes(0), (std::vector<int>{1}));
  v.add({JobEvent::Kind::kLost, 1, 3999, "node 1's launcher went away"});
  EXPECT_TRUE(v.silent_nodes(0).empty());
  EXPECT_EQ(v.describe().rfind("node 1's launcher went away", 0), 0u) << v.describe();

  // Normal exits before a late failure: three named, the rest counted.
  JobVerdict end(2);
  for (int r = 0; r < 5; ++r)
    end.add({JobEvent::Kind::kExited0, 1, 100 + r, "rank " + std::to_string(r) + " on node 1 (pid 1) exited with status 0"});
  end.add({JobEvent::Kind::kFailed, 0, 1100, "rank 9 on node 0 (pid 2) exited with status 1"});
  EXPECT_EQ(end.describe(), "rank 9 on node 0 (pid 2) exited with status 1; "
                            "rank 0 on node 1 (pid 1) exited with status 0 1.0 s earlier; "
                            "rank 1 on node 1 (pid 1) exited with status 0 1.0 s earlier; "
                            "rank 2 on node 1 (pid 1) exited with status 0 1.0 s earlier; and 2 more");
}

// Two launchers of one job on this machine ("nodes" 0 and 1 on loopback),
// each with its own log directory; ranks record their PIDs in `shared`.
struct TwoLaunchers {
  TempDir shared, log[2];
  int master_port = pick_free_port(), channel_port = pick_free_port();
  std::vector<std::string> args(int node, const std::string& script) const {
    return {"--nnodes", "2", "--node-rank", std::to_string(node), "--nproc-per-node", "1", "--master-port",
            std::to_string(master_port), "--launcher-port", std::to_string(channel_port), "--grace", "1", "--",
            "sh", "-c", script};
  }
};

TEST(Launcher, FailureOnAnotherNodeStopsThisNodeAndIsNamedAsTheFirst) {
  TwoLaunchers job;
  const fs::path& d = job.shared.path;
  LauncherRun node0(job.args(0, record_pids(d) + "wait"), job.log[0].path);
  LauncherRun node1(job.args(1, record_pids(d) + await_ranks(d, 2) + "kill -9 $$"), job.log[1].path);
  node1.finish();
  node0.finish();
  EXPECT_EQ(node1.exit_code(), 128 + 9) << node1.err;
  EXPECT_EQ(node0.exit_code(), 1) << node0.err;
  // Node 0's own rank never failed: it was stopped because node 1 said so.
  EXPECT_NE(node0.err.find("node 1 reports: rank 1 on node 1 (pid "), std::string::npos) << node0.err;
  EXPECT_NE(node0.err.find("; stopping the 1 rank(s) on this node"), std::string::npos) << node0.err;
  for (const auto* run : {&node0, &node1}) {
    EXPECT_NE(run->err.find("the job's first failure: rank 1 on node 1 (pid "), std::string::npos) << run->err;
    EXPECT_NE(run->err.find("was killed by signal 9 (SIGKILL)\n"), std::string::npos) << run->err;
    EXPECT_LT(run->seconds, 8.0) << run->err;
    EXPECT_EQ(run->err.find("no word from"), std::string::npos) << run->err;
  }
  expect_all_dead(d, 2);
}

TEST(Launcher, LostNodeZeroLauncherStopsTheOtherNodes) {
  TwoLaunchers job;
  const fs::path& d = job.shared.path;
  // Node 0's rank execs into sleep: PR_SET_PDEATHSIG reaches the launcher's
  // child only, so a background job of it would outlive a SIGKILLed launcher.
  LauncherRun node0(job.args(0, "echo $$ > " + d.string() + "/n0.$RANK; exec sleep 60"), job.log[0].path);
  LauncherRun node1(job.args(1, record_pids(d) + "wait"), job.log[1].path);
  ASSERT_TRUE(wait_for_files(d, "bg", 1, 10) && wait_for_files(d, "n0", 1, 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // node 1's launcher connects (retries every 0.2 s)
  ::kill(node0.pid(), SIGKILL);  // its rank follows through PR_SET_PDEATHSIG
  const auto killed = Clock::now();
  node1.finish(20);
  const double after_kill = std::chrono::duration<double>(Clock::now() - killed).count();
  EXPECT_EQ(node1.exit_code(), 1) << node1.err;
  const std::string lost = "node 0's launcher at 127.0.0.1:" + std::to_string(job.channel_port) + " went away";
  EXPECT_NE(node1.err.find(lost + " (its connection closed before it finished); stopping the 1 rank(s)"),
            std::string::npos) << node1.err;
  EXPECT_NE(node1.err.find("the job's first failure: " + lost), std::string::npos) << node1.err;
  EXPECT_LT(after_kill, 10.0) << "its rank (sleep 60) would otherwise run on";
  node0.finish();
  expect_all_dead(d, 1);
  for (pid_t p : pids_in(d, "n0")) EXPECT_FALSE(alive(p)) << "node 0's rank " << p << " survived its launcher";
}

TEST(Launcher, NodesFinishingAtDifferentTimesIsNoFailure) {
  TwoLaunchers job;
  // Node 1 starts first and finishes last; node 0's launcher exits while node 1's rank still runs.
  LauncherRun node1(job.args(1, "sleep 1.5; echo node1 done"), job.log[1].path);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  LauncherRun node0(job.args(0, "echo node0 done"), job.log[0].path);
  node0.finish();
  node1.finish();
  EXPECT_EQ(node0.exit_code(), 0) << node0.err;
  EXPECT_EQ(node1.exit_code(), 0) << node1.err;
  EXPECT_NE(node1.out.find("node1 done"), std::string::npos);
  for (const auto* run : {&node0, &node1}) {
    EXPECT_EQ(run->err.find("went away"), std::string::npos) << run->err;
    EXPECT_EQ(run->err.find("first failure"), std::string::npos) << run->err;
    EXPECT_EQ(run->err.find("cannot reach"), std::string::npos) << run->err;
  }
}

TEST(Launcher, FailedRankStopsTheOthers) {
  TempDir dir;
  const std::string script = record_pids(dir.path) + "if [ \"$RANK\" = 1 ]; then " + await_ranks(dir.path, 3) +
                             "exit 3; fi; wait";
  LauncherRun run({"--nproc-per-node", "3", "--", "sh", "-c", script}, dir.path);
  run.finish();
  EXPECT_EQ(run.exit_code(), 3) << run.err;
  EXPECT_LT(run.seconds, 10.0);
  EXPECT_NE(run.err.find("rank 1 on node 0 (pid "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("exited with status 3; stopping the other 2 ranks"), std::string::npos) << run.err;
  // Only the first failure is the cause; the stopped ranks are not reported.
  EXPECT_EQ(run.err.find("rank 0 on node 0 (pid"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("rank 2 on node 0 (pid"), std::string::npos) << run.err;
  expect_all_dead(dir.path, 3);
}

TEST(Launcher, RankKilledBySignalIsNamed) {
  TempDir dir;
  const std::string script = record_pids(dir.path) + "if [ \"$RANK\" = 0 ]; then " + await_ranks(dir.path, 2) +
                             "kill -9 $$; fi; wait";
  LauncherRun run({"--nproc-per-node", "2", "--", "sh", "-c", script}, dir.path);
  run.finish();
  EXPECT_EQ(run.exit_code(), 128 + 9) << run.err;
  EXPECT_LT(run.seconds, 10.0);
  EXPECT_NE(run.err.find("rank 0 on node 0 (pid "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("was killed by signal 9 (SIGKILL); stopping the other 1 rank"), std::string::npos)
      << run.err;
  expect_all_dead(dir.path, 2);
}

TEST(Launcher, SigtermToLauncherStopsEveryRank) {
  TempDir dir;
  LauncherRun run({"--nproc-per-node", "3", "--", "sh", "-c", record_pids(dir.path) + "wait"}, dir.path);
  ASSERT_TRUE(wait_for_files(dir.path, "bg", 3, 10.0)) << "ranks did not start";
  ASSERT_EQ(::kill(run.pid(), SIGTERM), 0);
  run.finish(10.0);
  EXPECT_EQ(run.exit_code(), 128 + SIGTERM) << run.err;
  EXPECT_NE(run.err.find("received SIGTERM"), std::string::npos) << run.err;
  expect_all_dead(dir.path, 3);
}

TEST(Launcher, RanksDieWithASigkilledLauncher) {
  TempDir dir;
  // exec keeps the PID (and PR_SET_PDEATHSIG), so pid.R is the rank process itself.
  LauncherRun run({"--nproc-per-node", "2", "--", "sh", "-c", "echo $$ > " + dir.path.string() +
                   "/pid.$RANK; exec sleep 60"}, dir.path);
  ASSERT_TRUE(wait_for_files(dir.path, "pid", 2, 10.0)) << "ranks did not start";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let `exec sleep` happen
  ASSERT_EQ(::kill(run.pid(), SIGKILL), 0);
  run.finish(10.0);
  const auto pids = pids_in(dir.path, "pid");
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_TRUE(all_dead_within(pids, 5.0)) << "ranks outlived their SIGKILLed launcher";
}

// A rank stopped by a signal stalls its peers without failing: the launcher
// says so at once and names it when another rank then fails; stopping it
// works at once too (SIGCONT follows SIGTERM).
TEST(Launcher, StoppedRankIsNamed) {
  TempDir dir;
  const std::string d = dir.path.string();
  const std::string script = "if [ \"$RANK\" = 0 ]; then echo $$ > " + d + "/pid.0; kill -STOP $$; sleep 60; else " +
                             await_ranks(dir.path, 1, "pid") + "sleep 0.5; exit 4; fi";
  LauncherRun run({"--nproc-per-node", "2", "--grace", "30", "--", "sh", "-c", script}, dir.path);
  run.finish(10.0);
  EXPECT_EQ(run.exit_code(), 4) << run.err;
  EXPECT_LT(run.seconds, 10.0) << "the stopped rank waited for the grace period";
  EXPECT_NE(run.err.find("rank 0 on node 0 (pid "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("was stopped by signal 19 (SIGSTOP)"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("exited with status 4; stopping the other 1 rank; rank 0 had been stopped by SIGSTOP"),
            std::string::npos)
      << run.err;
  const auto pids = pids_in(dir.path, "pid");
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_FALSE(alive(pids[0]));
}

TEST(Launcher, EarlyExitZeroIsNamedWhenAnotherFails) {
  TempDir dir;
  LauncherRun run({"--nproc-per-node", "2", "--", "sh", "-c",
                   "if [ \"$RANK\" = 1 ]; then exit 0; fi; sleep 0.5; exit 5"},
                  dir.path);
  run.finish();
  EXPECT_EQ(run.exit_code(), 5) << run.err;
  EXPECT_NE(run.err.find("rank 0 on node 0 (pid "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("exited with status 5; rank 1 had exited with status 0"), std::string::npos) << run.err;
}

TEST(Launcher, RankIgnoringSigtermIsKilledAfterGrace) {
  TempDir dir;
  // Rank 0 ignores SIGTERM (and so does its sleep); rank 1 fails once it has.
  const std::string d = dir.path.string();
  const std::string script = "if [ \"$RANK\" = 0 ]; then trap '' TERM; echo $$ > " + d +
                             "/pid.0; sleep 60; else " + await_ranks(dir.path, 1, "pid") + "exit 2; fi";
  LauncherRun run({"--nproc-per-node", "2", "--grace", "1", "--", "sh", "-c", script}, dir.path);
  run.finish(10.0);
  EXPECT_EQ(run.exit_code(), 2) << run.err;
  EXPECT_NE(run.err.find("rank 1 on node 0 (pid "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("SIGKILL"), std::string::npos) << run.err;
  const auto pids = pids_in(dir.path, "pid");
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_FALSE(alive(pids[0]));
}

TEST(Launcher, EnvironmentAndPrefixes) {
  TempDir dir;
  LauncherRun run({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2", "--master-addr", "10.1.2.3",
                   "--master-port", "12345", "--", "sh", "-c",
                   "echo \"R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK N=$NODE_RANK "
                   "A=$MASTER_ADDR P=$MASTER_PORT T=$OMP_NUM_THREADS\"; echo oops-$RANK >&2; printf tail-$RANK"},
                  dir.path, {{"OMP_NUM_THREADS", nullptr}});
  run.finish();
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  for (int r : {2, 3}) {
    const std::string p = "[rank " + std::to_string(r) + "] ";
    const std::string line = p + "R=" + std::to_string(r) + " W=4 L=" + std::to_string(r - 2) +
                             " LW=2 G=1 N=1 A=10.1.2.3 P=12345 T=1\n";
    EXPECT_NE(run.out.find(line), std::string::npos) << run.out;
    EXPECT_NE(run.out.find(p + "tail-" + std::to_string(r) + "\n"), std::string::npos) << run.out;
    EXPECT_NE(run.err.find(p + "oops-" + std::to_string(r) + "\n"), std::string::npos) << run.err;
  }
  EXPECT_EQ(run.out.find("oops"), std::string::npos) << "stderr leaked into stdout";
  std::istringstream lines(run.out);
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) EXPECT_EQ(line.rfind("[rank ", 0), 0u) << line;
  EXPECT_EQ(count, 4);
}

TEST(Launcher, KeepsUserOmpThreadsAndNoPrefix) {
  TempDir dir;
  LauncherRun run({"--nproc-per-node", "1", "--no-prefix", "--", "sh", "-c", "echo T=$OMP_NUM_THREADS"}, dir.path,
                  {{"OMP_NUM_THREADS", "7"}});
  run.finish();
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, "T=7\n");
}

TEST(Launcher, MasterPortZeroPicksOnePortForAll) {
  TempDir dir;
  LauncherRun run({"--nproc-per-node", "3", "--master-port", "0", "--", "sh", "-c", "echo P=$MASTER_PORT"},
                  dir.path);
  run.finish();
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  std::set<std::string> ports;
  std::istringstream lines(run.out);
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    ASSERT_NE(line.find("] P="), std::string::npos) << line;
    ports.insert(line.substr(line.find("] P=") + 4));
  }
  EXPECT_EQ(count, 3) << run.out;
  ASSERT_EQ(ports.size(), 1u) << run.out;
  const int port = std::stoi(*ports.begin());
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
}

// NOTE [held store port]: under --master-port 0, rank 0 (only) inherits the launcher's socket,
// still listening on MASTER_PORT, so nothing else can take the port before rank 0's store serves it.
TEST(Launcher, MasterPortZeroHandsRankZeroTheListeningPort) {
  TempDir dir;
  const std::string check =
      "import os, socket\n"
      "fd = os.environ.get('TRIDENT_STORE_FD')\n"
      "port = int(os.environ['MASTER_PORT'])\n"
      "if fd is not None:\n"
      "    s = socket.socket(fileno=int(fd))\n"
      "    print('held', s.getsockname()[1] == port, s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))\n"
      "    s.detach()\n"
      "t = socket.socket()\n"
      "t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "try:\n"
      "    t.bind(('', port)); print('free')\n"
      "except OSError as e:\n"
      "    print('taken' if e.errno == 98 else e)\n";
  std::ofstream(dir.path / "check.py") << check;
  // Rank 1 checks after rank 0, which waits for it (so rank 0 is alive and holds the socket).
  LauncherRun run({"--nproc-per-node", "2", "--master-port", "0", "--no-prefix", "--", "sh", "-c",
                   "if [ \"$RANK\" = 0 ]; then echo \"R0 fd=${TRIDENT_STORE_FD:-none} $(python3 " +
                       (dir.path / "check.py").string() + " | tr '\\n' ' ')\" > " + (dir.path / "r0").string() +
                       "; touch " + (dir.path / "r0.done").string() + "; while [ ! -e " + (dir.path / "r1.done").string() +
                       " ]; do sleep 0.1; done; else while [ ! -e " + (dir.path / "r0.done").string() +
                       " ]; do sleep 0.1; done; echo \"R1 fd=${TRIDENT_STORE_FD:-none} $(python3 " +
                       (dir.path / "check.py").string() + " | tr '\\n' ' ')\"; touch " +
                       (dir.path / "r1.done").string() + "; fi"},
                  dir.path);
  run.finish(60);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  std::ifstream r0(dir.path / "r0");
  std::string line0((std::istreambuf_iterator<char>(r0)), std::istreambuf_iterator<char>());
  EXPECT_NE(line0.find("R0 fd="), std::string::npos) << line0;
  EXPECT_EQ(line0.find("fd=none"), std::string::npos) << line0;
  EXPECT_NE(line0.find("held True 1 taken"), std::string::npos) << line0;
  EXPECT_NE(run.out.find("R1 fd=none taken"), std::string::npos) << run.out;  // rank 0 holds it, not the launcher alone
}

// `sh -c` text that runs `trident train` on gpt-tiny for one step as a rank whose launcher names no
// node (no NODE_RANK or GROUP_RANK, as under Open MPI or variables set by hand), logging under dir.
static std::string train_without_node(const fs::path& dir) {
  return std::string("unset NODE_RANK GROUP_RANK; exec ") + kTrident + " train --config " TRIDENT_SOURCE_DIR
         "/configs/gpt-tiny.toml --set training.steps=1 --set logging.dir=" + (dir / "run").string();
}

// Rank 1 never joins (it sleeps); rank 0, on no named node, says so naming the ranks that did join,
// not "node(s) -1 did".
TEST(Launcher, NeverJoinedWithoutNodeNamesTheRanksThatJoined) {
  TempDir dir;
  LauncherRun run({"--nproc-per-node", "2", "--master-port", "0", "--rdzv-timeout", "2", "--", "sh", "-c",
                   "if [ \"$RANK\" = 1 ]; then exec sleep 60; fi; " + train_without_node(dir.path)},
                  dir.path);
  run.finish(30);
  EXPECT_NE(run.exit_code(), 0) << run.err;
  EXPECT_NE(run.err.find("rank(s) 1 of 2 never joined the rendezvous at 127.0.0.1:"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(" within 2 s (rank(s) 0 did; "), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("node(s) -1"), std::string::npos) << run.err;
}

// Every rank joins, none on a named node: the summary line places them by address alone.
TEST(Launcher, JoinedWithoutNodeIsPlacedByAddress) {
  TempDir dir;
  LauncherRun run({"--nproc-per-node", "2", "--master-port", "0", "--", "sh", "-c", train_without_node(dir.path)},
                  dir.path);
  run.finish(60);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_NE(run.out.find(": 2 ranks joined (127.0.0.1: rank(s) 0-1)"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("node -1"), std::string::npos) << run.out;
}

// A command that cannot be started is bad input: exit 2 (NOTE [exit statuses]), not the shell's 127.
TEST(Launcher, MissingProgramIsBadInput) {
  TempDir dir;
  LauncherRun run({"--nproc-per-node", "2", "--", "/nonexistent/trident-test-program"}, dir.path);
  run.finish();
  EXPECT_EQ(run.exit_code(), 2) << run.err;
  EXPECT_NE(run.err.find("cannot run '/nonexistent/trident-test-program'"), std::string::npos) << run.err;
  // The failure and the diagnosis name the failed exec, its path and errno's text, not a
  // bare status 127 or a rank that "never reported its position".
  const std::string failed = "could not be started (cannot run '/nonexistent/trident-test-program': No such file or directory)";
  EXPECT_NE(run.err.find(") " + failed + "; stopping the other 1 rank"), std::string::npos) << run.err;
  // Both ranks fail to start; which one the launcher reaps first is a race.
  EXPECT_TRUE(run.err.find("diagnosis: rank 0 " + failed) != std::string::npos ||
              run.err.find("diagnosis: rank 1 " + failed) != std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("never reported"), std::string::npos) << run.err;
}

TEST(Launcher, BadArgumentsAreExplained) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc-per-node", "0", "--", "true"}, "--nproc-per-node must be at least 1, got 0"},
      {{"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2", "--", "true"},
       "--node-rank 2 is out of range [0, 2)"},
      {{"--nproc-per-node", "2", "--"}, "missing command after `--`"},
      {{"--nproc-per-node", "2", "true"}, "missing `--`"},
      {{"--nproc-per-node", "2", "--master-port", "70000", "--", "true"}, "--master-port 70000 is not a TCP port"},
      {{"--nproc-per-node", "2", "--master-port", "abc", "--", "true"}, "'abc'"},
      {{"--nproc-per-node", "1", "--nnodes", "2", "--master-port", "0", "--", "true"}, "--master-port 0 needs"},
      {{"--", "true"}, "nproc-per-node"},
      {{"--nproc-per-node", "1", "--rdzv-timeout", "0", "--", "true"}, "--rdzv-timeout must be a positive number"},
      {{"--nproc-per-node", "2", "--ranks", "0,0", "--", "true"}, "--ranks lists rank 0 twice"},
      {{"--nproc-per-node", "1", "--max-restarts", "-1", "--", "true"}, "--max-restarts must be >= 0, got -1"},
      {{"--nproc-per-node", "1", "--nnodes", "2", "--master-port", "29500", "--launcher-port", "29504",
        "--max-restarts", "2", "--", "true"},
       "--launcher-port 29504 with --master-port 29500 and --max-restarts 2: attempt k uses both ports + 2k"},
      {{"--nproc-per-node", "1", "--nnodes", "2", "--master-port", "65530", "--max-restarts", "3", "--", "true"},
       "--master-port 65530 with --max-restarts 3: attempt k uses the ports + 2k, past 65535"},
      {{"--nproc-per-node", "1", "--min-nodes", "1", "--max-restarts", "1", "--", "true"},
       "--min-nodes 1 needs --nnodes > 1: a single node cannot shrink"},
      {{"--nproc-per-node", "1", "--nnodes", "2", "--min-nodes", "1", "--", "true"},
       "--min-nodes 1 needs --max-restarts > 0"},
      {{"--nproc-per-node", "1", "--nnodes", "2", "--min-nodes", "2", "--max-restarts", "1", "--", "true"},
       "--min-nodes 2 with --nnodes 2: expected 1..1 (--min-nodes 2 would allow no shrinking)"},
      {{"--nproc-per-node", "1", "--nnodes", "3", "--min-nodes", "-1", "--max-restarts", "1", "--", "true"},
       "--min-nodes -1 with --nnodes 3: expected 1..2"},
      {{"--nproc-per-node", "1", "--nnodes", "2", "--min-nodes", "1", "--max-restarts", "1", "--ranks", "1", "--",
        "true"},
       "--min-nodes 1 with --ranks: a shrunken job renumbers its ranks"},
      {{"--nproc-per-node", "2", "--ranks", "0", "--", "true"}, "--ranks lists 1 rank(s) but --nproc-per-node is 2"},
      {{"--nproc-per-node", "1", "--ranks", "x", "--", "true"}, "--ranks 'x': 'x' is not a non-negative integer"},
      {{"--nproc-per-node", "1", "--nnodes", "2", "--launcher-port", "29600", "--master-port", "29600", "--", "true"},
       "--launcher-port 29600 equals --master-port"},
      {{"--nproc-per-node", "1", "--launcher-port", "70000", "--", "true"}, "--launcher-port 70000 is not a TCP port"},
  };
  for (const auto& [args, message] : cases) {
    TempDir dir;
    LauncherRun run(args, dir.path);
    run.finish();
    EXPECT_NE(run.exit_code(), 0) << message;
    EXPECT_NE(run.err.find(message), std::string::npos) << "expected '" << message << "' in: " << run.err;
  }
}

TEST(Launcher, HelpExitsZero) {
  TempDir dir;
  LauncherRun run({"--help"}, dir.path);
  run.finish();
  EXPECT_EQ(run.exit_code(), 0);
  EXPECT_NE(run.out.find("--nproc-per-node"), std::string::npos);
}
