// Progress records and fault injection: see progress.h.
#include "schedules/progress.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace trident::sched {
namespace {

// A record never grows past this, so overwriting at offset 0 with one
// pwrite() always replaces the whole previous record (padded with spaces).
constexpr size_t kRecordBytes = 160;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string format_record(const ProgressRecord& r) {
  std::ostringstream s;
  s << "rank " << r.rank << " t " << r.time_ms << " step " << r.step << " i " << r.index << " " << r.state << " "
    << r.token << " peer " << r.peer;
  return s.str();
}

bool parse_record(const std::string& line, ProgressRecord& r) {
  std::istringstream s(line);
  std::string k1, k2, k3, k4, k5;
  s >> k1 >> r.rank >> k2 >> r.time_ms >> k3 >> r.step >> k4 >> r.index >> r.state >> r.token >> k5 >> r.peer;
  return s && k1 == "rank" && k2 == "t" && k3 == "step" && k4 == "i" && k5 == "peer";
}

Fault parse_fault(const std::string& spec) {
  Fault f;
  const auto a = spec.find(':'), b = spec.rfind(':');
  if (a == std::string::npos || b == a)
    throw std::runtime_error("TRIDENT_FAULT_ACTION='" + spec + "': expected RANK:TOKEN:MODE, e.g. 3:F5:stall");
  try {
    f.rank = std::stoi(spec.substr(0, a));
  } catch (const std::exception&) {
    throw std::runtime_error("TRIDENT_FAULT_ACTION='" + spec + "': '" + spec.substr(0, a) + "' is not a rank number");
  }
  f.token = spec.substr(a + 1, b - a - 1);
  f.mode = spec.substr(b + 1);
  if (f.mode != "stall" && f.mode != "exit")
    throw std::runtime_error("TRIDENT_FAULT_ACTION='" + spec + "': mode '" + f.mode + "' is not stall or exit");
  return f;
}

Progress::Progress(int global_rank) : rank_(global_rank) {
  if (const char* f = std::getenv("TRIDENT_FAULT_ACTION"); f && *f) fault_ = parse_fault(f);
  const char* dir = std::getenv("TRIDENT_PROGRESS_DIR");
  if (!dir || !*dir) return;
  const std::string path = std::string(dir) + "/rank" + std::to_string(rank_) + ".txt";
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("TRIDENT_PROGRESS_DIR: cannot write " + path);
}

Progress::~Progress() {
  if (fd_ >= 0) ::close(fd_);
}

void Progress::write(int index, const std::string& token, const char* state, int peer) {
  if (fd_ < 0) return;
  std::string line = format_record({rank_, now_ms(), step_, index, token, state, peer});
  line.resize(kRecordBytes - 1, ' ');
  line += '\n';
  // Best effort: a report that cannot be written must not stop training.
  [[maybe_unused]] ssize_t n = ::pwrite(fd_, line.data(), line.size(), 0);
}

void Progress::action(int index, const std::string& token) {
  write(index, token, "run", -1);
  if (fault_.rank != rank_ || token != fault_.token) return;
  fault_.rank = -1;  // fire once
  if (fault_.mode == "exit") std::_Exit(86);  // a crash: no unwinding, no goodbye
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // a hang, until the launcher kills us
}

void Progress::wait(int index, const std::string& token, int peer) { write(index, token, "wait", peer); }
void Progress::phase(const std::string& name) { write(-1, name, "phase", -1); }
void Progress::done() { write(-1, "-", "done", -1); }

std::vector<ProgressRecord> read_progress_dir(const std::string& dir) {
  std::vector<ProgressRecord> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("rank", 0) != 0) continue;
    std::ifstream f(dir + "/" + name);
    std::string line;
    ProgressRecord r;
    if (std::getline(f, line) && parse_record(line, r)) out.push_back(r);
  }
  ::closedir(d);
  return out;
}

}  // namespace trident::sched
