// The launcher: spawn ranks, relay their output line by line, supervise them.
// See NOTE [launcher process model] below for the choices that keep it orphan-free.
#include "launch/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <optional>
#include <sstream>
#include <string>

#include "core/free_port.h"
#include "launch/diagnose.h"
#include "launch/job_channel.h"
#include "launch/relay.h"
#include "launch/restart_ledger.h"
#include "launch/unique_fd.h"

namespace trident::launch {

namespace {

// NOTE [launcher process model]
// Each rank runs in its own process group (pgid = its pid), so that
//  - a terminal's Ctrl-C reaches only the launcher, which forwards it exactly once;
//  - a signal sent to -pgid also reaches whatever the rank started (`sh -c` children).
// Signals reach the single-threaded poll loop through a self-pipe, so SIGCHLD,
// SIGINT, SIGTERM and pipe output are all handled in one place. Ranks get
// PR_SET_PDEATHSIG=SIGKILL (Linux) so a SIGKILLed launcher still takes them down,
// and stdin from /dev/null because a background process group reading the
// terminal would be stopped by SIGTTIN. RankSet's destructor kills and reaps any
// rank still running, so an exception anywhere cannot leave orphans.

using Clock = std::chrono::steady_clock;

// trident::hold_free_port, its failure a LaunchError.
HeldPort hold_free_port_for_launch() {
  try {
    return hold_free_port();
  } catch (const std::runtime_error& e) {
    throw LaunchError(e.what());
  }
}

// Everything a forked rank needs, prepared before fork() so the child only
// calls async-signal-safe functions between fork and exec.
struct SpawnPlan {
  std::vector<std::string> env_entries;  // "KEY=VALUE", kept alive for putenv
  std::vector<std::string> args;
  std::vector<char*> argv;
  int stdout_fd = -1;  // -1: inherit the launcher's
  int stderr_fd = -1;
  int exec_report_fd = -1;  // close-on-exec: EOF tells the launcher exec succeeded, an errno that it failed
  int store_fd = -1;        // rank 0's inherited listening socket (NOTE [held store port]), else -1
  pid_t launcher_pid = 0;
};

[[noreturn]] void exec_rank(SpawnPlan& plan) {
  ::setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP}) ::signal(sig, SIG_DFL);
#ifdef __linux__
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
  // The launcher may have died before prctl took effect.
  if (::getppid() != plan.launcher_pid) ::_exit(128 + SIGKILL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull > STDIN_FILENO) {
    ::dup2(devnull, STDIN_FILENO);
    ::close(devnull);
  }
  if (plan.stdout_fd >= 0) ::dup2(plan.stdout_fd, STDOUT_FILENO);
  if (plan.stderr_fd >= 0) ::dup2(plan.stderr_fd, STDERR_FILENO);
  if (plan.store_fd >= 0) ::fcntl(plan.store_fd, F_SETFD, 0);  // survives exec (NOTE [held store port])
  for (auto& e : plan.env_entries) ::putenv(e.data());
  ::execvp(plan.argv[0], plan.argv.data());
  const int exec_errno = errno;
  if (plan.exec_report_fd >= 0)
    write_all(plan.exec_report_fd, reinterpret_cast<const char*>(&exec_errno), sizeof exec_errno);
  errno = exec_errno;
  char msg[512];
  const int n = std::snprintf(msg, sizeof msg, "trident launch: cannot run '%s': %s\n", plan.argv[0],
                              std::strerror(errno));
  write_all(STDERR_FILENO, msg, n > 0 ? std::min<size_t>(n, sizeof msg - 1) : 0);
  ::_exit(127);
}

struct Rank {
  int rank = 0;
  pid_t pid = -1;  // also the rank's process-group id
  bool running = false;
  int status = 0;
  Clock::time_point ended{};  // when it was reaped
  Clock::time_point stopped_at{};  // when it was last seen stopped by a signal
  int stop_signal = 0;             // that signal, 0 if never stopped
  std::vector<LineRelay> streams;  // stdout, stderr; empty with --no-prefix
  std::string exec_error;          // "cannot run 'prog': No such file or directory" when exec failed
};

