// Build-dependent code: see backend.h. The only translation unit with CUDA,
// NCCL and Gloo headers (NOTE [Gloo headers] in parallel/torch.cmake).
#include "parallel/backend.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <stdexcept>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace trident {

int cuda_device_count() { return static_cast<int>(c10::cuda::device_count()); }

void set_cuda_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

int64_t cuda_device_total_bytes(int index) {
  size_t free = 0, total = 0;
  const c10::DeviceIndex previous = c10::cuda::current_device();
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
  const bool ok = cudaMemGetInfo(&free, &total) == cudaSuccess;
  c10::cuda::set_device(previous);
  return ok ? static_cast<int64_t>(total) : 0;
}

void synchronize(const c10::Device& d) {
  if (d.is_cuda()) c10::cuda::device_synchronize();
}

namespace {
// "13.0" from CUDA's 13000 encoding.
std::string cuda_version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
}  // namespace

std::string describe_build() {
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  int nccl = 0;
  if (ncclGetVersion(&nccl) != ncclSuccess) nccl = 0;
  // NCCL >= 2.9 encodes X.Y.Z as X*10000 + Y*100 + Z.
  const std::string nccl_str =
      std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." + std::to_string(nccl % 100);
  const int devices = cuda_device_count();
  std::string s = std::string("libtorch ") + TORCH_VERSION + ", CUDA " + cuda_version_string(CUDART_VERSION) +
                  " build (runtime " + cuda_version_string(runtime) + "), NCCL " + nccl_str + ", " +
                  std::to_string(devices) + " CUDA device(s)";
  cudaDeviceProp prop{};
  if (devices > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) s += ": " + std::string(prop.name);
  return s;
}

namespace {
double steady_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

struct StepClock::Impl {
  bool cuda = false;
  double origin_us = 0;
  std::vector<double> host;                                // CPU: each mark's host time
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> pool;  // CUDA: [0] the origin, then the marks (reused)
  size_t used = 0;                                         // events recorded since begin()
  at::cuda::CUDAEvent& next() {
    if (used == pool.size()) pool.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));  // timing on
    return *pool[used++];
  }
};

StepClock::StepClock(c10::Device device) : impl_(std::make_unique<Impl>()) { impl_->cuda = device.is_cuda(); }
StepClock::~StepClock() = default;

void StepClock::begin() {
  impl_->host.clear();
  impl_->used = 0;
  if (impl_->cuda) impl_->next().record();
  impl_->origin_us = steady_us();
}

int StepClock::mark() {
  if (!impl_->cuda) {
    impl_->host.push_back(steady_us());
    return static_cast<int>(impl_->host.size()) - 1;
  }
  impl_->next().record();
  return static_cast<int>(impl_->used) - 2;  // the origin is not a mark
}

std::vector<double> StepClock::times_us() const {
  if (!impl_->cuda) return impl_->host;
  std::vector<double> out;
  if (impl_->used < 2) return out;
  impl_->pool[impl_->used - 1]->synchronize();
  const at::cuda::CUDAEvent& origin = *impl_->pool[0];
  for (size_t i = 1; i < impl_->used; ++i)
    out.push_back(impl_->origin_us + 1000.0 * static_cast<double>(origin.elapsed_time(*impl_->pool[i])));
  return out;
}

c10::intrusive_ptr<CommBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          std::chrono::milliseconds timeout, const std::string& address,
                                          const std::string& ifname) {
  auto opts = c10::make_intrusive<c10d::ProcessGroupGloo::Options>(timeout);
  if (!ifname.empty())
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(address));
  opts->threads = 1;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
}

c10::intrusive_ptr<CommBackend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupNCCL::Options::create(/*is_high_priority_stream=*/true);
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
}

}  // namespace trident
