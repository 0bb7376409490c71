// Process-group bundle: Gloo/NCCL group creation over the rendezvous store
// (parallel/rendezvous.cpp) and timeout-checked collective helpers.
#include "parallel/process_groups.h"

#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "parallel/device.h"
#include "parallel/nccl_rules.h"

namespace trident {
namespace {

std::string describe_rank(const Group& g) {
  std::ostringstream os;
  os << "group '" << g.name << "' (members";
  for (int m : g.members) os << ' ' << m;
  os << "), global rank " << g.global(g.rank);
  return os.str();
}

}  // namespace

ProcessGroups::ProcessGroups(const WorldEnv& env, const Layout& layout, const std::string& backend,
                             std::chrono::milliseconds timeout, c10::Device device)
    : env_(env), layout_(layout), backend_(backend), device_(device), timeout_(timeout) {
  if (layout.world != env.world_size)
    throw std::runtime_error("layout " + layout.describe() + " does not match WORLD_SIZE " +
                             std::to_string(env.world_size));
  backend_ = resolve_backend(backend_, device_.is_cuda() ? "cuda" : "cpu");
  if (env_.world_size > 1) {
    // Ranks listen where the other nodes can reach them (see listen_address).
    gloo_address_ = listen_address(env_);
    store_ = rendezvous(env_, gloo_address_, env_.rdzv_timeout.count() > 0 ? env_.rdzv_timeout : timeout_);
    store_->setTimeout(timeout_);  // from here on the store serves group creation: a collective's bound
  }
  world = make_group("world", {[&] {
                       std::vector<int> all(env_.world_size);
                       for (int i = 0; i < env_.world_size; ++i) all[i] = i;
                       return all;
                     }()});
  tp = make_group("tp", layout_.all_tp_groups());
  dp = make_group("dp", layout_.all_dp_groups());
  pp = make_group("pp", layout_.all_pp_groups());
  model_parallel = make_group("model_parallel", layout_.all_model_parallel_groups());
  embedding = make_group("embedding", layout_.all_embedding_groups());
  if (layout_.cp > 1) {
    cp = make_group("cp", layout_.all_cp_groups());
    dp_cp = make_group("dp_cp", layout_.all_dp_cp_groups());
  } else {
    cp = make_group("cp", {{env_.rank}});  // of one: no c10d group
    dp_cp = dp;
  }
  if (layout_.experts_folded()) {  // NOTE [expert grid]
    ep = make_group("ep", layout_.all_ep_groups());
    ep_backward = make_group("ep_backward", layout_.all_ep_groups());
    expert_dp = make_group("expert_dp", layout_.all_expert_dp_groups());
  } else {
    ep = make_group("ep", {{env_.rank}});
    ep_backward = make_group("ep_backward", {{env_.rank}});
    expert_dp = dp_cp;
  }
  // NOTE [two tp groups] in parallel/tensor_parallel.h.
  if (layout_.tp > 1 && layout_.experts_folded()) {
    tp_backward = make_group("tp_backward", layout_.all_tp_groups());
    tp.backward = &tp_backward;
  } else {
    tp_backward = make_group("tp_backward", {{env_.rank}});
  }
  if (layout_.etp > 1 && layout_.etp < layout_.tp) {
    expert_tp = make_group("expert_tp", layout_.all_etp_groups());
    expert_tp_backward = make_group("expert_tp_backward", layout_.all_etp_groups());
    token_slices = make_group("token_slices", layout_.all_token_slice_groups());
    token_slices_backward = make_group("token_slices_backward", layout_.all_token_slice_groups());
    expert_tp.backward = &expert_tp_backward;
    token_slices.backward = &token_slices_backward;
  } else {  // of one rank: at etp = tp or 1 the tp group serves
    expert_tp = make_group("expert_tp", {{env_.rank}});
    expert_tp_backward = make_group("expert_tp_backward", {{env_.rank}});
    token_slices = make_group("token_slices", {{env_.rank}});
    token_slices_backward = make_group("token_slices_backward", {{env_.rank}});
  }
}

ProcessGroups::~ProcessGroups() = default;

Group ProcessGroups::make_group(const std::string& name, const std::vector<std::vector<int>>& all) {
  // Every rank walks the same list in the same order; only members build a
  // c10d group, under a store prefix unique to (kind, index).
  Group g;
  g.name = name;
  g.timeout = timeout_;
  if (backend_ == "nccl") g.device = device_;
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& members = all[i];
    for (size_t j = 0; j < members.size(); ++j) {
      if (members[j] != env_.rank) continue;
      g.members = members;
      g.rank = static_cast<int>(j);
      if (members.size() > 1) {
        auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name + "/" + std::to_string(i) + "/", store_);
        // GLOO_SOCKET_IFNAME (PyTorch's convention) overrides the address
        // chosen at rendezvous, e.g. for a separate fast network.
        const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
        try {
          if (backend_ == "nccl") {
            g.pg = make_nccl(prefixed, g.rank, g.size(), timeout_);
          } else if (backend_ == "nccl-rules") {  // NOTE [NCCL rules on the CPU]
            g.pg = make_nccl_rules(make_gloo(prefixed, g.rank, g.size(), timeout_, gloo_address_, ifname ? ifname : ""),
                                   g.rank, g.size(), timeout_);
          } else {
            g.pg = make_gloo(prefixed, g.rank, g.size(), timeout_, gloo_address_, ifname ? ifname : "");
          }
        } catch (const std::exception& e) {
          throw std::runtime_error("creating " + describe_rank(g) + " failed: " + e.what());
        }
      }
    }
  }
  if (g.members.empty()) {
    // Only the embedding group leaves ranks out (middle pipeline stages hold
    // no embedding): they get a group of one, so its collectives are no-ops.
    if (name != "embedding")
      throw std::runtime_error("internal: rank " + std::to_string(env_.rank) + " is in no '" + name + "' group");
    g.members = {env_.rank};
    g.rank = 0;
  }
  return g;
}

