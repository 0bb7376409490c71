// Two "nodes" on one machine for the multinode tests: a pair of network
// namespaces joined by a veth pair, each with its own IPv4 address, plus a
// child-process handle that runs a command inside one of them. Everything is
// released by destructors (processes killed, namespaces deleted), and
// namespaces left by an earlier, killed test process are removed on start.
// Header-only, no libtorch.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "run_helpers.h"

namespace trident::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a shell command, returning its exit status and (merged) output.
inline int sh(const std::string& cmd, std::string* out = nullptr) {
  std::string text;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int st = ::pclose(p);
  if (out) *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

// A command running as a child of the test, stdout and stderr in `log`.
// The destructor SIGKILLs it if it is still running.
class Proc {
 public:
  Proc(const std::vector<std::string>& argv, const fs::path& log,
       const std::vector<std::pair<std::string, std::string>>& env = {})
      : log_(log), start_(Clock::now()) {
    pid_ = ::fork();
    if (pid_ == 0) {
      if (!std::freopen(log.c_str(), "w", stdout)) _exit(126);
      ::dup2(STDOUT_FILENO, STDERR_FILENO);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      _exit(125);
    }
  }
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;
  ~Proc() { kill(); }

  pid_t pid() const { return pid_; }
  bool done() const { return done_; }
  int exit_code() const { return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_); }
  // Seconds from start to exit (valid once done()).
  double seconds() const { return std::chrono::duration<double>(ended_ - start_).count(); }
  Clock::time_point ended() const { return ended_; }
  std::string log() const { return slurp(log_); }

  bool poll() {
    if (!done_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) {
      done_ = true;
      ended_ = Clock::now();
    }
    return done_;
  }
  // Waits until `deadline`; false if still running then.
  bool wait_until(Clock::time_point deadline) {
    while (!poll() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return done_;
  }
  void kill() {
    if (pid_ > 0 && !poll()) {
      ::kill(pid_, SIGKILL);  // a launcher's ranks follow through PR_SET_PDEATHSIG
      ::waitpid(pid_, &status_, 0);
      done_ = true;
      ended_ = Clock::now();
    }
  }

 private:
  fs::path log_;
  Clock::time_point start_, ended_{};
  pid_t pid_ = -1;
  int status_ = 0;
  bool done_ = false;
};

// Two network namespaces "trident-<pid>-<n>-0/1" joined by veth0 <-> veth1,
// addresses 10.77.0.1/24 and 10.77.0.2/24, loopback up in both. The addresses
// live only inside the namespaces, so concurrent test processes do not clash.
class TwoNodes {
 public:
  static constexpr const char* kAddr[2] = {"10.77.0.1", "10.77.0.2"};

  TwoNodes() {
    build();
    if (!skip_reason_.empty() && std::getenv("CI")) {
      error_ = "CI is set, so a test that cannot run fails: " + skip_reason_;
      skip_reason_.clear();
    }
  }

 private:
  void build() {
    if (::geteuid() != 0) {
      skip_reason_ = "needs root to create network namespaces (running as uid " + std::to_string(::geteuid()) + ")";
      return;
    }
    if (sh("command -v ip") != 0) {
      skip_reason_ = "needs the `ip` command (Debian package iproute2; scripts/setup.sh installs it)";
      return;
    }
    remove_stale();
    static int counter = 0;
    const std::string base = "trident-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    for (int i = 0; i < 2; ++i) ns_[i] = base + "-" + std::to_string(i);
    std::string out;
    if (sh("ip netns add " + ns_[0], &out) != 0) {
      ns_[0].clear();
      ns_[1].clear();
      skip_reason_ = "cannot create a network namespace (`ip netns add` failed: " + out + ")";
      return;
    }
    const std::vector<std::string> steps = {
        "ip netns add " + ns_[1],
        "ip link add veth0 netns " + ns_[0] + " type veth peer name veth1 netns " + ns_[1],
        "ip -n " + ns_[0] + " addr add " + kAddr[0] + "/24 dev veth0",
        "ip -n " + ns_[1] + " addr add " + kAddr[1] + "/24 dev veth1",
        "ip -n " + ns_[0] + " link set veth0 up",
        "ip -n " + ns_[1] + " link set veth1 up",
        "ip -n " + ns_[0] + " link set lo up",  // a fresh namespace's loopback is down
        "ip -n " + ns_[1] + " link set lo up",
    };
    for (const auto& s : steps)
      if (sh(s, &out) != 0) {
        error_ = "`" + s + "` failed: " + out;
        return;
      }
  }

 public:
  ~TwoNodes() {
    for (const auto& n : ns_)
      if (!n.empty()) {
        kill_all_in(n);
        sh("ip netns del " + n);
        std::error_code ignored;
        fs::remove_all("/etc/netns/" + n, ignored);
      }
  }
  TwoNodes(const TwoNodes&) = delete;
  TwoNodes& operator=(const TwoNodes&) = delete;

  // Non-empty when the capability is absent (the test skips, naming it).
  // Under CI (the environment variable CI set, as .ci/run sets it) a missing
  // capability is a failure instead: error() names it and this stays empty.
  const std::string& skip_reason() const { return skip_reason_; }
  // Non-empty when setting up failed although the capability is there (a failure).
  const std::string& error() const { return error_; }
  const std::string& name(int node) const { return ns_[node]; }

  // argv run inside the node's namespace (`ip netns exec` execs it: same pid).
  std::vector<std::string> in(int node, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_[node]});
    return argv;
  }
  // PIDs of processes still in the node's namespace.
  std::string pids(int node) const {
    std::string out;
    sh("ip netns pids " + ns_[node], &out);
    return out;
  }
  bool empty(int node) const { return pids(node).find_first_not_of(" \n") == std::string::npos; }
  // Empty within `seconds`: a process killed with its node is listed until the kernel
  // has torn it down, a few milliseconds after its launcher's exit was seen.
  bool empty_within(int node, double seconds) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!empty(node)) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  // /etc/hosts as processes in the node's namespace see it (`ip netns exec`
  // bind-mounts /etc/netns/<name>/hosts over /etc/hosts).
  void set_hosts(int node, const std::string& content) const {
    fs::create_directories("/etc/netns/" + ns_[node]);
    std::ofstream("/etc/netns/" + ns_[node] + "/hosts") << content;
  }
  // Listening TCP sockets in the node's namespace (a stale store would be one).
  std::string listeners(int node) const {
    std::string out;
    sh("ip netns exec " + ns_[node] + " ss -Htln", &out);
    return out;
  }
  // Listening sockets of `node` after up to `seconds`: a killed process's
  // sockets close as the kernel tears it down, which may end a moment after
  // its pid has left the namespace's list. Empty when none is left.
  std::string listeners_within(int node, double seconds) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    std::string left = listeners(node);
    while (!left.empty() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      left = listeners(node);
    }
    return left;
  }
  // The node dies: every process in its namespace is SIGKILLed.
  void kill_node(int node) const { kill_all_in(ns_[node]); }
  // Cuts the link as a failed cable or switch port would: no RST, no FIN.
  bool cut_link() const { return sh("ip -n " + ns_[0] + " link set veth0 down") == 0; }
  // The cable back: packets flow again, and connections that saw no RST or FIN go on.
  bool restore_link() const { return sh("ip -n " + ns_[0] + " link set veth0 up") == 0; }

 private:
  static void kill_all_in(const std::string& ns) {
    std::string out;
    sh("ip netns pids " + ns, &out);
    std::istringstream in(out);
    for (pid_t p; in >> p;) ::kill(p, SIGKILL);
  }
  // Namespaces named after a test process that no longer exists (it was
  // killed before its destructors ran).
  static void remove_stale() {
    std::string out;
    sh("ip netns list", &out);
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      const std::string name = line.substr(0, line.find(' '));
      if (name.rfind("trident-", 0) != 0) continue;
      const pid_t owner = static_cast<pid_t>(std::atol(name.c_str() + 8));
      if (owner > 0 && ::kill(owner, 0) != 0) {
        kill_all_in(name);
        sh("ip netns del " + name);
        std::error_code ignored;
        fs::remove_all("/etc/netns/" + name, ignored);
      }
    }
  }
  std::string ns_[2];
  std::string skip_reason_, error_;
};