// Owns the ranks: whatever happens, the destructor leaves none running.
class RankSet {
 public:
  RankSet() = default;
  RankSet(const RankSet&) = delete;
  RankSet& operator=(const RankSet&) = delete;
  ~RankSet() {
    for (auto& r : ranks) {
      if (r.running) {
        ::kill(-r.pid, SIGKILL);
        ::kill(r.pid, SIGKILL);  // in case setpgid had not happened yet
        while (::waitpid(r.pid, &r.status, 0) < 0 && errno == EINTR) {
        }
        r.running = false;
      }
      // Whatever the rank left behind in its group (e.g. a shell's background
      // job) goes too. The group id cannot be reused while members remain.
      if (r.pid > 0) ::kill(-r.pid, SIGKILL);
    }
  }
  int running_count() const {
    return static_cast<int>(std::count_if(ranks.begin(), ranks.end(), [](const Rank& r) { return r.running; }));
  }
  void signal_running(int sig) {
    for (auto& r : ranks)
      if (r.running) {
        ::kill(-r.pid, sig);
        // A stopped rank would hold SIGTERM pending until the grace period
        // ends; let it act on it now.
        if (sig != SIGKILL && r.stop_signal != 0) ::kill(-r.pid, SIGCONT);
      }
  }
  std::vector<Rank> ranks;
};

// How a launcher that was signalled names itself to the others.
constexpr const char* kStoppedByLauncher = "the launcher";

// The exit status of a node stopped by another node's first failed rank (its kFailed text, "rank 1 on
// node 1 (pid 7) exited with status 2; ..."): 2 where that rank met bad input or could not be
// started, as its own node exits (NOTE [exit statuses]), so every node of a job with a mismatched
// --nnodes says so whichever hears of it first; else 1.
int remote_failure_status(const std::string& text) {
  const std::string first = text.substr(0, text.find(';'));
  const std::string bad = " exited with status 2";
  const bool bad_input = (first.size() >= bad.size() && first.compare(first.size() - bad.size(), bad.size(), bad) == 0) ||
                         first.find(" could not be started (") != std::string::npos;
  return bad_input ? 2 : 1;
}

class Supervisor {
 public:
  // `held`, when given, listens on master_port; rank 0 inherits it (NOTE [held store port]).
  Supervisor(const LaunchOptions& options, int master_port, HeldPort* held = nullptr)
      : o_(options),
        port_(master_port),
        held_(held),
        channel_(options.node_rank, options.nnodes, options.master_addr,
                 launcher_port(options, master_port), options.rdzv_timeout_seconds),
        verdict_(options.nnodes) {}
  int run();
  // The job's first failure when a rank of any node was it, else this node's.
  FirstFailure first_failure() const {
    const FirstFailure job = verdict_.failed() ? parse_failure_line(verdict_.first()->text) : FirstFailure{};
    return job.rank >= 0 ? job : first_failure_;
  }
  // Ranks of any node that exited with status 0 or were stopped by a signal
  // before the job's first failure: "exited with status 0", "been stopped by …".
  std::map<int, std::string> early_exits() const {
    std::map<int, std::string> exits;
    for (const auto& e : verdict_.notes_before_first()) {
      const FirstFailure f = parse_failure_line(e.text);
      if (f.rank >= 0) exits[f.rank] = f.how.rfind("was ", 0) == 0 ? "been " + f.how.substr(4) : f.how;
    }
    return exits;
  }
  // Other nodes' ranks' last progress records, sent after a failure.
  const std::vector<sched::ProgressRecord>& remote_progress() const { return remote_progress_; }
  // Whether the launcher itself was told to stop (SIGINT/SIGTERM): no restart then.
  bool interrupted() const { return interrupted_; }
  // Why another node's launcher will not restart (it was told to stop, or it
  // is gone), so neither may this one; empty if none said so.
  const std::string& remote_end() const { return remote_end_; }
  // Nodes whose launchers went away during this attempt (kLost), and whether
  // another node's launcher was told to stop (then nothing restarts).
  const std::set<int>& lost_nodes() const { return lost_nodes_; }
  bool remote_stopped() const { return remote_stopped_; }
  // When this node saw the job's first failure.
  Clock::time_point failed_at() const { return failed_at_; }
  // While the ledger is catching up, look for a rank past its target step.
  void watch(RestartLedger* ledger, Clock::time_point epoch) {
    ledger_ = ledger;
    epoch_ = epoch;
  }

