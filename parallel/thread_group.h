// A Gloo group whose ranks are threads of one process, meeting over an
// in-memory store: executor tests and the synthetic-stage benchmark run a
// whole pipeline in one process this way.
#pragma once

#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "parallel/process_groups.h"

namespace trident {

// A new in-memory store for the `size` threads of one group.
c10::intrusive_ptr<c10d::Store> make_thread_store();

// Group `name` of ranks 0 .. size-1, seen from `rank`, over `store` (shared
// by all its threads) on the loopback interface. Every thread calls it with
// the same store, name, size and timeout. At size 1 the group has no
// process group (nothing to communicate with).
Group make_thread_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name, int rank, int size,
                        std::chrono::milliseconds timeout);

}  // namespace trident
