// Context parallelism's communication (NOTE [context grid] in
// parallel/layout.h, NOTE [context split] in core/context_split.h): the
// context the model's attention reads, and the exchanges of its kinds
// (parallel.cp_comm): the ring's key/value blocks passed to the next rank and
// Ulysses' all-to-all (all_gather's one all-gather is the process groups'
// all_gather_into). The attention arithmetic that uses them is
// models/common/context_attention.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "parallel/process_groups.h"

namespace trident {

enum class CpComm { kP2p, kAllGather, kA2a };
CpComm parse_cp_comm(const std::string& name);  // "p2p" | "all_gather" | "a2a"; throws std::invalid_argument

struct CpContext {
  const Group* group = nullptr;  // the context-parallel group; null means cp = 1
  CpComm comm = CpComm::kP2p;
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank : 0; }
};

// One step of a ring: each of `send` goes to the next rank of the group and
// each of `recv` (contiguous, preallocated, the same shapes in the same
// order) is filled from the previous one, all posted together (coalesced
// where the backend can: NOTE [ring order] in context_parallel.cpp). wait()
// finishes them; nothing may read `recv` or write `send` before. The time
// wait() blocks, the step's exposed transfer, is added to the group's
// comm_seconds (comm_calls and comm_bytes count the steps and bytes sent).
class RingStep {
 public:
  RingStep(const CpContext& cp, std::vector<at::Tensor> send, std::vector<at::Tensor> recv);
  void wait();

 private:
  const Group* group_;
  std::vector<at::Tensor> keep_;  // the tensors in flight stay alive until wait()
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

// Ulysses (parallel.cp_comm = "a2a"): (b, heads, 2c, d) of this rank's chunks
// -> (b, heads / cp, s, d), group rank j's heads [j·heads/cp, (j+1)·heads/cp)
// of the whole sequence in order; and the way back. One all-to-all each;
// each one's backward is the other.
at::Tensor cp_heads_to_sequence(const CpContext& cp, const at::Tensor& x);
at::Tensor cp_sequence_to_heads(const CpContext& cp, const at::Tensor& x);

}  // namespace trident
