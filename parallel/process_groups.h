// The process-group bundle: the world, the environment it came from, and one
// c10d group per kind (TP, DP, PP, model-parallel, embedding) for this rank.
// Built once at start-up and passed by reference; there is no global state.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "parallel/backend.h"
#include "parallel/layout.h"
#include "parallel/rendezvous.h"

namespace trident {

// One group: the c10d handle plus its members (global ranks, ascending in
// group order) and this rank's index in it. `pg` is null when size() == 1:
// collectives over a group of one are skipped by the helpers below.
struct Group {
  std::string name;  // e.g. "tp", "pp" (for error messages)
  std::vector<int> members;
  int rank = 0;  // index of this process in members
  c10::intrusive_ptr<CommBackend> pg;
  // Where this group's collectives run: the CPU for Gloo, this rank's CUDA
  // device for NCCL. The helpers below move a tensor held elsewhere (a loss or
  // a norm on the host) there and back.
  c10::Device device{c10::kCPU};
  std::chrono::milliseconds timeout{60000};
  // Cumulative wall time and count of all_reduce/all_gather calls on this
  // group (post + wait, so it includes waiting for slower peers); benchmarks
  // read it to give the share of a step spent in collectives.
  mutable double comm_seconds = 0;
  mutable int64_t comm_calls = 0;
  // ...and the bytes of the tensors they reduced or gathered into (the whole
  // tensor, every rank's part of an all-gather or reduce-scatter included):
  // what tests read to see the dtype on the wire (NOTE [TP collectives]).
  mutable int64_t comm_bytes = 0;
  // NOTE [two tp groups]: where the backward functions of the tensor-parallel
  // mappings run their collectives (null: this group).
  const Group* backward = nullptr;

  int size() const { return static_cast<int>(members.size()); }
  // Group index -> global rank.
  int global(int group_rank) const { return members.at(group_rank); }
};

class ProcessGroups {
 public:
  // Rendezvous over a TCPStore and create every group of `layout` on every
  // rank in the same order. backend: "gloo", "nccl" or "auto" (see
  // resolve_backend in parallel/device.h); `device` is this rank's compute
  // device, which NCCL groups run on.
  ProcessGroups(const WorldEnv& env, const Layout& layout, const std::string& backend,
                std::chrono::milliseconds timeout, c10::Device device = c10::Device(c10::kCPU));
  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  const Layout& layout() const { return layout_; }
  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const WorldEnv& env() const { return env_; }
  const std::string& backend() const { return backend_; }

  Group world;
  Group tp;
  Group dp;
  Group pp;
  Group model_parallel;  // tp x pp ranks sharing a dp index
  Group embedding;       // first and last pipeline stage at this (tp, dp)
  // NOTE [expert grid] in parallel/layout.h: the ranks sharing one set of
  // experts' shares (size 1 at ep = 1), and those holding the same experts
  // (at ep = 1 the dp group itself, not a second one).
  Group ep;
  // The same ranks as ep, for the all-to-alls of the backward (NOTE [two
  // expert groups] in parallel/expert_parallel.h); at ep = 1 of one rank.
  Group ep_backward;
  Group expert_dp;
  // NOTE [two tp groups]: the same ranks as tp, for the backward's tensor-parallel
  // collectives, when tp > 1 and the experts are spread (ep > 1: what the
  // overlapped pairs need); else of one rank, and tp.backward is null.
  Group tp_backward;
  // NOTE [expert grid]: at 1 < etp < tp, the etp ranks of a tp group splitting each expert and
  // the tp / etp ranks taking one token slice each (at etp = tp or 1 the tp group itself serves,
  // and these are of one rank), each with its backward twin as tp's (NOTE [two tp groups]).
  Group expert_tp, token_slices, expert_tp_backward, token_slices_backward;
  // NOTE [context grid] in parallel/layout.h: the ranks splitting one
  // sequence (size 1 at cp = 1), and the dp x cp ranks that average the dense
  // gradients (at cp = 1 the dp group itself).
  Group cp;
  Group dp_cp;

