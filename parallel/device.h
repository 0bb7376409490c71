// Which device a rank computes on and which collective backend serves it:
// pure functions of the config, the build and what the process sees, so the
// rules are tested without a GPU (tests/unit/test_device.cpp). There is one
// build, CUDA-enabled (it links NCCL too); what varies is how many devices a
// process sees (parallel/backend.h). This file knows no torch.
#pragma once

#include <string>

namespace trident {

// The device of one rank: the CPU, or CUDA device `index` of this process.
struct DeviceChoice {
  bool cuda = false;
  int index = -1;  // CUDA device index; -1 for the CPU
  // "cpu" or "cuda:3", the spelling libtorch parses.
  std::string str() const;
};

// training.device ("cpu" | "cuda") for the rank with LOCAL_RANK `local_rank`
// on a node whose process sees `device_count` CUDA devices. One device per
// rank: local rank i computes on CUDA device i. Throws std::runtime_error
// naming the problem and the device count: no device or fewer devices than
// local ranks, or a negative local rank; std::logic_error for a device name
// check_config (core/config_training.cpp) would have refused.
DeviceChoice choose_device(const std::string& device, int device_count, int local_rank);

// parallel.backend ("auto" | "gloo" | "nccl" | "nccl-rules") for
// training.device: auto is nccl on cuda and gloo on cpu; nccl-rules is the CPU
// test backend that plays by NCCL's point-to-point rules (parallel/nccl_rules.h). Which pairs are allowed (and why) is
// check_config's rule; a pair it refuses throws std::logic_error here.
std::string resolve_backend(const std::string& backend, const std::string& device);

}  // namespace trident
