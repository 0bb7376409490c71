// Build-dependent code: see backend.h. CUDA and NCCL are reached through
// libtrident_cuda.so (NOTE [CUDA on demand] in cuda_runtime.h); this file
// holds the Gloo headers (NOTE [Gloo headers] in parallel/torch.cmake).
#include "parallel/backend.h"

#include <dlfcn.h>

#include <chrono>
#include <stdexcept>

#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "parallel/cuda_runtime.h"

namespace trident {

namespace {
struct CudaLoad {
  CudaRuntime* runtime = nullptr;
  std::string absent;         // why not loaded, for the start-up line
  std::string absent_detail;  // and dlerror()'s words, for errors
  bool at_start = false;      // load_at_start() ran (before main)
};

CudaLoad& cuda_load() {
  static CudaLoad load;
  return load;
}

CudaRuntime* open_runtime() {
  void* lib = dlopen(kCudaRuntimeLibrary, RTLD_NOW | RTLD_GLOBAL);
  if (!lib)
    throw std::runtime_error(std::string("cannot load ") + kCudaRuntimeLibrary + " (built beside trident-torch): " +
                             dlerror());
  auto entry = reinterpret_cast<CudaRuntimeEntry>(dlsym(lib, kCudaRuntimeEntry));
  if (!entry) throw std::runtime_error(std::string(kCudaRuntimeLibrary) + " has no " + kCudaRuntimeEntry);
  return entry();
}

// Before main (and before any of Trident's own calls into libtorch), as linking did: NOTE [CUDA on demand].
// Priority 101: ahead of the program's other static initializers.
__attribute__((constructor(101))) void load_at_start() {
  cuda_load().at_start = true;
  load_cuda_runtime();
}
}  // namespace

CudaRuntime* load_cuda_runtime(bool force) {
  CudaLoad& l = cuda_load();
  if (l.runtime) return l.runtime;
  if (!force) {
    if (!l.absent.empty()) return nullptr;
    if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); driver == nullptr) {
      const char* why = dlerror();
      l.absent = "no NVIDIA driver";
      l.absent_detail = why ? why : "libcuda.so.1 not found";
      return nullptr;
    }
  }
  l.runtime = open_runtime();
  l.absent.clear();
  return l.runtime;
}

std::string cuda_runtime_absent_reason() { return cuda_load().runtime ? "" : cuda_load().absent; }

bool cuda_runtime_decided_before_main() { return cuda_load().at_start; }

namespace {
std::string absent_error() { return cuda_load().absent + " (" + cuda_load().absent_detail + ")"; }
}  // namespace

int cuda_device_count() {
  CudaRuntime* r = load_cuda_runtime();
  return r ? r->device_count() : 0;
}

void set_cuda_device(int index) {
  CudaRuntime* r = load_cuda_runtime();
  if (!r) throw std::runtime_error("cannot select CUDA device " + std::to_string(index) + ": " + absent_error());
  r->set_device(index);
}

int64_t cuda_device_total_bytes(int index) {
  CudaRuntime* r = load_cuda_runtime();
  return r ? r->device_total_bytes(index) : 0;
}

void synchronize(const c10::Device& d) {
  if (!d.is_cuda()) return;
  CudaRuntime* r = load_cuda_runtime();
  if (!r) throw std::runtime_error("cannot synchronize " + d.str() + ": " + absent_error());
  r->synchronize();
}

std::string describe_build() {
  const std::string torch = std::string("libtorch ") + TORCH_VERSION + ", ";
  if (CudaRuntime* r = load_cuda_runtime()) return torch + r->describe();
  return torch + "CUDA " + TRIDENT_CUDA_BUILD_VERSION + " build (not loaded: " + cuda_runtime_absent_reason() +
         "), 0 CUDA device(s)";
}

namespace {
double steady_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

struct StepClock::Impl {
  double origin_us = 0;
  std::vector<double> host;                // CPU: each mark's host time
  std::unique_ptr<CudaEventClock> events;  // CUDA
};

StepClock::StepClock(c10::Device device) : impl_(std::make_unique<Impl>()) {
  if (!device.is_cuda()) return;
  CudaRuntime* r = load_cuda_runtime();
  if (!r) throw std::runtime_error("cannot time " + device.str() + ": " + absent_error());
  impl_->events = r->make_clock();
}
StepClock::~StepClock() = default;

void StepClock::begin() {
  impl_->host.clear();
  if (impl_->events) impl_->events->begin();
  impl_->origin_us = steady_us();
}

int StepClock::mark() {
  if (!impl_->events) {
    impl_->host.push_back(steady_us());
    return static_cast<int>(impl_->host.size()) - 1;
  }
  return static_cast<int>(impl_->events->record()) - 2;  // the origin is not a mark
}

std::vector<double> StepClock::times_us() const {
  if (!impl_->events) return impl_->host;
  std::vector<double> out;
  for (double ms : impl_->events->elapsed_ms()) out.push_back(impl_->origin_us + 1000.0 * ms);
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
  CudaRuntime* r = load_cuda_runtime();
  if (!r) throw std::runtime_error("parallel.backend = \"nccl\" needs CUDA: " + absent_error());
  return r->make_nccl(store, rank, size, timeout);
}

}  // namespace trident
