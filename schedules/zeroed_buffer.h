// Internal: memory helpers for schedules of 10^8 actions. ZeroedBuffer is a
// large zero-filled array for the simulator's per-(stage, micro-batch) tables. Fresh pages come zeroed from the kernel (no fill pass)
// and, on Linux, as transparent huge pages: at p=1024, m=8192, v=4 the tables
// are ~0.5 GB and 4 KB page faults would cost more than the simulation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace trident::sched::detail {

template <typename T>
class ZeroedBuffer {
 public:
  ZeroedBuffer() = default;
  explicit ZeroedBuffer(size_t n) : n_(n) {
    if (n == 0) return;
#if defined(__linux__)
    void* p = mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    madvise(p, bytes(), MADV_HUGEPAGE);  // a hint: ignored where THP is off
    data_ = static_cast<T*>(p);
#else
    data_ = static_cast<T*>(std::calloc(n, sizeof(T)));
    if (!data_) throw std::bad_alloc();
#endif
  }
  ZeroedBuffer(const ZeroedBuffer&) = delete;
  ZeroedBuffer& operator=(const ZeroedBuffer&) = delete;
  ZeroedBuffer(ZeroedBuffer&& o) noexcept : data_(o.data_), n_(o.n_) { o.data_ = nullptr, o.n_ = 0; }
  ZeroedBuffer& operator=(ZeroedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = o.data_, n_ = o.n_;
      o.data_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  ~ZeroedBuffer() { release(); }

  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  size_t size() const { return n_; }

 private:
  size_t bytes() const { return n_ * sizeof(T); }
  void release() {
    if (!data_) return;
#if defined(__linux__)
    munmap(data_, bytes());
#else
    std::free(data_);
#endif
    data_ = nullptr;
  }

  T* data_ = nullptr;
  size_t n_ = 0;
};

}  // namespace trident::sched::detail
