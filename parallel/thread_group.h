// A pipeline of threads: each rank of a Gloo group is a thread of this
// process, meeting the others over an in-memory store. Executor tests and the
// synthetic-stage benchmark run a whole pipeline in one process this way; a
// group of forked processes is the alternative for measurements.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "parallel/process_groups.h"

namespace trident {

// Runs body(group) on `size` threads, thread r as rank r of group `name`
// (loopback Gloo, or with backend "nccl-rules" Gloo under NCCL's
// point-to-point rules: parallel/nccl_rules.h; no process group at size 1),
// each with one intra-op thread, and joins them all. Returns each rank's
// error message, "" for a rank whose body returned normally.
std::vector<std::string> run_thread_group(const std::string& name, int size, std::chrono::milliseconds timeout,
                                          const std::function<void(Group&)>& body,
                                          const std::string& backend = "gloo");

// The same group made of processes: forks `size` children (call it before
// this process starts threads of its own), child r rank r over a store in a
// temporary directory, each with one intra-op thread; body's return value is
// what that rank sends back. Returns every rank's text; throws
// std::runtime_error naming the first rank that failed and its error. For
// measurements that must see what separate rank processes see (their
// threads scheduled by the kernel against each other), not what threads of
// one process see.
std::vector<std::string> run_process_group(const std::string& name, int size, std::chrono::milliseconds timeout,
                                           const std::function<std::string(Group&)>& body);

}  // namespace trident
