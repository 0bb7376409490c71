// Build-dependent code: see backend.h. The TRIDENT_HAVE_CUDA and
// TRIDENT_HAVE_NCCL branches are compiled by CUDA builds and parsed in CI by
// tests/nccl_syntax.cmake.
#include "parallel/backend.h"

#include <stdexcept>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#ifdef TRIDENT_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif
#ifdef TRIDENT_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace trident {

int cuda_device_count() {
#ifdef TRIDENT_HAVE_CUDA
  return static_cast<int>(c10::cuda::device_count());
#else
  return 0;
#endif
}

void set_cuda_device(int index) {
#ifdef TRIDENT_HAVE_CUDA
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#else
  throw std::runtime_error("set_cuda_device(" + std::to_string(index) + "): this build of Trident has no CUDA");
#endif
}

void synchronize(const c10::Device& d) {
  if (!d.is_cuda()) return;
#ifdef TRIDENT_HAVE_CUDA
  c10::cuda::device_synchronize();
#else
  throw std::runtime_error("synchronize(" + d.str() + "): this build of Trident has no CUDA");
#endif
}

std::string describe_build() {
#ifdef TRIDENT_HAVE_CUDA
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  std::string s = "CUDA " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + ", " +
                  std::to_string(cuda_device_count()) + " device(s)";
  cudaDeviceProp prop{};
  if (cuda_device_count() > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) s += ": " + std::string(prop.name);
  return s + (kHaveNccl ? ", NCCL" : ", no NCCL");
#else
  return "CPU only";
#endif
}

c10::intrusive_ptr<CommBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          std::chrono::milliseconds timeout, const std::string& address,
                                          const std::string& ifname) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  if (!ifname.empty())
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(address));
  opts->threads = 1;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
}

c10::intrusive_ptr<CommBackend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          std::chrono::milliseconds timeout) {
#ifdef TRIDENT_HAVE_NCCL
  auto opts = c10d::ProcessGroupNCCL::Options::create(/*is_high_priority_stream=*/true);
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  throw std::runtime_error("parallel.backend = \"nccl\" but this build of Trident has no NCCL "
                           "(built against a CPU-only libtorch)");
#endif
}

}  // namespace trident
