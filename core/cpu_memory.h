// Live CPU tensor bytes, measured: a counting wrapper around libtorch's CPU
// allocator. The executor reads it around each forward to learn how many
// bytes a micro-batch's activations hold until its backward frees them.
#pragma once

#include <cstdint>

namespace trident {

// Installs the counting allocator (idempotent). Tensors allocated before keep
// their own deleters and are simply not counted.
void install_cpu_memory_meter();
// Bytes currently allocated through the meter; -1 when it is not installed.
int64_t live_cpu_bytes();

}  // namespace trident