 private:
  void start_rank(int local_rank);
  void wait_for_events(int timeout_ms);
  void handle_signals();
  void reap();
  void on_failure(Rank& r);
  void on_job_event(const JobEvent& e);
  void publish(JobEvent::Kind kind, const std::string& text);
  void report_job_verdict();
  void stop_all(int sig);
  void drain_outputs(Clock::duration budget);
  void check_caught_up();
  // "rank 2 on node 1 (pid 4242)": how every report names a rank
  // (parse_failure_line in diagnose.h reads it back).
  std::string who(const Rank& r) const {
    return "rank " + std::to_string(r.rank) + " on node " + std::to_string(o_.node_rank) + " (pid " +
           std::to_string(r.pid) + ")";
  }
  void say(const std::string& msg) {
    const std::string line = "trident launch: " + msg + "\n";
    write_all(STDERR_FILENO, line.data(), line.size());
  }

  const LaunchOptions& o_;
  const int port_;
  HeldPort* held_;  // closed here once the ranks are started
  SignalRelay signals_;  // declared before ranks_: outlives the final reaping
  JobChannel channel_;   // NOTE [job channel]; inert for a single node
  JobVerdict verdict_;   // the job's first failure, as far as this launcher knows
  RankSet ranks_;
  std::optional<int> exit_code_;  // set once, by the first cause of stopping
  FirstFailure first_failure_;
  std::vector<sched::ProgressRecord> remote_progress_;
  bool stopping_ = false;
  bool killed_ = false;
  bool interrupted_ = false;
  std::string remote_end_;
  std::set<int> lost_nodes_;
  bool remote_stopped_ = false;
  Clock::time_point failed_at_{};
  RestartLedger* ledger_ = nullptr;
  Clock::time_point epoch_{}, next_look_{};
  Clock::time_point kill_deadline_{};
};

