// TRIDENT_FAULT: see fault.h.
#include "launch/fault.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "launch/launcher.h"

namespace trident::launch {

namespace {

const char* const kFormat = "expected TRIDENT_FAULT=\"rank=R,step=S,kind=kill|stall|exit0[,attempt=A]\"";

int parse_count(const std::string& key, const std::string& value) {
  size_t used = 0;
  int v = -1;
  try {
    v = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (value.empty() || used != value.size() || v < 0)
    throw LaunchError("TRIDENT_FAULT: " + key + "='" + value + "' is not a non-negative integer; " + kFormat);
  return v;
}

void say(const std::string& msg) {
  const std::string line = "TRIDENT_FAULT: " + msg + "\n";
  const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  (void)n;
}

// Lines in the file, counted only once it was written after `since`: a
// metrics.jsonl left by an earlier run in the same directory must not fire
// the fault before rank 0 has truncated it.
long long lines_written_since(const std::string& path, const timespec& since) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  if (st.st_mtim.tv_sec < since.tv_sec || (st.st_mtim.tv_sec == since.tv_sec && st.st_mtim.tv_nsec < since.tv_nsec))
    return 0;
  std::ifstream in(path);
  long long n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

}  // namespace

FaultSpec parse_fault(const std::string& text) {
  FaultSpec spec;
  bool has_rank = false, has_step = false, has_kind = false;
  size_t i = 0;
  while (i <= text.size()) {
    const size_t comma = std::min(text.find(',', i), text.size());
    const std::string item = text.substr(i, comma - i);
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw LaunchError("TRIDENT_FAULT: '" + item + "' is not key=value; " + kFormat);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "rank") {
      spec.rank = parse_count(key, value);
      has_rank = true;
    } else if (key == "step") {
      spec.step = parse_count(key, value);
      has_step = true;
    } else if (key == "attempt") {
      spec.attempt = parse_count(key, value);
    } else if (key == "kind") {
      if (value != "kill" && value != "stall" && value != "exit0")
        throw LaunchError("TRIDENT_FAULT: kind='" + value + "' is not kill, stall or exit0");
      spec.kind = value;
      has_kind = true;
    } else {
      throw LaunchError("TRIDENT_FAULT: unknown key '" + key + "'; " + kFormat);
    }
    i = comma + 1;
  }
  if (!has_rank || !has_step || !has_kind)
    throw LaunchError(std::string("TRIDENT_FAULT='") + text + "' lacks " +
                      (!has_rank ? "rank" : !has_step ? "step" : "kind") + "; " + kFormat);
  return spec;
}

FaultInjector::FaultInjector(int rank, int attempt, const std::string& metrics_dir, long long steps) {
  const char* text = std::getenv("TRIDENT_FAULT");
  if (!text || !*text) return;
  const FaultSpec spec = parse_fault(text);
  if (spec.step >= steps)
    throw LaunchError("TRIDENT_FAULT: step=" + std::to_string(spec.step) + " is not below training.steps = " +
                      std::to_string(steps) + ", so the fault would never fire");
  if (spec.rank != rank || spec.attempt != attempt) return;
  say("armed on rank " + std::to_string(rank) + ": " + spec.kind + " after step " + std::to_string(spec.step));
  thread_ = std::thread(&FaultInjector::watch, this, spec, metrics_dir + "/metrics.jsonl");
}

FaultInjector::~FaultInjector() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void FaultInjector::watch(FaultSpec spec, std::string metrics_path) {
  timespec armed{};
  ::clock_gettime(CLOCK_REALTIME, &armed);
  while (!stop_) {
    if (spec.step == 0 || lines_written_since(metrics_path, armed) >= spec.step) {
      say("rank " + std::to_string(spec.rank) + " injects " + spec.kind + " after step " + std::to_string(spec.step));
      if (spec.kind == "kill") ::raise(SIGKILL);
      if (spec.kind == "stall") ::raise(SIGSTOP);  // the whole process freezes, sockets open: a hang
      if (spec.kind == "exit0") ::_exit(0);        // deliberately skips every destructor, like a crash
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace trident::launch
