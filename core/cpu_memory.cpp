// Counting CPU allocator: see cpu_memory.h.
#include "core/cpu_memory.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include <c10/core/CPUAllocator.h>

namespace trident {
namespace {

std::atomic<int64_t> g_live{0};
std::atomic<bool> g_installed{false};

// Each allocation carries the wrapped DataPtr and its size, so freeing it
// releases the original and subtracts the size.
struct Allocation {
  c10::DataPtr inner;
  size_t bytes;
};

// Allocations whose DataPtr context is their data (what c10's raw_allocate,
// used by oneDNN's bf16 kernels, asserts): the base allocator's raw deleter
// frees them, their sizes are kept here.
std::mutex g_raw_mutex;
std::unordered_map<void*, size_t>& raw_sizes() {
  static std::unordered_map<void*, size_t> sizes;
  return sizes;
}
c10::DeleterFnPtr g_base_raw_deleter = nullptr;

void release_raw(void* p) {
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_raw_mutex);
    auto it = raw_sizes().find(p);
    if (it != raw_sizes().end()) bytes = it->second, raw_sizes().erase(it);
  }
  g_live.fetch_sub(static_cast<int64_t>(bytes));
  g_base_raw_deleter(p);
}

void release(void* ctx) {
  auto* a = static_cast<Allocation*>(ctx);
  g_live.fetch_sub(static_cast<int64_t>(a->bytes));
  delete a;
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    g_live.fetch_add(static_cast<int64_t>(n));
    if (g_base_raw_deleter && inner.get_context() == data && inner.get_deleter() == g_base_raw_deleter) {
      {
        std::lock_guard<std::mutex> lock(g_raw_mutex);
        raw_sizes()[data] = n;
      }
      inner.release_context();
      return {data, data, &release_raw, device};
    }
    return {data, new Allocation{std::move(inner), n}, &release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return g_base_raw_deleter ? &release_raw : nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

}  // namespace

void install_cpu_memory_meter() {
  if (g_installed.exchange(true)) return;
  g_base_raw_deleter = c10::GetCPUAllocator()->raw_deleter();
  static CountingAllocator counting(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&counting, /*priority=*/1);
}

int64_t live_cpu_bytes() { return g_installed.load() ? g_live.load() : -1; }

}  // namespace trident
