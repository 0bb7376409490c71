// Context parallelism's communication: see context_parallel.h.
#include "parallel/context_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <chrono>
#include <stdexcept>

#include "parallel/all_to_all.h"

namespace trident {

CpComm parse_cp_comm(const std::string& name) {
  if (name == "p2p") return CpComm::kP2p;
  if (name == "all_gather") return CpComm::kAllGather;
  if (name == "a2a") return CpComm::kA2a;
  throw std::invalid_argument("parallel.cp_comm = \"" + name + "\": expected \"p2p\", \"all_gather\" or \"a2a\"");
}

// NOTE [ring order]
// NCCL matches the k-th send from a rank to a peer with the k-th receive
// that peer posts from it; there are no tags. Every rank of a ring posts the
// same steps in the same order, each step's sends to its next rank and
// receives from its previous one as one coalesced group, so the k-th send of
// rank r to r+1 is always the k-th receive r+1 posts from r: the forward's
// key/value block of step i, then (in the backward) the block and the
// gradient accumulator of step i, in that order on both sides. The group is
// the cp group alone, a communicator of its own beside the pipeline's, so no
// pipeline transfer sits between them on a stream. At cp = 2 the next and the
// previous rank are the same peer; the order above still pairs them.
RingStep::RingStep(const CpContext& cp, std::vector<at::Tensor> send, std::vector<at::Tensor> recv)
    : group_(cp.group) {
  if (!group_ || send.size() != recv.size()) throw std::logic_error("RingStep: needs a cp group and matched tensors");
  const int n = group_->size(), r = group_->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
  std::vector<P2POp> ops;
  for (size_t i = 0; i < send.size(); ++i) ops.push_back({true, send[i], next, static_cast<int>(i)});
  for (size_t i = 0; i < recv.size(); ++i) ops.push_back({false, recv[i], prev, static_cast<int>(i)});
  works_ = batch_isend_irecv(*group_, ops);
  keep_ = std::move(send);
  keep_.insert(keep_.end(), recv.begin(), recv.end());
}

void RingStep::wait() {
  // The time this rank waits here is the ring's exposed transfer time: what
  // the step's products did not hide (counted in the group's comm_seconds).
  const auto start = std::chrono::steady_clock::now();
  for (const auto& w : works_) wait_work(*group_, w, "context-parallel ring step", -1);
  group_->comm_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  group_->comm_calls += 1;
  for (size_t i = 0; i < keep_.size() / 2; ++i) group_->comm_bytes += keep_[i].nbytes();  // what this rank sent
  works_.clear();
  keep_.clear();
}

namespace {

// (cp, b, h, 2c, d) pieces in group order <-> (b, h, s, d) in sequence order
// (NOTE [context split]): sequence chunk t < cp is piece t's first half, chunk
// t >= cp piece 2cp-1-t's second half. Views, a flip and one copy: no index
// tensor built on the host and copied to the device at every call.
at::Tensor pieces_to_sequence(const at::Tensor& pieces, int64_t cp) {
  const int64_t b = pieces.size(1), h = pieces.size(2), l = pieces.size(3), d = pieces.size(4);
  const at::Tensor halves = pieces.view({cp, b, h, 2, l / 2, d});
  const at::Tensor chunks = at::cat({halves.select(3, 0), halves.select(3, 1).flip(0)}, 0);  // (2cp, b, h, c, d)
  return chunks.permute({1, 2, 0, 3, 4}).reshape({b, h, cp * l, d});
}

at::Tensor sequence_to_pieces(const at::Tensor& x, int64_t cp) {
  const int64_t b = x.size(0), h = x.size(1), s = x.size(2), d = x.size(3), c = s / (2 * cp);
  const at::Tensor chunks = x.reshape({b, h, 2 * cp, c, d}).permute({2, 0, 1, 3, 4});  // (2cp, b, h, c, d)
  return at::stack({chunks.narrow(0, 0, cp), chunks.narrow(0, cp, cp).flip(0)}, 3).reshape({cp, b, h, 2 * c, d});
}

}  // namespace

// Rank j receives every rank's pieces of its own heads: the all-to-all of
// equal parts along a leading cp dimension (all_to_all_rows, whose backward
// is the exchange the other way, the same equal parts).
at::Tensor cp_heads_to_sequence(const CpContext& cp, const at::Tensor& x) {
  if (!cp.group) return x;
  const int64_t n = cp.size(), b = x.size(0), h = x.size(1), l = x.size(2), d = x.size(3);
  const at::Tensor parts = x.view({b, n, h / n, l, d}).permute({1, 0, 2, 3, 4}).contiguous();  // (cp, b, h/cp, 2c, d)
  const std::vector<int64_t> ones(static_cast<size_t>(n), 1);
  return pieces_to_sequence(all_to_all_rows(*cp.group, parts, ones, ones), n);
}

at::Tensor cp_sequence_to_heads(const CpContext& cp, const at::Tensor& x) {
  if (!cp.group) return x;
  const int64_t n = cp.size(), b = x.size(0), hn = x.size(1), s = x.size(2), d = x.size(3);
  const std::vector<int64_t> ones(static_cast<size_t>(n), 1);
  const at::Tensor back = all_to_all_rows(*cp.group, sequence_to_pieces(x, n), ones, ones);  // (cp, b, h/cp, 2c, d)
  return back.permute({1, 0, 2, 3, 4}).reshape({b, n * hn, s / n, d});
}

}  // namespace trident
