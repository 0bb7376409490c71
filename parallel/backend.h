// The one place that holds what this build links and how libtorch is asked
// for it: feature checks sit in one place, not in the functions that use
// them. Everything CUDA or NCCL is declared here and reached through
// libtrident_cuda.so (parallel/cuda_runtime.cpp, the only translation unit
// that includes CUDA headers); the rest of Trident calls these functions.
//
// There is one build: libtorch 2.11 from PyPI's torch, CUDA-enabled. The
// programs link libtorch_cpu; libtrident_cuda.so links libtorch's CUDA
// libraries and NCCL and is loaded before main where an NVIDIA driver is
// present (NOTE [CUDA on demand] in cuda_runtime.h). The same binary trains
// on the CPU (Gloo) where no GPU is present and on CUDA devices (NCCL) where
// they are; ProcessGroupGloo and ProcessGroupNCCL are c10d::Backends.
//
// NOTE [CUDA streams]
// Communication runs on streams of its own: ProcessGroupNCCL enqueues every
// operation on an internal stream per communicator (so pipeline send/recv on
// the pp group and gradient all-reduces on the dp group use streams apart
// from compute and from each other), after making that stream wait for the
// current (compute) stream, and records the tensors on it so the caching
// allocator does not reuse them early. Work::wait() makes the compute stream
// wait for the communication instead of blocking the host. Trident asks for
// high-priority communication streams (make_nccl) so transfers are scheduled
// ahead of compute kernels. libtorch gives no way to pass a stream of our own
// to a c10d operation; what Trident must do is not block the host: losses and
// norms are read back at most once per step (the loss only on logged steps:
// framework/trainer.cpp; the norm: parallel/grad_finalize.cpp), not per
// micro-batch or parameter.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace trident {

using CommBackend = c10d::Backend;

// CUDA devices this process sees; 0 where there is no GPU or no driver.
int cuda_device_count();
// Makes CUDA device `index` the current one of the calling thread (and the
// device NCCL communicators of this process use).
void set_cuda_device(int index);
// The total memory of CUDA device `index` in bytes (cudaMemGetInfo), or 0
// when it cannot be read.
int64_t cuda_device_total_bytes(int index);
// Blocks until all work queued on device `d` is done; nothing on the CPU.
void synchronize(const c10::Device& d);
// "libtorch 2.11.0, CUDA 13.0 build (runtime 13.0), NCCL 2.28.9, 1 CUDA device(s): NVIDIA H200",
// or "libtorch 2.11.0, CUDA 13.0 build (not loaded: no NVIDIA driver), 0 CUDA device(s)"
// where libtrident_cuda.so was not loaded: for the start-up line of `trident train`.
std::string describe_build();

// NOTE [device time]
// On CUDA a host clock read after an operation says when it was queued, not
// when it ran. A StepClock marks points on the compute stream instead (CUDA
// events, read only when times() is asked, after the marked work is done)
// and gives each mark as a steady-clock time: the host time of begin() plus
// the device time elapsed since begin()'s event. On the CPU a mark is the
// host's steady clock at the call. The executor's timeline, and
// what reads it (the measured bubble, the per-stage F/B/I/W means behind the
// predicted pipeline and `trident plan profile`), is device time on CUDA
// this way.
class StepClock {
 public:
  explicit StepClock(c10::Device device);
  ~StepClock();
  StepClock(const StepClock&) = delete;
  StepClock& operator=(const StepClock&) = delete;
  // Forgets the marks; the origin of the next ones is now.
  void begin();
  // A point on the device's stream after everything queued so far; returns
  // its index (0, 1, ... since begin()).
  int mark();
  // Steady-clock microseconds of every mark since begin(), in index order.
  // On CUDA it waits for the last mark's work (call it after the step).
  std::vector<double> times_us() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A Gloo group of `size` ranks over `store`; its pairs listen on
// `address`, or on interface `ifname` when it is not empty.
c10::intrusive_ptr<CommBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          std::chrono::milliseconds timeout, const std::string& address,
                                          const std::string& ifname);
// An NCCL group (high-priority streams, see NOTE [CUDA streams]).
c10::intrusive_ptr<CommBackend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          std::chrono::milliseconds timeout);

}  // namespace trident
