// Temp file + fsync + rename: see atomic_file.h.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace trident {
namespace {
[[noreturn]] void sys_fail(const std::string& what, const std::string& path) {
  throw std::runtime_error("cannot " + what + " " + path + ": " + std::strerror(errno));
}
}  // namespace

AtomicFile::AtomicFile(std::string path) : AtomicFile(std::move(path), ".tmp") {}

AtomicFile::AtomicFile(std::string path, const std::string& tmp_suffix)
    : path_(std::move(path)), tmp_(path_ + tmp_suffix) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) sys_fail("create", tmp_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t n) {
  if (fd_ < 0) throw std::logic_error("AtomicFile::write after commit: " + path_);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) sys_fail("write", tmp_);
    p += w;
    n -= static_cast<size_t>(w);
    size_ += static_cast<uint64_t>(w);
  }
#ifdef __linux__
  constexpr uint64_t kWritebackChunk = 8 << 20;
  if (size_ - flushed_ >= kWritebackChunk) {
    // Only a hint: commit() still fsyncs everything, so an error here changes nothing.
    (void)::sync_file_range(fd_, static_cast<off64_t>(flushed_), static_cast<off64_t>(size_ - flushed_),
                            SYNC_FILE_RANGE_WRITE);
    flushed_ = size_;
  }
#endif
}

void AtomicFile::commit() {
  if (fd_ < 0) throw std::logic_error("AtomicFile::commit twice: " + path_);
  if (::fsync(fd_) != 0) sys_fail("fsync", tmp_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) sys_fail("close", tmp_);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());  // nothing of a failed write stays behind
    errno = e;
    sys_fail("rename into place", path_);
  }
  fsync_dir(std::filesystem::path(path_).parent_path().string());
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void fsync_dir(const std::string& dir) {
  const std::string d = dir.empty() ? "." : dir;
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) sys_fail("open directory", d);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) sys_fail("fsync directory", d);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read " + path);
  return os.str();
}

}  // namespace trident