 private:
  Group make_group(const std::string& name, const std::vector<std::vector<int>>& all);
  WorldEnv env_;
  Layout layout_;
  std::string backend_;
  c10::Device device_;
  std::chrono::milliseconds timeout_;
  std::string gloo_address_;  // where this rank's Gloo pairs listen (see the constructor)
  c10::intrusive_ptr<c10d::Store> store_;
};

// Collective helpers. Each waits with the group's timeout and turns a failure
// or a timeout into std::runtime_error naming the operation, group and rank.
void all_reduce(const Group& g, at::Tensor& t, c10d::ReduceOp op = c10d::ReduceOp::SUM);
// out[i] = group rank i's `in`: rows of one (size(), ...) tensor that one
// into-tensor all-gather (_allgather_base) fills, no per-rank copies.
void all_gather(const Group& g, const at::Tensor& in, std::vector<at::Tensor>& out);
// The into-tensor pair (_reduce_scatter_base, _allgather_base), used by
// ZeRO-1 (NOTE [ZeRO-1 reduce-scatter] in parallel/dp_shard.h) and the
// TP mappings (NOTE [TP collective copies] in parallel/tensor_parallel.cpp), on
// contiguous tensors of the group's device: `full` (size() parts of part's
// size, back to back) summed over the group, this rank's part written to
// `part`; and the parts of every rank gathered into `full` in rank order.
// The _async forms only start (wait with wait_work); the others wait.
c10::intrusive_ptr<c10d::Work> reduce_scatter_async(const Group& g, at::Tensor& part, at::Tensor& full);
void reduce_scatter(const Group& g, at::Tensor& part, at::Tensor& full);  // ...waited for, and timed
void all_gather_into(const Group& g, at::Tensor& full, at::Tensor& part);
// `part` must stay alive until the work is waited for (size() > 1).
c10::intrusive_ptr<c10d::Work> all_gather_into_async(const Group& g, at::Tensor& full, at::Tensor& part);
// all_to_all_single with splits: `in` holds in_splits[i] rows (along dim 0)
// for group rank i, back to back; `out` receives out_splits[i] rows from
// group rank i, in rank order. Both contiguous, on the group's device, the
// splits summing to their first dimensions. Waited for and timed. `what`
// names it for the nccl-rules backend's order check (NOTE [all-to-all order]
// in schedules/expert_order.h): the ranks' names must agree call by call.
void all_to_all(const Group& g, at::Tensor& out, at::Tensor& in, std::vector<int64_t> out_splits,
                std::vector<int64_t> in_splits, const std::string& what = "");
void broadcast(const Group& g, at::Tensor& t, int root_group_rank);
void barrier(const Group& g);
// Point to point inside a group (peer is a group rank). send/recv return the
// pending work; wait_work() finishes one.
c10::intrusive_ptr<c10d::Work> isend(const Group& g, at::Tensor& t, int peer, int tag);
c10::intrusive_ptr<c10d::Work> irecv(const Group& g, at::Tensor& t, int peer, int tag);
// One operation of a batch. The tag is Gloo's; NCCL has none (NOTE [pair order]
// in schedules/pair_order.h: both ends post a pair's operations in one order).
struct P2POp {
  bool send = false;
  at::Tensor tensor;  // contiguous, on the group's device
  int peer = 0;       // group rank
  int tag = 0;
};
// Posts `ops` as one group, what torch.distributed.batch_isend_irecv does:
// coalesced into one Work (startCoalescing/endCoalescing) where the backend
// supports it (NCCL, nccl-rules), so that the sends and receives launch
// together and none waits for another; one by one otherwise (Gloo, whose
// operations never block each other). Returns what to wait for.
std::vector<c10::intrusive_ptr<c10d::Work>> batch_isend_irecv(const Group& g, std::vector<P2POp>& ops);
void wait_work(const Group& g, const c10::intrusive_ptr<c10d::Work>& w, const char* op, int peer);

}  // namespace trident
