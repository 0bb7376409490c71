// NOTE [huge pages] Generating p=1024, m=8192, v=4 writes 0.5 GB of actions
// into 1024 lists of 0.5 MB. Each such list is its own 4 KB-page mapping when
// it comes from malloc, and on the virtual machines we measure on a 4 KB page
// is expensive twice: once when first written (a fault) and again on every
// TLB miss. Writing 0.5 GB measured 2.7 s in fresh 4 KB pages, 1.1 s even
// when populated in advance, and 0.1 s in populated 2 MB pages (a test
// program on the 2-core VM, 2026-12-01; schedules/README.md "At scale" has
// the end-to-end figures). So large lists are carved out of
// 64 MB arenas, 2 MB aligned, marked for transparent huge pages and populated
// one allocation at a time; an arena is unmapped when its last list is freed.
// Small lists (every schedule a training run uses) never come here.
#include "schedules/big_alloc.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace trident::sched::detail {

namespace {

constexpr size_t kSmall = 64u << 10;  // below this: operator new
constexpr size_t kHuge = 2u << 20;     // transparent huge page size
constexpr size_t kArena = 64u << 20;

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

#if defined(__linux__)
struct Arena {
  char* base;
  size_t size, used;
  size_t live;  // allocations not yet freed
};

struct Arenas {
  std::mutex mu;
  std::vector<Arena> list;  // the last one is where new allocations go

  static char* map(size_t size) {  // 2 MB aligned, huge pages where the kernel allows
    void* p = mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t raw = reinterpret_cast<uintptr_t>(p), aligned = round_up(raw, kHuge);
    if (aligned > raw) munmap(p, aligned - raw);
    if (raw + kHuge > aligned) munmap(reinterpret_cast<void*>(aligned + size), raw + kHuge - aligned);
    madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // a hint: ignored where THP is off
    return reinterpret_cast<char*>(aligned);
  }

  void* allocate(size_t bytes) {
    bytes = round_up(bytes, 64);
    std::lock_guard<std::mutex> lock(mu);
    if (list.empty() || list.back().size - list.back().used < bytes) {
      const size_t size = std::max(kArena, round_up(bytes, kHuge));
      list.push_back({map(size), size, 0, 0});
    }
    Arena& a = list.back();
    char* p = a.base + a.used;
    a.used += bytes;
    ++a.live;
#if defined(MADV_POPULATE_WRITE)
    // Map the pages now, in one call, rather than one fault per page on first write.
    const uintptr_t page = 4096, lo = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
    const uintptr_t hi = round_up(reinterpret_cast<uintptr_t>(p) + bytes, page);
    madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE);  // a hint: errors ignored
#endif
    return p;
  }

  void free(void* p) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < list.size(); ++i) {
      Arena& a = list[i];
      if (static_cast<char*>(p) < a.base || static_cast<char*>(p) >= a.base + a.size) continue;
      if (--a.live == 0) {
        munmap(a.base, a.size);
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
      }
      return;
    }
    std::abort();  // not ours: a bug
  }
};

Arenas& arenas() {
  static Arenas* a = new Arenas;  // never destroyed: lists in static objects may outlive it
  return *a;
}
#endif

}  // namespace

void* big_allocate(size_t bytes) {
#if defined(__linux__)
  if (bytes >= kSmall) return arenas().allocate(bytes);
#endif
  return ::operator new(bytes);
}

void big_free(void* p, size_t bytes) {
  if (!p) return;
#if defined(__linux__)
  if (bytes >= kSmall) return arenas().free(p);
#endif
  ::operator delete(p);
}

}  // namespace trident::sched::detail
