// ATen operations dispatched per training step, by phase (NOTE [operation counts]).
#pragma once

#include <array>
#include <cstdint>

namespace trident {

// NOTE [operation counts]
// On a GPU every ATen call the training code makes is at least one kernel
// launch, so the number of calls a step makes is the CPU's honest proxy for
// what a GPU would launch. They are counted with a global at::RecordFunction
// callback (RecordScope::FUNCTION: every operation through the dispatcher,
// collectives included) while a counter is active.
// Rule: top-level operations only, i.e. an operation is counted when no
// other counted operation is running on its thread. That is the calls the
// training code (and the autograd engine, for each backward node) makes: a
// composite operation's inner calls (linear's addmm, _foreach_norm's
// per-tensor norms on the CPU, which are one fused kernel on CUDA) are how
// the backend implements it, and differ between backends. The PyTorch
// side (benchmarks/op_counts.py) counts its profiler's aten:: events without
// an aten:: ancestor: the same rule. The phase is process-wide, set by the
// trainer and the executor (forward and backward actions).
enum class OpPhase : int { kOther = 0, kForward, kBackward, kGradSync, kOptimizer };
constexpr int kOpPhases = 5;
const char* op_phase_name(OpPhase p);  // "other", "forward", "backward", "grad_sync", "optimizer"

// Sets the phase operations are counted under from now on; returns the previous one.
OpPhase set_op_phase(OpPhase p);
OpPhase op_phase();

// Counts from construction to destruction (one at a time per process).
class OpCounter {
 public:
  OpCounter();
  ~OpCounter();
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;
  std::array<int64_t, kOpPhases> counts() const;  // per OpPhase, so far

 private:
  uint64_t handle_ = 0;
};

}  // namespace trident
