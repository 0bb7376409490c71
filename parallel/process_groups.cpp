// Process-group bundle: environment parsing, TCPStore rendezvous, Gloo/NCCL
// group creation and timeout-checked collective helpers.
#include "parallel/process_groups.h"

#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "parallel/backend.h"

namespace trident {
namespace {

const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int parse_int_env(const char* name, const char* value) {
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < 0 || v > (1L << 30))
    throw std::runtime_error(std::string("environment variable ") + name + "='" + value +
                             "' is not a non-negative integer");
  return static_cast<int>(v);
}

// Reads (rank, size, local) from one family of variables; false if absent.
bool read_family(const char* rank_var, const char* size_var, const char* local_var, WorldEnv& env) {
  const char* r = env_or_null(rank_var);
  const char* s = env_or_null(size_var);
  if (!r && !s) return false;
  if (!r || !s)
    throw std::runtime_error(std::string("environment sets ") + (r ? rank_var : size_var) +
                             " but not " + (r ? size_var : rank_var));
  env.rank = parse_int_env(rank_var, r);
  env.world_size = parse_int_env(size_var, s);
  const char* l = env_or_null(local_var);
  env.local_rank = l ? parse_int_env(local_var, l) : env.rank;
  return true;
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

std::string describe_rank(const Group& g) {
  std::ostringstream os;
  os << "group '" << g.name << "' (members";
  for (int m : g.members) os << ' ' << m;
  os << "), global rank " << g.global(g.rank);
  return os.str();
}

}  // namespace

WorldEnv read_world_env() {
  WorldEnv env;
  if (read_family("RANK", "WORLD_SIZE", "LOCAL_RANK", env))
    env.source = "torchrun";
  else if (read_family("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", env))
    env.source = "ompi";
  else if (read_family("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", env))
    env.source = "slurm";
  if (env.world_size < 1) throw std::runtime_error("WORLD_SIZE must be >= 1, got " + std::to_string(env.world_size));
  if (env.rank >= env.world_size)
    throw std::runtime_error("RANK " + std::to_string(env.rank) + " is not below WORLD_SIZE " +
                             std::to_string(env.world_size));
  if (const char* a = env_or_null("MASTER_ADDR")) env.master_addr = a;
  if (const char* p = env_or_null("MASTER_PORT")) {
    env.master_port = parse_int_env("MASTER_PORT", p);
    if (env.master_port < 1 || env.master_port > 65535)
      throw std::runtime_error(std::string("MASTER_PORT=") + p + " is not a port in 1..65535");
  } else if (env.world_size > 1) {
    throw std::runtime_error("WORLD_SIZE is " + std::to_string(env.world_size) +
                             " but MASTER_PORT is not set (use `trident launch`)");
  }
  return env;
}

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
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(env_.master_port);
    opts.isServer = env_.rank == 0;
    opts.numWorkers = env_.world_size;
    opts.waitWorkers = true;
    opts.timeout = timeout_;
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(env_.master_addr, opts);
    } catch (const std::exception& e) {
      throw std::runtime_error("rendezvous at " + env_.master_addr + ":" + std::to_string(env_.master_port) +
                               " failed on rank " + std::to_string(env_.rank) + ": " + e.what());
    }
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
        const char* ifname = env_or_null("GLOO_SOCKET_IFNAME");
        if (ifname)
          opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
        else if (is_loopback(env_.master_addr))
          opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        else
          opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
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
