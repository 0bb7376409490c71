// The interface between parallel/backend.cpp and libtrident_cuda.so, the
// library that holds everything CUDA and NCCL (parallel/cuda_runtime.cpp).
//
// NOTE [CUDA on demand]
// Loading libtorch's CUDA libraries costs every process CPU time, page faults and
// resident memory (benchmarks/results/startup.txt, written by benchmarks/startup.sh),
// the test suite starts over a thousand such processes, and a CPU rank never uses them.
// So the programs link libtorch_cpu and c10 only, and libtrident_cuda.so (which links
// libtorch_cuda, c10_cuda, the CUDA runtime and NCCL) is loaded with dlopen before main
// runs (a static initializer in backend.cpp) where an NVIDIA driver is present
// (libcuda.so.1 loads), and not where it is absent. Where it loads, the process is the
// one that linked them: libtorch_cuda's static registrations (its kernels, the CUDA hooks
// that at::globalContext() asks for) run before any of Trident's code, as at link time.
// Where it does not, there is no CUDA device to use anyway (CUDA's runtime finds none
// without the driver), and cuda_device_count() is 0 as it was. It is one build still: the
// library is always built, tests/linkage/check_build.sh checks what it and trident-torch
// link, and tests/torch_unit/test_cuda_runtime.cpp loads it on the CPU machine too
// (load_cuda_runtime(true)).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace trident {

// Device timing on the current CUDA stream (NOTE [device time] in backend.h).
class CudaEventClock {
 public:
  virtual ~CudaEventClock() = default;
  // Forgets the events recorded so far and records the origin.
  virtual void begin() = 0;
  // Records an event after everything queued; returns the events recorded since begin() (origin included).
  virtual size_t record() = 0;
  // Waits for the last event; milliseconds from the origin to each later event.
  virtual std::vector<double> elapsed_ms() = 0;
};

class CudaRuntime {
 public:
  virtual ~CudaRuntime() = default;
  virtual int device_count() = 0;
  virtual void set_device(int index) = 0;
  virtual int64_t device_total_bytes(int index) = 0;
  virtual void synchronize() = 0;
  // "CUDA 13.0 build (runtime 13.0), NCCL 2.28.9, 1 CUDA device(s): NVIDIA H200"
  virtual std::string describe() = 0;
  virtual std::unique_ptr<CudaEventClock> make_clock() = 0;
  virtual c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                      int size, std::chrono::milliseconds timeout) = 0;
};

// libtrident_cuda.so's one entry point, looked up with dlsym.
using CudaRuntimeEntry = CudaRuntime* (*)();
constexpr const char* kCudaRuntimeEntry = "trident_cuda_runtime";
constexpr const char* kCudaRuntimeLibrary = "libtrident_cuda.so";

// The loaded CUDA runtime, or nullptr where libtrident_cuda.so was not loaded
// (no NVIDIA driver). `force` loads it even without a driver (the build's own
// check does); a library that cannot be loaded then throws, naming dlerror().
CudaRuntime* load_cuda_runtime(bool force = false);
// Why load_cuda_runtime() gave nullptr ("no NVIDIA driver (libcuda.so.1: ...)"), or "" when it loaded.
std::string cuda_runtime_absent_reason();
// Whether the load was decided before main (the static initializer ran), as NOTE [CUDA on demand] needs.
bool cuda_runtime_decided_before_main();

}  // namespace trident