void Supervisor::start_rank(int local_rank) {
  SpawnPlan plan;
  for (const auto& [k, v] : rank_environment(o_, local_rank, port_)) plan.env_entries.push_back(k + "=" + v);
  if (held_ && held_->fd() >= 0 && global_rank(o_, local_rank) == 0) {
    plan.store_fd = held_->fd();
    plan.env_entries.push_back("TRIDENT_STORE_FD=" + std::to_string(plan.store_fd));
  }
  plan.args = o_.command;
  for (auto& a : plan.args) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  plan.launcher_pid = ::getpid();

  Rank r;
  r.rank = global_rank(o_, local_rank);
  UniqueFd out_w, err_w;
  if (o_.prefix_output) {
    const std::string prefix = "[rank " + std::to_string(r.rank) + "] ";
    auto [out_r, out_write] = make_pipe();
    auto [err_r, err_write] = make_pipe();
    r.streams.emplace_back(std::move(out_r), STDOUT_FILENO, prefix);
    r.streams.emplace_back(std::move(err_r), STDERR_FILENO, prefix);
    out_w = std::move(out_write);
    err_w = std::move(err_write);
    plan.stdout_fd = out_w.get();
    plan.stderr_fd = err_w.get();
  }
  // Signals stay blocked across fork so the child never runs the launcher's
  // handlers (which would write into the launcher's self-pipe).
  sigset_t all, old;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, &old);
  auto [report_r, report_w] = make_pipe();
  plan.exec_report_fd = report_w.get();
  const pid_t pid = ::fork();
  if (pid == 0) exec_rank(plan);
  const int fork_errno = errno;
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) throw LaunchError("cannot fork rank " + std::to_string(r.rank) + ": " + std::strerror(fork_errno));
  ::setpgid(pid, pid);  // also done in the child; whichever runs first wins the race
  // The child's exec closes its copy of the report pipe (EOF) or, failing, writes
  // errno: a status of 127 alone cannot tell a failed exec from a program exiting 127.
  report_w.reset();
  int exec_errno = 0;
  ssize_t got = 0;
  while ((got = ::read(report_r.get(), &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  if (got == static_cast<ssize_t>(sizeof exec_errno))
    r.exec_error = "cannot run '" + o_.command.front() + "': " + std::strerror(exec_errno);
  r.pid = pid;
  r.running = true;
  ranks_.ranks.push_back(std::move(r));
  // out_w/err_w close here: the child holds the only write ends, so EOF means it is done.
}

void Supervisor::wait_for_events(int timeout_ms) {
  std::vector<pollfd> fds;
  const int channel_ms = channel_.add_poll_fds(fds);
  if (channel_ms >= 0) timeout_ms = std::min(timeout_ms, channel_ms);
  fds.push_back({signals_.read_fd(), POLLIN, 0});
  std::vector<LineRelay*> relays(fds.size(), nullptr);
  for (auto& r : ranks_.ranks)
    for (auto& s : r.streams)
      if (s.open()) {
        fds.push_back({s.fd(), POLLIN, 0});
        relays.push_back(&s);
      }
  const int n = ::poll(fds.data(), fds.size(), timeout_ms);
  if (n < 0 && errno != EINTR) throw LaunchError(std::string("poll failed: ") + std::strerror(errno));
  for (size_t i = 0; n > 0 && i < fds.size(); ++i)
    if (fds[i].revents != 0 && relays[i]) relays[i]->pump();
  for (const auto& e : channel_.service()) on_job_event(e);
  for (const auto& line : channel_.take_notices()) say(line);
}

void Supervisor::publish(JobEvent::Kind kind, const std::string& text) {
  const JobEvent e{kind, o_.node_rank, unix_ms_now(), text};
  verdict_.add(e);
  channel_.publish(e);
}

void Supervisor::on_job_event(const JobEvent& e) {
  verdict_.add(e);
  // NOTE [restarts across nodes]: a launcher that was told to stop, or that is
  // gone, will not be in the next attempt.
  if (e.kind == JobEvent::Kind::kLost) lost_nodes_.insert(e.node);
  if (e.kind == JobEvent::Kind::kFailed && e.text.rfind(kStoppedByLauncher, 0) == 0) remote_stopped_ = true;
  if (remote_end_.empty() && (e.kind == JobEvent::Kind::kLost ||
                              (e.kind == JobEvent::Kind::kFailed && e.text.rfind(kStoppedByLauncher, 0) == 0)))
    remote_end_ = e.kind == JobEvent::Kind::kLost ? e.text : "node " + std::to_string(e.node) + ": " + e.text;
  if (e.kind == JobEvent::Kind::kProgress) {
    sched::ProgressRecord rec;
    if (sched::parse_record(e.text, rec)) remote_progress_.push_back(rec);
    return;
  }
  const std::string who = "node " + std::to_string(e.node);
  if (e.kind == JobEvent::Kind::kStopped) say(who + " reports: " + e.text);
  if (e.kind != JobEvent::Kind::kFailed && e.kind != JobEvent::Kind::kLost) return;
  if (exit_code_) return;  // this node is already stopping for a cause of its own
  const int running = ranks_.running_count();
  say((e.kind == JobEvent::Kind::kLost ? e.text : who + " reports: " + e.text) + "; stopping the " +
      std::to_string(running) + " rank(s) on this node");
  exit_code_ = e.kind == JobEvent::Kind::kFailed ? remote_failure_status(e.text) : 1;
  failed_at_ = Clock::now();
  stop_all(SIGTERM);
}

void Supervisor::report_job_verdict() {
  if (o_.nnodes <= 1) return;
  // Where this node's ranks stopped, for the other nodes' diagnosis of a failure.
  if (exit_code_)
    for (const auto& rec : sched::read_progress_dir(o_.progress_dir))
      publish(JobEvent::Kind::kProgress, sched::format_record(rec));
  publish(JobEvent::Kind::kDone, "exit status " + std::to_string(exit_code_.value_or(0)));
  if (!exit_code_) return;
  // The other launchers' reports may still be on their way: wait briefly.
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  while (!verdict_.silent_nodes(o_.node_rank).empty() && Clock::now() < deadline) wait_for_events(50);
  std::string line = "the job's first failure: " + (verdict_.failed() ? verdict_.describe() : "none reported");
  const auto silent = verdict_.silent_nodes(o_.node_rank);
  if (!silent.empty()) {
    line += " (no word from the launcher of node(s)";
    for (int n : silent) line += " " + std::to_string(n);
    line += ")";
  }
  say(line);
}

void Supervisor::stop_all(int sig) {
  if (!stopping_) {
    stopping_ = true;
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(o_.grace_seconds));
  }
  ranks_.signal_running(sig);
}

void Supervisor::handle_signals() {
  for (int sig : signals_.drain()) {
    if (sig != SIGINT && sig != SIGTERM) continue;  // SIGCHLD only wakes the loop
    const int running = ranks_.running_count();
    if (stopping_) {
      // A second interrupt means "now": skip the rest of the grace period.
      say("received " + signal_name(sig) + " again; killing " + std::to_string(running) + " rank(s)");
      ranks_.signal_running(SIGKILL);
      killed_ = true;
      continue;
    }
    say("received " + signal_name(sig) + "; forwarding it to " + std::to_string(running) + " rank(s)");
    interrupted_ = true;
    if (!exit_code_) {
      exit_code_ = 128 + sig;
      publish(JobEvent::Kind::kFailed, kStoppedByLauncher + std::string(" of node ") + std::to_string(o_.node_rank) +
                                           " received " + signal_name(sig) + " and stopped its ranks");
    }
    stop_all(sig);
  }
}

void Supervisor::on_failure(Rank& r) {
  // Print the rank's last words (already in its pipes) before the verdict.
  for (auto& s : r.streams)
    while (s.open() && s.pump()) {
    }
  const int others = ranks_.running_count();
  const std::string how =
      r.exec_error.empty() ? describe_wait_status(r.status) : "could not be started (" + r.exec_error + ")";
  const std::string what = who(r) + " " + how;
  std::string notes;
  // A rank that left early with status 0 is no failure by itself, but its
  // peers then time out waiting for it: name it, it is the likely cause.
  auto ago = [&](Clock::time_point then) {
    char text[64];
    std::snprintf(text, sizeof text, "%.1f s", std::chrono::duration<double>(r.ended - then).count());
    return std::string(text);
  };
  for (const auto& e : ranks_.ranks) {
    if (&e == &r) continue;
    if (!e.running && WIFEXITED(e.status) && WEXITSTATUS(e.status) == 0)
      notes += "; rank " + std::to_string(e.rank) + " had exited with status 0 " + ago(e.ended) + " earlier";
    else if (e.running && e.stop_signal != 0)
      notes += "; rank " + std::to_string(e.rank) + " had been stopped by " + signal_name(e.stop_signal) + " " +
             ago(e.stopped_at) + " earlier";
  }
  const std::string msg = what + (others > 0 ? "; stopping the other " + std::to_string(others) +
                                                   (others == 1 ? " rank" : " ranks")
                                             : "") + notes;
  say(msg);
  publish(JobEvent::Kind::kFailed, what + notes);
  // A command that cannot be started (no such program, not executable) is the user's mistake:
  // exit 2 (NOTE [exit statuses]), not the shell's 127, which a program may also exit with.
  exit_code_ = r.exec_error.empty() ? exit_code_of(r.status) : 2;
  failed_at_ = r.ended;
  first_failure_ = {r.rank, how};
  stop_all(SIGTERM);
}

void Supervisor::reap() {
  for (auto& r : ranks_.ranks) {
    if (!r.running) continue;
    int status = 0;
    const pid_t got = ::waitpid(r.pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (got == 0 || (got < 0 && errno == EINTR)) continue;
    if (got == r.pid && WIFCONTINUED(status)) {
      r.stop_signal = 0;
      continue;
    }
    if (got == r.pid && WIFSTOPPED(status)) {
      // Not a failure (it may be continued), but a stopped rank stalls every
      // collective it is part of: say so, and name it when the others fail.
      r.stop_signal = WSTOPSIG(status);
      r.stopped_at = Clock::now();
      const std::string what = who(r) + " was stopped by signal " + std::to_string(r.stop_signal) + " (" +
                               signal_name(r.stop_signal) + ")";
      say(what + "; its peers will stall until it is continued");
      publish(JobEvent::Kind::kStopped, what);
      continue;
    }
    assert(got == r.pid || errno == ECHILD);
    r.running = false;
    r.status = got == r.pid ? status : 0;
    r.ended = Clock::now();
    const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (failed && !exit_code_) on_failure(r);  // later deaths are consequences, not causes
    if (!failed)  // the other nodes hear of it; locally it feeds the diagnosis
      publish(JobEvent::Kind::kExited0, who(r) + " exited with status 0");
  }
}

void Supervisor::drain_outputs(Clock::duration budget) {
  // A rank's descendants may hold its pipes open after it exits; wait for them
  // only briefly, then RankSet's destructor kills its group.
  const auto deadline = Clock::now() + budget;
  auto any_open = [&] {
    for (auto& r : ranks_.ranks)
      for (auto& s : r.streams)
        if (s.open()) return true;
    return false;
  };
  while (any_open() && Clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    wait_for_events(static_cast<int>(std::max<long long>(1, left.count())));
  }
  for (auto& r : ranks_.ranks)
    for (auto& s : r.streams) s.close_and_flush();
}

void Supervisor::check_caught_up() {
  if (!ledger_ || !ledger_->catching_up() || Clock::now() < next_look_) return;
  next_look_ = Clock::now() + std::chrono::milliseconds(200);
  for (const auto& rec : sched::read_progress_dir(o_.progress_dir))
    if (rec.step > ledger_->catch_up_target()) {
      ledger_->caught_up(std::chrono::duration<double>(Clock::now() - epoch_).count());
      return;
    }
}

int Supervisor::run() {
  for (int local = 0; local < o_.nproc_per_node; ++local) start_rank(local);
  if (held_) held_->close();  // rank 0 holds the port now (NOTE [held store port])
  while (ranks_.running_count() > 0) {
    int timeout_ms = 1000;  // a safety net; SIGCHLD normally wakes the loop
    if (stopping_ && !killed_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_deadline_ - Clock::now());
      timeout_ms = static_cast<int>(std::clamp<long long>(left.count(), 0, 1000));
    }
    wait_for_events(timeout_ms);
    handle_signals();
    reap();
    check_caught_up();
    if (stopping_ && !killed_ && Clock::now() >= kill_deadline_ && ranks_.running_count() > 0) {
      say("grace period over; killing " + std::to_string(ranks_.running_count()) + " rank(s) with SIGKILL");
      ranks_.signal_running(SIGKILL);
      killed_ = true;
    }
  }
  drain_outputs(std::chrono::milliseconds(200));
  report_job_verdict();
  return exit_code_.value_or(0);
}

}  // namespace

