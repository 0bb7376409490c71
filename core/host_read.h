// Reads of device tensors on the host, counted by name (NOTE [host reads]).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <ATen/ATen.h>

namespace trident {

// NOTE [host reads]
// A host read of a device tensor (item(), a copy to the CPU) waits for the
// device to finish everything queued before it: on a GPU it drains the queue
// the training step keeps full. Every such read in the training loop goes
// through these two functions, which count them by name, so the step can be
// held to a budget (the rank summary's "host_reads", tested per logged and
// per non-logged step in tests/torch_unit/test_host_reads.cpp). They count on
// the CPU too: there they cost nothing, but they are where a GPU would wait.
double read_scalar(const at::Tensor& t, const char* what);  // t.item<double>()
at::Tensor read_to_host(const at::Tensor& t, const char* what);  // t on the CPU

// Reads so far in this process, by name.
std::map<std::string, int64_t> host_reads();

}  // namespace trident