// ---- running `trident` in the tests (TRIDENT_BINARY_DIR/SOURCE_DIR come from CMake)

inline const std::string kTrident = TRIDENT_BINARY_DIR "/trident";
inline const std::string kConfig = TRIDENT_SOURCE_DIR "/configs/gpt-tiny.toml";

struct TempDir {
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "trident_multinode_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

inline std::vector<std::string> train_cmd(const fs::path& run_dir, const std::vector<std::string>& sets) {
  std::vector<std::string> cmd{kTrident, "train", "--config", kConfig, "--set", "logging.dir=" + run_dir.string()};
  for (const auto& s : sets) {
    cmd.push_back("--set");
    cmd.push_back(s);
  }
  return cmd;
}

inline std::vector<std::string> launch_cmd(const std::vector<std::string>& launch_args, const std::vector<std::string>& cmd) {
  std::vector<std::string> all{kTrident, "launch"};
  all.insert(all.end(), launch_args.begin(), launch_args.end());
  all.push_back("--");
  all.insert(all.end(), cmd.begin(), cmd.end());
  return all;
}

// Same steps, and every loss and gradient norm equal to the last bit.
inline void expect_identical(const std::vector<StepRow>& ref, const std::vector<StepRow>& got, size_t steps) {
  ASSERT_EQ(ref.size(), steps);
  ASSERT_EQ(got.size(), steps);
  for (size_t i = 0; i < steps; ++i) {
    EXPECT_EQ(ref[i].at("loss"), got[i].at("loss")) << "step " << i + 1;
    EXPECT_EQ(ref[i].at("grad_norm"), got[i].at("grad_norm")) << "step " << i + 1;
  }
}

#define REQUIRE_NODES(net)                                             \
  do {                                                                 \
    if (!(net).skip_reason().empty()) GTEST_SKIP() << (net).skip_reason(); \
    ASSERT_TRUE((net).error().empty()) << (net).error();               \
  } while (0)

}  // namespace trident::testing