namespace {

// A temporary progress directory, removed with its records on destruction
// (RAII); a directory the caller named is left alone.
class ProgressDir {
 public:
  explicit ProgressDir(const std::string& given) : path_(given) {
    if (!path_.empty()) return;
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/trident-progress-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr)
      throw LaunchError("cannot create a progress directory " + templ + ": " + std::strerror(errno));
    path_ = templ;
    owned_ = true;
  }
  ~ProgressDir() {
    if (!owned_) return;
    clear();
    ::rmdir(path_.c_str());  // fails harmlessly if a rank left something else
  }
  // Removes the ranks' records and rank 0's resumed-step note (between attempts).
  void clear() const {
    for (const auto& r : sched::read_progress_dir(path_))
      ::unlink((path_ + "/rank" + std::to_string(r.rank) + ".txt").c_str());
    ::unlink((path_ + "/resumed-step").c_str());
    ::unlink((path_ + "/preempted").c_str());
  }
  // Rank 0's note of a preemption, "SIGTERM 12" (NOTE [preemption] in
  // framework/checkpointing.cpp), as "by SIGTERM, checkpoint at step 12".
  struct Preemption {
    std::string text;  // "by SIGTERM, checkpoint at step 12"
    int status = 0;    // 128 + the signal: what the ranks exit with (cmd_train)
  };
  std::optional<Preemption> preempted() const {
    FILE* f = std::fopen((path_ + "/preempted").c_str(), "r");
    if (!f) return std::nullopt;
    char sig[32] = {};
    long long step = -1;
    const bool ok = std::fscanf(f, "%31s %lld", sig, &step) == 2;
    std::fclose(f);
    if (!ok) return std::nullopt;
    const std::string name = sig;
    const int number = name == "SIGTERM" ? SIGTERM : name == "SIGUSR1" ? SIGUSR1 : 0;
    return Preemption{"by " + name + ", checkpoint at step " + std::to_string(step), number ? 128 + number : 1};
  }
  // Rank 0's resumed-step note (NOTE [resumed step for the launcher]), if written.
  std::optional<int64_t> resumed_step() const {
    FILE* f = std::fopen((path_ + "/resumed-step").c_str(), "r");
    if (!f) return std::nullopt;
    long long step = -1;
    const bool ok = std::fscanf(f, "%lld", &step) == 1 && step >= 0;
    std::fclose(f);
    return ok ? std::optional<int64_t>(step) : std::nullopt;
  }
  ProgressDir(const ProgressDir&) = delete;
  ProgressDir& operator=(const ProgressDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

void say_launch(const std::string& msg) {
  const std::string line = "trident launch: " + msg + "\n";
  write_all(STDERR_FILENO, line.data(), line.size());
}

// Where every rank stood when the job failed: who waits on whom, or who died.
void print_diagnosis(const Supervisor& supervisor, const std::string& progress_dir) {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch()).count();
  auto records = sched::read_progress_dir(progress_dir);
  records.insert(records.end(), supervisor.remote_progress().begin(), supervisor.remote_progress().end());
  std::istringstream lines(diagnose(records, supervisor.first_failure(), now, supervisor.early_exits()));
  for (std::string line; std::getline(lines, line);) say_launch("diagnosis: " + line);
}

// Steps the job had completed: the furthest rank's step, minus one unless its
// record says it had finished that step ("done").
int64_t steps_completed(const std::string& progress_dir) {
  int64_t most = -1;
  for (const auto& rec : sched::read_progress_dir(progress_dir))
    most = std::max(most, rec.state == "done" ? rec.step : rec.step - 1);
  return most;
}

}  // namespace

