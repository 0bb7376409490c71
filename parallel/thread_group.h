// A pipeline of threads: each rank of a Gloo group is a thread of this
// process, meeting the others over an in-memory store. Executor tests and the
// synthetic-stage benchmark run a whole pipeline in one process this way.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "parallel/process_groups.h"

namespace trident {

// Runs body(group) on `size` threads, thread r as rank r of group `name`
// (loopback Gloo; no process group at size 1), each with one intra-op
// thread, and joins them all. Returns each rank's error message, "" for a
// rank whose body returned normally.
std::vector<std::string> run_thread_group(const std::string& name, int size, std::chrono::milliseconds timeout,
                                          const std::function<void(Group&)>& body);

}  // namespace trident
