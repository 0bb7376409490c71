// Allocator of the action lists (ActionList in action.h): small lists come
// from operator new, large ones (from 64 KB; a planner's p=1024, m=8192, v=4
// lists are 0.5 MB each, 0.5 GB in all) from shared arenas of transparent
// huge pages, mapped in one call. Thread-safe. NOTE [huge pages] in
// big_alloc.cpp says why.
#pragma once

#include <cstddef>
#include <new>

namespace trident::sched::detail {

void* big_allocate(size_t bytes);        // throws std::bad_alloc
void big_free(void* p, size_t bytes);    // bytes as given to big_allocate

template <typename T>
struct BigAllocator {
  using value_type = T;
  BigAllocator() noexcept = default;
  template <typename U>
  BigAllocator(const BigAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(big_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { big_free(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const BigAllocator<U>&) const noexcept { return true; }
  template <typename U>
  bool operator!=(const BigAllocator<U>&) const noexcept { return false; }
};

}  // namespace trident::sched::detail