// NOTE [restarts across nodes]
// With --max-restarts every node's launcher decides alone, from what it saw,
// whether to start the job again, and all decide alike: a failure anywhere
// stops every node's ranks (NOTE [job channel]), so every node ends the attempt
// with a non-zero status and counts the same attempts. What only some nodes
// could see is made common: a preempted job leaves its note in every node's
// progress directory (NOTE [preemption]), and a launcher that was signalled,
// or that is gone, is announced on the channel (remote_end: no node restarts
// without it). Attempt k meets on --master-port + 2k and the launchers'
// channel on its port + 2k, so a launcher or rank still finishing attempt k
// cannot be reached by one already starting k + 1: a node that finishes early
// waits at the next ports until the others arrive (the rendezvous timeout).
// NOTE [shrinking]
// With --min-nodes M, a failure in which other nodes' launchers went away
// (kLost on the channel: the node died, or its launcher was killed) restarts
// on the nodes left, when at least M are left and node 0 (the rendezvous
// host) is one of them: node ranks are renumbered in their old order and
// WORLD_SIZE shrinks; a launcher told to stop still ends the job. The
// trainer derives dp from WORLD_SIZE (parallel.dp = -1) and keeps
// training.global_batch_size by accumulating more micro-batches; the resumed
// checkpoint is resharded as on any layout change. Every survivor learns of
// the lost nodes through node 0, which forwards each kLost (NOTE [job
// channel]); should two survivors disagree, the next attempt's rendezvous
// fails naming the WORLD_SIZE mismatch and counts as a failed attempt. Tested
// with two nodes (the second one gone).
int launch(const LaunchOptions& options) {
  check_launch_options(options);
  ProgressDir dir(options.progress_dir);
  LaunchOptions o = options;
  o.progress_dir = dir.path();
  RestartLedger ledger;
  const auto epoch = Clock::now();
  auto since_epoch = [&](Clock::time_point t) { return std::chrono::duration<double>(t - epoch).count(); };
  for (int attempt = 0;; ++attempt) {
    o.restart = attempt;
    // NOTE [held store port]
    HeldPort held = options.master_port == 0 ? hold_free_port_for_launch() : HeldPort();
    const int port = options.master_port == 0 ? held.port() : attempt_master_port(o);
    Supervisor supervisor(o, port, &held);
    if (attempt > 0) {
      ledger.restarted(since_epoch(Clock::now()));
      supervisor.watch(&ledger, epoch);
    }
    int code = supervisor.run();
    ledger.ended(since_epoch(Clock::now()));
    if (attempt > 0)
      if (const auto step = dir.resumed_step()) ledger.resumed(*step);
    // A preempted job saved its state and stopped as asked: no failure, no restart.
    const auto preempted = dir.preempted();
    // Every node exits as its ranks did, also one whose ranks the channel stopped first.
    if (preempted) code = preempted->status;
    if (preempted) say_launch("preempted " + preempted->text + "; exit status " + std::to_string(code));
    if (code != 0 && !preempted) print_diagnosis(supervisor, o.progress_dir);
    const bool remote_end = !supervisor.remote_end().empty();
    const bool may_restart = code != 0 && !preempted && !supervisor.interrupted() && o.max_restarts > attempt;
    const std::set<int> lost = supervisor.lost_nodes();
    const int left = o.nnodes - static_cast<int>(lost.size());
    // NOTE [shrinking]
    const bool shrink = may_restart && remote_end && o.min_nodes > 0 && !supervisor.remote_stopped() &&
                        !lost.empty() && lost.count(0) == 0 && left >= o.min_nodes;
    const bool give_up =
        code == 0 || preempted || supervisor.interrupted() || (remote_end && !shrink) || attempt == o.max_restarts;
    if (may_restart && remote_end && !shrink) {
      std::string why;
      if (o.min_nodes > 0 && !supervisor.remote_stopped() && lost.count(0))
        why = " (--min-nodes: node 0, which hosts the rendezvous, is gone)";
      else if (o.min_nodes > 0 && !supervisor.remote_stopped() && !lost.empty())
        why = " (--min-nodes " + std::to_string(o.min_nodes) + ": " + std::to_string(left) + " node(s) left)";
      say_launch("not restarting: " + supervisor.remote_end() + why);
    }
    if (code != 0 && !preempted && !supervisor.interrupted()) {
      const FirstFailure f = supervisor.first_failure();
      const std::string what = f.rank >= 0 ? "rank " + std::to_string(f.rank) + " " + f.how
                                           : "exit status " + std::to_string(code);
      ledger.failed(attempt, what, steps_completed(o.progress_dir), since_epoch(supervisor.failed_at()));
    }
    if (give_up) {
      if (o.max_restarts > 0 && code != 0 && !preempted && !supervisor.interrupted() && !remote_end)
        say_launch("giving up after " + std::to_string(attempt) + " restart(s) (--max-restarts " +
                   std::to_string(o.max_restarts) + "); every failure: " + ledger.failures());
      if (ledger.restarts() > 0)
        for (const std::string& line : ledger.report(code == 0)) say_launch(line);
      return code;
    }
    dir.clear();
    if (shrink) {
      std::string gone;
      for (int n : lost) gone += (gone.empty() ? "" : ", ") + std::to_string(n);
      const int below = static_cast<int>(std::count_if(lost.begin(), lost.end(), [&](int n) { return n < o.node_rank; }));
      say_launch("node(s) " + gone + " gone: going on with " + std::to_string(left) + " of " +
                 std::to_string(o.nnodes) + " nodes (--min-nodes " + std::to_string(o.min_nodes) + "), this one as node " +
                 std::to_string(o.node_rank - below) + ", WORLD_SIZE " + std::to_string(o.nnodes * o.nproc_per_node) +
                 " -> " + std::to_string(left * o.nproc_per_node));
      o.node_rank -= below;
      o.nnodes = left;
    }
    say_launch("restarting the job (restart " + std::to_string(attempt + 1) + " of at most " +
               std::to_string(o.max_restarts) + ") after " + ledger.last_failure());
  }
}

}  // namespace trident::launch
