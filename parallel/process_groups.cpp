// Process-group bundle: Gloo/NCCL group creation over the rendezvous store
// (parallel/rendezvous.cpp) and timeout-checked collective helpers.
#include "parallel/process_groups.h"

#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "parallel/backend.h"

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
                             std::chrono::milliseconds timeout)
    : env_(env), layout_(layout), backend_(backend), timeout_(timeout) {
  if (layout.world != env.world_size)
    throw std::runtime_error("layout " + layout.describe() + " does not match WORLD_SIZE " +
                             std::to_string(env.world_size));
  if (backend_ == "auto") backend_ = "gloo";  // the CPU tensors of this build; CUDA picks nccl
  if (backend_ == "nccl" && !kHaveNccl)
    throw std::runtime_error("parallel.backend = \"nccl\" but this build of Trident has no NCCL "
                             "(built against a CPU-only libtorch)");
  if (backend_ != "gloo" && backend_ != "nccl")
    throw std::runtime_error("unknown backend '" + backend_ + "' (expected gloo or nccl)");
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
}

ProcessGroups::~ProcessGroups() = default;

Group ProcessGroups::make_group(const std::string& name, const std::vector<std::vector<int>>& all) {
  // Every rank walks the same list in the same order; only members build a
  // c10d group, under a store prefix unique to (kind, index).
  Group g;
  g.name = name;
  g.timeout = timeout_;
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& members = all[i];
    for (size_t j = 0; j < members.size(); ++j) {
      if (members[j] != env_.rank) continue;
      g.members = members;
      g.rank = static_cast<int>(j);
      if (members.size() > 1) {
        auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name + "/" + std::to_string(i) + "/", store_);
#ifdef TRIDENT_HAVE_NCCL
        if (backend_ == "nccl") {
          auto opts = c10d::ProcessGroupNCCL::Options::create();
          opts->timeout = timeout_;
          g.pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, g.rank, g.size(), opts);
          continue;
        }
#endif
        auto opts = c10d::ProcessGroupGloo::Options::create(timeout_);
        const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
        if (ifname && !*ifname) ifname = nullptr;
        // GLOO_SOCKET_IFNAME (PyTorch's convention) overrides the address
        // chosen at rendezvous, e.g. for a separate fast network.
        if (ifname)
          opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
        else
          opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(gloo_address_));
        opts->threads = 1;
        try {
          g.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, g.rank, g.size(), opts);
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
    done = w->wait(g.timeout);
  } catch (const c10::Error& e) {  // one line, without libtorch's C++ backtrace
    throw std::runtime_error(where + " failed: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw std::runtime_error(where + " failed: " + e.what());
  }
  if (!done)
    throw std::runtime_error(where + " timed out after " + std::to_string(g.timeout.count()) + " ms");
}

namespace {
// Adds the lifetime of a collective helper call to its group's counters.
struct CommTimer {
  const Group& g;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~CommTimer() {
    g.comm_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++g.comm_calls;
  }
};
}  // namespace

void all_reduce(const Group& g, at::Tensor& t, c10d::ReduceOp op) {
  if (g.size() == 1) return;
  CommTimer timer{g};
  std::vector<at::Tensor> ts{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = op;
  wait_work(g, g.pg->allreduce(ts, opts), "all_reduce", -1);
}

void all_gather(const Group& g, const at::Tensor& in, std::vector<at::Tensor>& out) {
  out.clear();
  if (g.size() == 1) {
    out.push_back(in);
    return;
  }
  CommTimer timer{g};
  std::vector<std::vector<at::Tensor>> outs(1);
  for (int i = 0; i < g.size(); ++i) outs[0].push_back(at::empty_like(in));
  std::vector<at::Tensor> ins{in.contiguous()};
  wait_work(g, g.pg->allgather(outs, ins), "all_gather", -1);
  out = std::move(outs[0]);
}

void broadcast(const Group& g, at::Tensor& t, int root_group_rank) {
  if (g.size() == 1) return;
  std::vector<at::Tensor> ts{t};
  c10d::BroadcastOptions opts;
  opts.rootRank = root_group_rank;
  wait_work(g, g.pg->broadcast(ts, opts), "broadcast", -1);
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

}  // namespace trident
