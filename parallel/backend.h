// The one place that decides which c10d backends this build has.
// TRIDENT_HAVE_NCCL is defined by CMake when libtorch was built with CUDA
// (a CUDA-enabled libtorch ships ProcessGroupNCCL); Debian's CPU libtorch
// has Gloo only.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef TRIDENT_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace trident {

constexpr bool kHaveNccl =
#ifdef TRIDENT_HAVE_NCCL
    true;
#else
    false;
#endif

}  // namespace trident
