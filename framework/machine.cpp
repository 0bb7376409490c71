// The machine the trainer runs on: see machine.h.
#include "framework/machine.h"

#include <malloc.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include <ATen/ATen.h>

#include "parallel/backend.h"

namespace trident {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The MFU denominator. CPU: one thread's fp32 1024^3 matmul rate, the best
// of 8 single timings (other load on the machine only ever slows a timing
// down, so the fastest is the estimate it cannot deflate: a single timing
// under load put MFU above 100 %). CUDA: the device's matmul rate in the
// compute dtype (bf16 or fp32) on 8192^3 operands of random data, 10 matmuls
// timed between device synchronizations.
double measure_matmul_peak(const c10::Device& device, at::ScalarType dtype) {
  const bool cuda = device.is_cuda();
  const int64_t n = cuda ? 8192 : 1024;
  const auto opts = at::TensorOptions().dtype(cuda ? dtype : at::kFloat).device(device);
  at::Tensor a = at::randn({n, n}, opts), b = at::randn({n, n}, opts);
  for (int i = 0; i < (cuda ? 3 : 1); ++i) at::mm(a, b);  // warm-up (cuBLAS handles and heuristics)
  synchronize(device);
  const int reps = cuda ? 10 : 1, timings = cuda ? 1 : 8;
  double best = 0;
  for (int k = 0; k < timings; ++k) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) at::mm(a, b);
    synchronize(device);
    best = std::max(best, 2.0 * n * n * n * reps / seconds_since(t0));
  }
  return best;
}

}  // namespace

// NOTE [malloc and large tensors]: glibc serves every block above its mmap
// threshold (at most 32 MB) with a fresh mmap and unmaps it on free, so a
// logits-sized tensor (micro-batch x seq x vocab, ~100 MB for GPT-2's vocab) is
// page-faulted and zeroed by the kernel on every micro-batch: measured here,
// the LM head's matmul ran at 26 GFLOP/s instead of 48. Keeping freed memory
// in the process (as PyTorch's caching allocators do on GPUs) removes that.
// It changes no arithmetic.
void keep_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

HostResources read_host_resources() {
  HostResources h;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    int64_t kib = 0;
    if (key == "MemTotal:" && meminfo >> kib) h.mem_bytes = kib * 1024;
    if (h.mem_bytes) break;
    meminfo.ignore(1 << 10, '\n');
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  h.cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : std::thread::hardware_concurrency();
  return h;
}

// The process's peak resident set so far (Linux reports ru_maxrss in KiB): the
// host memory a CPU run peaks at. A CUDA run's device memory is not in it.
int64_t peak_resident_bytes() {
  struct rusage u {};
  if (getrusage(RUSAGE_SELF, &u) != 0) return -1;
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

// Peak for MFU: given, or measured by rank 0 alone while the others wait.
// CPU: one thread's matmul rate times the devices (cores) the ranks share.
// CUDA: one device's matmul rate in the compute dtype (every rank has one).
double peak_flops_per_rank(const Config& c, const ProcessGroups& pgs, const c10::Device& device) {
  if (c.training.peak_tflops > 0) return c.training.peak_tflops * 1e12;
  at::Tensor t = at::zeros({1}, at::kDouble);
  if (pgs.rank() == 0) t.fill_(measure_matmul_peak(device, c.training.precision == "bf16" ? at::kBFloat16 : at::kFloat));
  broadcast(pgs.world, t, 0);
  if (device.is_cuda()) return t.item<double>();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return t.item<double>() * static_cast<double>(std::min<int64_t>(pgs.world_size(), cores)) /
         static_cast<double>(pgs.world_size());
}

}  // namespace trident
