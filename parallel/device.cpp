// Device and backend choice: see device.h.
#include "parallel/device.h"

#include <stdexcept>

namespace trident {

std::string DeviceChoice::str() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }

DeviceChoice choose_device(const std::string& device, int device_count, int local_rank) {
  if (device == "cpu") return {};
  if (device != "cuda")
    throw std::runtime_error("training.device = \"" + device + "\": expected \"cpu\" or \"cuda\"");
  if (local_rank < 0)
    throw std::runtime_error("LOCAL_RANK = " + std::to_string(local_rank) + ": a local rank cannot be negative");
  if (device_count <= 0)
    throw std::runtime_error("training.device = \"cuda\" but this process sees " + std::to_string(device_count) +
                             " CUDA devices (check the driver and CUDA_VISIBLE_DEVICES), or set "
                             "training.device = \"cpu\"");
  if (local_rank >= device_count)
    throw std::runtime_error("LOCAL_RANK = " + std::to_string(local_rank) + " needs CUDA device " +
                             std::to_string(local_rank) + " but this process sees only " +
                             std::to_string(device_count) + " (one device per rank: start at most " +
                             std::to_string(device_count) + " ranks per node)");
  return {true, local_rank};
}

std::string resolve_backend(const std::string& backend, const std::string& device) {
  if (device != "cpu" && device != "cuda")
    throw std::runtime_error("training.device = \"" + device + "\": expected \"cpu\" or \"cuda\"");
  std::string b = backend;
  if (b == "auto") b = device == "cuda" ? "nccl" : "gloo";
  if (b != "gloo" && b != "nccl")
    throw std::runtime_error("parallel.backend = \"" + backend + "\": expected \"auto\", \"gloo\" or \"nccl\"");
  if (b == "nccl" && device != "cuda")
    throw std::runtime_error("parallel.backend = \"nccl\" needs training.device = \"cuda\" (NCCL moves device "
                             "memory only), got \"" + device + "\"");
  if (b == "gloo" && device == "cuda")
    throw std::runtime_error("parallel.backend = \"gloo\" with training.device = \"cuda\" is not supported: Gloo's "
                             "send/recv read host memory, so the pipeline's device buffers cannot travel over it "
                             "(use \"nccl\" or \"auto\")");
  return b;
}

}  // namespace trident
