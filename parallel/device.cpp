// Device and backend choice: see device.h.
#include "parallel/device.h"

#include <stdexcept>

#include "core/errors.h"

namespace trident {

std::string DeviceChoice::str() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }

DeviceChoice choose_device(const std::string& device, int device_count, int local_rank) {
  if (device == "cpu") return {};
  if (device != "cuda")  // check_config (core/config_training.cpp) owns the allowed names
    throw std::logic_error("choose_device: device \"" + device + "\" (check_config admits no such config)");
  // No such device is the config's or the launch's mistake, not the run's: ConfigError (exit 2).
  if (local_rank < 0)
    throw ConfigError("LOCAL_RANK = " + std::to_string(local_rank) + ": a local rank cannot be negative");
  if (device_count <= 0)
    throw ConfigError("training.device = \"cuda\" but this process sees " + std::to_string(device_count) +
                             " CUDA devices (check the driver and CUDA_VISIBLE_DEVICES), or set "
                             "training.device = \"cpu\"");
  if (local_rank >= device_count)
    throw ConfigError("LOCAL_RANK = " + std::to_string(local_rank) + " needs CUDA device " +
                             std::to_string(local_rank) + " but this process sees only " +
                             std::to_string(device_count) + " (one device per rank: start at most " +
                             std::to_string(device_count) + " ranks per node)");
  return {true, local_rank};
}

// The allowed names and pairs are check_config's rules (core/config_training.cpp);
// here they are asserted.
std::string resolve_backend(const std::string& backend, const std::string& device) {
  const std::string b = backend == "auto" ? (device == "cuda" ? "nccl" : "gloo") : backend;
  if ((device != "cpu" && device != "cuda") || (b != "gloo" && b != "nccl" && b != "nccl-rules") ||
      (b == "nccl") != (device == "cuda") || (b == "nccl-rules" && device != "cpu"))
    throw std::logic_error("resolve_backend: backend \"" + backend + "\" on device \"" + device +
                           "\" (check_config admits no such config)");
  return b;
}

}  // namespace trident
