// What the trainer asks of the machine it runs on: the allocator's tuning,
// the host's memory and cores, the peak resident set, and the matmul rate
// that is MFU's denominator.
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

#include "core/config.h"
#include "parallel/process_groups.h"

namespace trident {

// NOTE [malloc and large tensors]: keeps freed memory in the process.
void keep_freed_memory();

// What this host holds, read before anything is allocated or any rank is
// met (NOTE [size checks] in core/config_rules.h): MemTotal, and the cores this
// process may run on.
struct HostResources {
  int64_t mem_bytes = 0, cores = 0;
};
HostResources read_host_resources();

// The process's peak resident set so far: the host memory a CPU run peaks
// at (a CUDA run's device memory is not in it); -1 if it cannot be read.
int64_t peak_resident_bytes();

// The MFU's peak FLOP/s per rank: training.peak_tflops when given, else
// measured by rank 0 alone while the others wait (a broadcast over world).
double peak_flops_per_rank(const Config& c, const ProcessGroups& pgs, const c10::Device& device);

}  // namespace trident
