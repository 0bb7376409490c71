// Worker for test_collectives, run on several ranks by `trident launch`.
//   mp_collectives check   8 ranks as tp2 x pp2 x dp2: every group's members
//                          match the layout, all_reduce / all_gather /
//                          broadcast / ring send-recv give exact values;
//                          prints "PASS <check>" for each.
//   mp_collectives stall   tp2 x pp(world/2), 3 s timeout: only tp index 0
//                          calls all_reduce over tp, so it must time out with
//                          an error naming operation, group and rank.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "parallel/layout.h"
#include "parallel/process_groups.h"

namespace {

using trident::Group;
using trident::Layout;
using trident::ProcessGroups;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

// Rank r's contribution: element i is (r + 1) * 100 + i, exact in double.
at::Tensor rank_tensor(int rank, int n = 4) {
  return at::arange(n, at::kDouble) + 100.0 * (rank + 1);
}

void require_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  if (at::equal(got, want)) return;
  std::ostringstream os;
  os << what << ": got " << got << " expected " << want;
  require(false, os.str());
}

// The group's membership as the layout computes it, and all_reduce SUM over
// it equal to the sum of its members' tensors.
void check_group(const Group& g, const std::vector<int>& expected_members, int rank) {
  require(g.members == expected_members, "members of group " + g.name);
  require(g.global(g.rank) == rank, "own index in group " + g.name);
  at::Tensor t = rank_tensor(rank);
  at::Tensor want = at::zeros_like(t);
  for (int m : expected_members) want += rank_tensor(m);
  trident::all_reduce(g, t);
  require_equal(t, want, "all_reduce sum over " + g.name);
  std::cout << "PASS all_reduce " << g.name << std::endl;
}

// Ring over the pipeline group: post the receive from the previous stage,
// send three tagged-alike messages to the next, and check they arrive intact
// and in order (the executor relies on per-pair FIFO).
void check_pipeline_ring(const Group& pp, int rank) {
  const int next = (pp.rank + 1) % pp.size(), prev = (pp.rank + pp.size() - 1) % pp.size();
  std::vector<at::Tensor> out, in;
  std::vector<c10::intrusive_ptr<c10d::Work>> recvs, sends;
  for (int k = 0; k < 3; ++k) {
    in.push_back(at::full({2, 3}, -1.0, at::kDouble));
    recvs.push_back(trident::irecv(pp, in.back(), prev, 0));
  }
  for (int k = 0; k < 3; ++k) {
    out.push_back(rank_tensor(rank, 6).view({2, 3}) * (k + 1));
    sends.push_back(trident::isend(pp, out.back(), next, 0));
  }
  for (int k = 0; k < 3; ++k) trident::wait_work(pp, recvs[k], "recv", prev);
  for (int k = 0; k < 3; ++k) trident::wait_work(pp, sends[k], "send", next);
  for (int k = 0; k < 3; ++k)
    require_equal(in[k], rank_tensor(pp.global(prev), 6).view({2, 3}) * (k + 1),
                  "message " + std::to_string(k) + " from the previous stage");
  std::cout << "PASS send_recv pp" << std::endl;
}

void check_gather_broadcast(const ProcessGroups& pgs, int rank) {
  std::vector<at::Tensor> parts;
  trident::all_gather(pgs.tp, rank_tensor(rank), parts);
  require(static_cast<int>(parts.size()) == pgs.tp.size(), "all_gather part count");
  for (int i = 0; i < pgs.tp.size(); ++i)
    require_equal(parts[i], rank_tensor(pgs.tp.global(i)), "all_gather part " + std::to_string(i));
  std::cout << "PASS all_gather tp" << std::endl;

  // Root is group rank 1, so a helper that mixed up group and global ranks
  // (or ignored the root) would show.
  at::Tensor t = rank_tensor(rank);
  trident::broadcast(pgs.dp, t, 1);
  require_equal(t, rank_tensor(pgs.dp.global(1)), "broadcast over dp from group rank 1");
  std::cout << "PASS broadcast dp" << std::endl;

  at::Tensor m = at::full({1}, static_cast<double>(rank), at::kDouble);
  trident::all_reduce(pgs.world, m, c10d::ReduceOp::MAX);
  require(m.item<double>() == pgs.world_size() - 1, "all_reduce max over world");
  std::cout << "PASS all_reduce_max world" << std::endl;
}

int run_check() {
  const trident::WorldEnv env = trident::read_world_env();
  const Layout layout = Layout::make(env.world_size, 2, 2, 2);
  ProcessGroups pgs(env, layout, "gloo", std::chrono::seconds(30));
  const int r = env.rank;
  check_group(pgs.tp, layout.tp_group(r), r);
  check_group(pgs.dp, layout.dp_group(r), r);
  check_group(pgs.pp, layout.pp_group(r), r);
  check_group(pgs.model_parallel, layout.model_parallel_group(r), r);
  check_group(pgs.embedding, layout.embedding_group(r), r);
  std::vector<int> all(env.world_size);
  for (int i = 0; i < env.world_size; ++i) all[i] = i;
  check_group(pgs.world, all, r);
  check_pipeline_ring(pgs.pp, r);
  check_gather_broadcast(pgs, r);
  trident::barrier(pgs.world);
  std::cout << "PASS all" << std::endl;
  return 0;
}

int run_stall() {
  const trident::WorldEnv env = trident::read_world_env();
  const Layout layout = Layout::make(env.world_size, 2, env.world_size / 2, 1);
  // The timeout bounds the rendezvous too (as in `trident train`), so it is
  // not cut below what ranks starting on two busy cores need to meet.
  ProcessGroups pgs(env, layout, "gloo", std::chrono::seconds(3));
  if (pgs.tp.rank == 0) {
    at::Tensor t = rank_tensor(env.rank);
    trident::all_reduce(pgs.tp, t);  // must throw: its partner never joins
    std::cout << "all_reduce returned without its partner" << std::endl;
    return 2;
  }
  // The partner stays alive (so the failure is a timeout, not a closed
  // connection) until the launcher stops it; bounded so nothing hangs.
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  try {
    if (mode == "check") return run_check();
    if (mode == "stall") return run_stall();
    std::cerr << "usage: mp_collectives check|stall" << std::endl;
    return 64;
  } catch (const std::exception& e) {
    std::cerr << "mp_collectives: error: " << e.what() << std::endl;
    return 1;
  }
}
