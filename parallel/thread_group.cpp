// A pipeline of threads: see thread_group.h.
#include "parallel/thread_group.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "parallel/backend.h"
#include "parallel/nccl_rules.h"

namespace trident {

namespace {

// NOTE [first collective]
// libtorch's flight recorder (on unless TORCH_FR_BUFFER_SIZE=0) adds a
// process group to one process-wide std::map at the group's first
// collective, before it takes its own lock. Ranks that are processes never
// share that map; ranks that are threads of one process do, and two of them
// making their first collectives at the same instant corrupt it (a SIGSEGV
// inside ProcessGroupGloo::enqueue in a CI run of the nccl-rules tests).
// So each rank's first collective, a barrier, is issued under one lock of
// this process, and no rank goes on before that barrier has completed, that
// is before every rank of the group has issued its own: after that the map
// is only read. (The ranks of one process are one group at a time here.)
void first_collective(const Group& g) {
  static std::mutex issuing;
  c10::intrusive_ptr<c10d::Work> first;
  {
    std::lock_guard<std::mutex> lock(issuing);
    first = g.pg->barrier(c10d::BarrierOptions{});
  }
  wait_work(g, first, "first barrier", -1);
}

// Rank `rank` of a loopback Gloo group `name` of `size` over `store` (no process group at size 1),
// on one intra-op thread.
Group local_member(const std::string& name, int size, int rank, std::chrono::milliseconds timeout,
                   const std::function<c10::intrusive_ptr<c10d::Store>()>& store, const std::string& backend = "gloo") {
  at::set_num_threads(1);
  Group g;
  g.name = name;
  for (int i = 0; i < size; ++i) g.members.push_back(i);
  g.rank = rank;
  g.timeout = timeout;
  if (size > 1) {
    g.pg = make_gloo(store(), rank, size, timeout, "127.0.0.1", "");
    first_collective(g);
  }
  if (size > 1 && backend == "nccl-rules") g.pg = make_nccl_rules(g.pg, rank, size, timeout);
  if (backend != "gloo" && backend != "nccl-rules")
    throw std::invalid_argument("run_thread_group: backend \"" + backend + "\": expected gloo or nccl-rules");
  return g;
}

}  // namespace

std::vector<std::string> run_thread_group(const std::string& name, int size, std::chrono::milliseconds timeout,
                                          const std::function<void(Group&)>& body, const std::string& backend) {
  const c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      try {
        Group g = local_member(name, size, rank, timeout, [&] { return store; }, backend);
        body(g);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<std::string> run_process_group(const std::string& name, int size, std::chrono::milliseconds timeout,
                                           const std::function<std::string(Group&)>& body) {
  std::string dir_template = (std::filesystem::temp_directory_path() / "trident-group-XXXXXX").string();
  if (!mkdtemp(dir_template.data())) throw std::runtime_error("run_process_group: cannot make a temporary directory");
  const std::filesystem::path dir(dir_template);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("run_process_group: fork failed");
    if (pid == 0) {  // the child: one rank; it leaves through _Exit, running no destructors of the parent's state
      int code = 0;
      try {
        Group g = local_member(name, size, rank, timeout, [&]() -> c10::intrusive_ptr<c10d::Store> {
          return c10::make_intrusive<c10d::FileStore>((dir / "store").string(), size);
        });
        const std::string out = body(g);
        std::ofstream(dir / ("rank-" + std::to_string(rank) + ".out")) << out;
      } catch (const std::exception& e) {
        std::ofstream(dir / ("rank-" + std::to_string(rank) + ".err")) << e.what();
        code = 1;
      }
      std::_Exit(code);
    }
    pids.push_back(pid);
  }
  // Every child ends within the timeout (its collectives are bounded by it) plus a margin; one that
  // does not is killed and named.
  std::string failed;
  const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(30);
  std::vector<bool> done(static_cast<size_t>(size), false);
  for (int left = size; left > 0;) {
    for (int rank = 0; rank < size; ++rank) {
      if (done[static_cast<size_t>(rank)]) continue;
      int status = 0;
      if (waitpid(pids[static_cast<size_t>(rank)], &status, WNOHANG) == 0) continue;
      done[static_cast<size_t>(rank)] = true, --left;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && failed.empty()) {
        const std::string err = read_all(dir / ("rank-" + std::to_string(rank) + ".err"));
        failed = "rank " + std::to_string(rank) + " of " + name + ": " +
                 (err.empty() ? std::string(WIFSIGNALED(status) ? "killed by a signal" : "exited without a result") : err);
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int rank = 0; rank < size; ++rank)
        if (!done[static_cast<size_t>(rank)]) {
          kill(pids[static_cast<size_t>(rank)], SIGKILL);
          waitpid(pids[static_cast<size_t>(rank)], nullptr, 0);
          if (failed.empty()) failed = "rank " + std::to_string(rank) + " of " + name + " did not finish in time";
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<std::string> out;
  for (int rank = 0; rank < size && failed.empty(); ++rank) out.push_back(read_all(dir / ("rank-" + std::to_string(rank) + ".out")));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!failed.empty()) throw std::runtime_error(failed);
  return out;
}

}  // namespace trident
