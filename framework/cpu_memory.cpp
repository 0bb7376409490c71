// Counting CPU allocator: see cpu_memory.h.
#include "framework/cpu_memory.h"

#include <atomic>

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

void release(void* ctx) {
  auto* a = static_cast<Allocation*>(ctx);
  g_live.fetch_sub(static_cast<int64_t>(a->bytes));
  delete a;
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) const override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    g_live.fetch_add(static_cast<int64_t>(n));
    return {data, new Allocation{std::move(inner), n}, &release, device};
  }

 private:
  c10::Allocator* base_;
};

}  // namespace

void install_cpu_memory_meter() {
  if (g_installed.exchange(true)) return;
  static CountingAllocator counting(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&counting, /*priority=*/1);
}

int64_t live_cpu_bytes() { return g_installed.load() ? g_live.load() : -1; }

}  // namespace trident
