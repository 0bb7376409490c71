// Crash-safe file writes: data goes to "<path>.tmp", is fsync'ed, then renamed
// over <path> and the directory fsync'ed, so a reader sees either the old file
// or the whole new one, never a torn one (NOTE [checkpoint atomicity] in
// checkpoint_store.h relies on this). Pure POSIX.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

// A file being written. Nothing appears at `path` until commit(); destroying
// an uncommitted AtomicFile removes its temp file (RAII).
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  // The temp file is "<path><tmp_suffix>": writers that may run at once (other
  // processes writing the same path) each give their own suffix.
  AtomicFile(std::string path, const std::string& tmp_suffix);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends; throws naming the file on a short write. Every 8 MB it asks the
  // kernel to start writing back (Linux), so the disk works while the caller
  // prepares the next piece and commit()'s fsync has little left to do.
  void write(const void* data, size_t n);
  uint64_t size() const { return size_; }
  void commit();  // fsync, rename to path (the temp file removed if that fails), fsync the directory
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t flushed_ = 0;  // bytes whose writeback has been started
};

// The whole of `bytes` as the file `path`, atomically.
void write_file_atomic(const std::string& path, const std::string& bytes);
// fsync a directory so renames inside it are durable.
void fsync_dir(const std::string& dir);
// Whole file as bytes; throws std::runtime_error naming the file.
std::string read_file(const std::string& path);

}  // namespace trident