void wait_work(const Group& g, const c10::intrusive_ptr<c10d::Work>& w, const char* op, int peer) {
  std::string where = std::string(op) + " on " + describe_rank(g);
  if (peer >= 0) where += ", peer global rank " + std::to_string(g.global(peer));
  bool done = false;
  try {
    // A CUDA group's wait makes the compute stream wait (NOTE [CUDA streams]);
    // given a timeout, ProcessGroupNCCL would block the host instead, so the
    // bound there is the communicator's own timeout (backend.cpp, make_nccl).
    done = g.device.is_cuda() ? w->wait() : w->wait(g.timeout);
  } catch (const c10::Error& e) {  // one line, without libtorch's C++ backtrace
    throw std::runtime_error(where + " failed: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw std::runtime_error(where + " failed: " + e.what());
  }
  if (!done)
    throw std::runtime_error(where + " timed out after " + std::to_string(g.timeout.count()) + " ms");
}

namespace {
// Adds the lifetime of a collective helper call, and the bytes of the
// tensor it reduces or gathers into, to its group's counters.
struct CommTimer {
  const Group& g;
  const at::Tensor& t;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~CommTimer() {
    g.comm_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++g.comm_calls;
    g.comm_bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
};
}  // namespace

// `t` on the group's device: itself, or a copy (a host tensor under NCCL).
at::Tensor on_group_device(const Group& g, const at::Tensor& t) {
  return t.device() == g.device ? t : t.to(g.device);
}

void all_reduce(const Group& g, at::Tensor& t, c10d::ReduceOp op) {
  if (g.size() == 1) return;
  CommTimer timer{g, t};
  std::vector<at::Tensor> ts{on_group_device(g, t)};
  c10d::AllreduceOptions opts;
  opts.reduceOp = op;
  wait_work(g, g.pg->allreduce(ts, opts), "all_reduce", -1);
  if (!ts[0].is_same(t)) t.copy_(ts[0]);
}

void all_gather(const Group& g, const at::Tensor& in, std::vector<at::Tensor>& out) {
  out.clear();
  if (g.size() == 1) {
    out.push_back(in);
    return;
  }
  // One buffer (size(), ...) through the into-tensor form; rank i's tensor is its row i.
  at::Tensor part = on_group_device(g, in).contiguous();
  auto shape = part.sizes().vec();
  shape.insert(shape.begin(), g.size());
  at::Tensor full = at::empty(shape, part.options());
  all_gather_into(g, full, part);
  if (full.device() != in.device()) full = full.to(in.device());
  for (int i = 0; i < g.size(); ++i) out.push_back(full.select(0, i));
}

namespace {
// part's shape with its first dimension size() times as long: how Gloo's
// into-tensor forms want the whole (they split it into size() chunks along
// dim 0, each of part's shape).
std::vector<int64_t> stacked_shape(const Group& g, const at::Tensor& part) {
  auto shape = part.sizes().vec();
  if (shape.empty())
    shape.push_back(g.size());
  else
    shape[0] *= g.size();
  return shape;
}
}  // namespace

c10::intrusive_ptr<c10d::Work> reduce_scatter_async(const Group& g, at::Tensor& part, at::Tensor& full) {
  TORCH_INTERNAL_ASSERT(full.numel() == part.numel() * g.size() && full.is_contiguous() && part.is_contiguous());
  at::Tensor in = full.view(stacked_shape(g, part));  // Gloo checks dim 0 (as in all_gather_into)
  return g.pg->_reduce_scatter_base(part, in);
}

void reduce_scatter(const Group& g, at::Tensor& part, at::Tensor& full) {
  if (g.size() == 1) return part.copy_(full), void();
  CommTimer timer{g, full};
  wait_work(g, reduce_scatter_async(g, part, full), "reduce_scatter", -1);
}

void all_gather_into(const Group& g, at::Tensor& full, at::Tensor& part) {
  TORCH_INTERNAL_ASSERT(full.numel() == part.numel() * g.size() && full.is_contiguous() && part.is_contiguous());
  if (g.size() == 1) return full.copy_(part), void();
  CommTimer timer{g, full};
  // Gloo's _allgather_base is its list form over full.chunk(size()) along dim
  // 0, which must each have part's shape: hand it full as (size() x part's
  // first dimension, part's others), the same memory. (Gloo gathers into a
  // buffer of its own and copies each chunk out; NCCL writes into full.)
  wait_work(g, all_gather_into_async(g, full, part), "all_gather", -1);
}

c10::intrusive_ptr<c10d::Work> all_gather_into_async(const Group& g, at::Tensor& full, at::Tensor& part) {
  TORCH_INTERNAL_ASSERT(full.numel() == part.numel() * g.size() && full.is_contiguous() && part.is_contiguous() &&
                        g.size() > 1);
  at::Tensor out = full.view(stacked_shape(g, part));
  return g.pg->_allgather_base(out, part);
}

void all_to_all(const Group& g, at::Tensor& out, at::Tensor& in, std::vector<int64_t> out_splits,
                std::vector<int64_t> in_splits, const std::string& what) {
  TORCH_INTERNAL_ASSERT(out.is_contiguous() && in.is_contiguous() &&
                        static_cast<int>(out_splits.size()) == g.size() && static_cast<int>(in_splits.size()) == g.size());
  if (g.size() == 1) return out.copy_(in), void();
  CommTimer timer{g, in};
  label_next_collective(what);  // read by nccl-rules on this thread, in the call below
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = g.pg->alltoall_base(out, in, out_splits, in_splits);
  } catch (const std::exception& e) {
    throw std::runtime_error(describe_rank(g) + ": " + e.what());
  }
  wait_work(g, work, "all_to_all", -1);
}

void broadcast(const Group& g, at::Tensor& t, int root_group_rank) {
  if (g.size() == 1) return;
  std::vector<at::Tensor> ts{on_group_device(g, t)};
  c10d::BroadcastOptions opts;
  opts.rootRank = root_group_rank;
  wait_work(g, g.pg->broadcast(ts, opts), "broadcast", -1);
  if (!ts[0].is_same(t)) t.copy_(ts[0]);
}

void barrier(const Group& g) {
  if (g.size() == 1) return;
  wait_work(g, g.pg->barrier(), "barrier", -1);
}

c10::intrusive_ptr<c10d::Work> isend(const Group& g, at::Tensor& t, int peer, int tag) {
  std::vector<at::Tensor> ts{t};
  return g.pg->send(ts, peer, tag);
}

c10::intrusive_ptr<c10d::Work> irecv(const Group& g, at::Tensor& t, int peer, int tag) {
  std::vector<at::Tensor> ts{t};
  return g.pg->recv(ts, peer, tag);
}

std::vector<c10::intrusive_ptr<c10d::Work>> batch_isend_irecv(const Group& g, std::vector<P2POp>& ops) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  if (ops.empty()) return works;
  const bool coalesce = g.pg->supportsCoalescing();
  if (coalesce) g.pg->startCoalescing();
  for (P2POp& op : ops) {
    auto w = op.send ? isend(g, op.tensor, op.peer, op.tag) : irecv(g, op.tensor, op.peer, op.tag);
    if (!coalesce) works.push_back(std::move(w));
  }
  if (coalesce) works.push_back(g.pg->endCoalescing());
  return works;
}

}  // namespace trident
