// The one place that decides what this build has and hides how libtorch
// versions differ (DESIGN.md principle 11). Everything CUDA or NCCL is
// declared here and defined in parallel/backend.cpp, the only translation unit
// that includes CUDA headers; the rest of Trident calls these functions.
//
// Build macros (set by CMake, parallel/torch.cmake):
//   TRIDENT_HAVE_CUDA  libtorch was built with CUDA (c10_cuda is linked)
//   TRIDENT_HAVE_NCCL  ...and ships ProcessGroupNCCL
// Debian's libtorch 1.13 is CPU-only: neither is defined and no CUDA code is
// compiled (tests/nccl_syntax.cmake parses that branch in CI).
//
// libtorch 1.13 against 2.x: from 2.0 on, ProcessGroupGloo and
// ProcessGroupNCCL derive from c10d::Backend (c10d::ProcessGroup became a
// dispatcher over backends); in 1.13 they are c10d::ProcessGroups. Both
// bases offer the same allreduce/allgather/broadcast/send/recv/barrier, so
// Trident holds a CommBackend.
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
// norms are read back once per step (schedules/executor.cpp,
// parallel/data_parallel.cpp), not per micro-batch or parameter.
#pragma once

#include <chrono>
#include <string>

#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace trident {

#if TORCH_VERSION_MAJOR >= 2
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif

constexpr bool kHaveCuda =
#ifdef TRIDENT_HAVE_CUDA
    true;
#else
    false;
#endif

constexpr bool kHaveNccl =
#ifdef TRIDENT_HAVE_NCCL
    true;
#else
    false;
#endif

// CUDA devices this process sees; 0 in a build without CUDA.
int cuda_device_count();
// Makes CUDA device `index` the current one of the calling thread (and the
// device NCCL communicators of this process use). Throws in a CPU build.
void set_cuda_device(int index);
// Blocks until all work queued on device `d` is done; nothing on the CPU.
void synchronize(const c10::Device& d);
// "CUDA 13.0, 1 device(s): NVIDIA H200" or "CPU only": for logs.
std::string describe_build();

// A Gloo group of `size` ranks over `store`; its pairs listen on
// `address`, or on interface `ifname` when it is not empty.
c10::intrusive_ptr<CommBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          std::chrono::milliseconds timeout, const std::string& address,
                                          const std::string& ifname);
// An NCCL group (high-priority streams, see NOTE [CUDA streams]). Throws in a
// build without NCCL.
c10::intrusive_ptr<CommBackend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                          std::chrono::milliseconds timeout);

}  // namespace trident
