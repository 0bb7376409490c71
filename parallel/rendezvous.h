// Where this process sits (WorldEnv, from torchrun / Slurm / Open MPI
// variables) and how ranks meet: the TCPStore rendezvous with its join check
// and the address each rank's Gloo pairs listen on. See NOTE [rendezvous].
#pragma once

#include <chrono>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace trident {

// Where this process sits, read from torchrun / SLURM / Open MPI variables.
struct WorldEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int node_rank = -1;  // NODE_RANK / GROUP_RANK / SLURM_NODEID; -1 when unknown (for messages)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "none";  // which variables were found: "torchrun", "slurm", "ompi", "none"
  // Bound on meeting the other ranks (store connection and the join check),
  // from TRIDENT_RDZV_TIMEOUT_S (`trident launch --rdzv-timeout`); 0 means
  // "the collective timeout".
  std::chrono::milliseconds rdzv_timeout{0};
  // Which attempt of a restarted job this is (TORCHELASTIC_RESTART_COUNT under
  // torchrun, TRIDENT_RESTART_COUNT under `trident launch --max-restarts`; 0
  // when neither is set): for messages and TRIDENT_FAULT; the store keys of
  // an attempt are told apart otherwise (NOTE [restart attempts]).
  int restart = 0;
  // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent already hosts the store
  // at MASTER_ADDR:MASTER_PORT, and it outlives restarts; rank 0 is then a
  // client like every other rank.
  bool agent_store = false;
  // TRIDENT_STORE_FD: a listening socket on MASTER_PORT that `trident launch
  // --master-port 0` handed to rank 0, which serves the store on it (NOTE
  // [held store port]); -1 when not set.
  int store_fd = -1;
};

// Reads the environment; no variables at all means a single process.
// Throws std::runtime_error for malformed or inconsistent values.
WorldEnv read_world_env();

// "rank 5 on node 1" (or "rank 5" when the node is unknown), for messages.
std::string describe_place(const WorldEnv& env);

// The local IPv4 address this host uses to reach `host` (the interface Gloo
// must listen on so that other nodes can connect to it): the source address
// of a UDP socket connected to host:port, which sends nothing; when that is a
// loopback address although `host` is not spelled as one (a host name mapped
// to 127.0.1.1), the first non-loopback IPv4 address of an interface that is
// up. Throws naming the host when it does not resolve or no route leads to it.
std::string local_address_toward(const std::string& host, int port);

// The address this rank's Gloo pairs listen on: 127.0.0.1 for a loopback
// MASTER_ADDR, else local_address_toward(MASTER_ADDR).
std::string listen_address(const WorldEnv& env);

// Connects to (rank 0: hosts, unless the agent's store is used) the store at MASTER_ADDR:MASTER_PORT and checks
// that every rank of the same WORLD_SIZE arrived, all within `timeout`
// (NOTE [rendezvous]). `address` is this rank's listen_address, published
// for rank 0's summary line. The store returned is scoped to this meeting
// (NOTE [restart attempts]). Throws std::runtime_error naming node, address
// and port. Only for world_size > 1.
c10::intrusive_ptr<c10d::Store> rendezvous(const WorldEnv& env, const std::string& address,
                                           std::chrono::milliseconds timeout);

}  // namespace trident
