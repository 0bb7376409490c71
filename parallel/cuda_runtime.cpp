// libtrident_cuda.so (NOTE [CUDA on demand] in cuda_runtime.h): the only
// translation unit with CUDA and NCCL headers, built into a library of its own
// that links libtorch's CUDA libraries, the CUDA runtime and NCCL.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "parallel/cuda_runtime.h"

namespace trident {
namespace {

// "13.0" from CUDA's 13000 encoding.
std::string cuda_version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

class EventClock final : public CudaEventClock {
 public:
  void begin() override {
    used_ = 0;
    next().record();
  }
  size_t record() override {
    next().record();
    return used_;
  }
  std::vector<double> elapsed_ms() override {
    std::vector<double> out;
    if (used_ < 2) return out;
    pool_[used_ - 1]->synchronize();
    for (size_t i = 1; i < used_; ++i) out.push_back(static_cast<double>(pool_[0]->elapsed_time(*pool_[i])));
    return out;
  }

 private:
  at::cuda::CUDAEvent& next() {  // events are reused across steps; timing on
    if (used_ == pool_.size()) pool_.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    return *pool_[used_++];
  }
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> pool_;  // [0] the origin, then the marks
  size_t used_ = 0;                                         // recorded since begin()
};

class Runtime final : public CudaRuntime {
 public:
  int device_count() override { return static_cast<int>(c10::cuda::device_count()); }
  void set_device(int index) override { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }
  int64_t device_total_bytes(int index) override {
    size_t free = 0, total = 0;
    const c10::DeviceIndex previous = c10::cuda::current_device();
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
    const bool ok = cudaMemGetInfo(&free, &total) == cudaSuccess;
    c10::cuda::set_device(previous);
    return ok ? static_cast<int64_t>(total) : 0;
  }
  void synchronize() override { c10::cuda::device_synchronize(); }
  std::string describe() override {
    int runtime = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
    int nccl = 0;
    if (ncclGetVersion(&nccl) != ncclSuccess) nccl = 0;
    // NCCL >= 2.9 encodes X.Y.Z as X*10000 + Y*100 + Z.
    const std::string nccl_str =
        std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." + std::to_string(nccl % 100);
    const int devices = device_count();
    std::string s = "CUDA " + cuda_version_string(CUDART_VERSION) + " build (runtime " + cuda_version_string(runtime) +
                    "), NCCL " + nccl_str + ", " + std::to_string(devices) + " CUDA device(s)";
    cudaDeviceProp prop{};
    if (devices > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) s += ": " + std::string(prop.name);
    return s;
  }
  std::unique_ptr<CudaEventClock> make_clock() override { return std::make_unique<EventClock>(); }
  c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout) override {
    auto opts = c10d::ProcessGroupNCCL::Options::create(/*is_high_priority_stream=*/true);
    opts->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
  }
};

}  // namespace
}  // namespace trident

extern "C" __attribute__((visibility("default"))) trident::CudaRuntime* trident_cuda_runtime() {
  static trident::Runtime runtime;
  return &runtime;
}
