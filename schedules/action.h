// Action IR of a pipeline schedule: one list of actions per pipeline rank, the
// placement of virtual stages on ranks, and the compact text form (see
// schedules/README.md for the token grammar).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedules/big_alloc.h"

namespace trident::sched {

// Thrown for every caller error about a schedule: bad text, unsupported
// (p, m, v), invalid action lists, bad costs.
class ScheduleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ActionKind : uint8_t {
  F,       // forward of one micro-batch through one chunk
  B,       // full backward (input and weight gradients together)
  I,       // backward, input-gradient part only (frees the activations)
  W,       // backward, weight-gradient part (after its I)
  SEND_F,  // send this chunk's output activation to the next virtual stage
  RECV_F,  // receive this chunk's input activation from the previous virtual stage
  SEND_B,  // send the gradient of this chunk's input to the previous virtual stage
  RECV_B,  // receive the gradient of this chunk's output from the next virtual stage
  // This chunk's weight gradients are final for the step: no B or W of the
  // chunk follows on this rank. Data parallelism may reduce them from here
  // on (PyTorch's REDUCE_GRAD). One per (rank, chunk); it has no micro-batch
  // (mb is 0). Neither compute nor communication.
  REDUCE_GRAD,
};

// 8 bytes, so a planner can hold hundreds of millions of them (p=1024, m=8192,
// v=4 is 67 M compute actions).
struct Action {
  ActionKind kind = ActionKind::F;
  // kOverlapNext on an F: it runs together with the next compute of its list,
  // a B or I of another micro-batch or chunk, as one overlapped pair
  // (NOTE [overlapped pairs] in schedules/overlap.h): the pair starts when
  // both inputs are in, and each one's all-to-alls run under the other's
  // compute. No other bit is defined; the validator refuses any other use.
  uint8_t flags = 0;
  uint16_t chunk = 0;   // chunk local to the rank, 0..v-1 (virtual stage: Schedule::stage_of)
  int32_t mb = 0;       // micro-batch index, 0..m-1 (0 for REDUCE_GRAD)

  static constexpr uint8_t kOverlapNext = 1;

  Action() = default;
  Action(ActionKind k, int mb_, int chunk_ = 0) : kind(k), chunk(static_cast<uint16_t>(chunk_)), mb(mb_) {}

  bool overlaps_next() const { return (flags & kOverlapNext) != 0; }
  bool operator==(const Action& o) const {
    return kind == o.kind && mb == o.mb && chunk == o.chunk && flags == o.flags;
  }
  bool operator!=(const Action& o) const { return !(*this == o); }
};
static_assert(sizeof(Action) == 8, "Action stays 8 bytes (see the comment above)");

// One rank's list. Large lists live in huge-page arenas (NOTE [huge pages] in
// big_alloc.cpp); otherwise an ordinary vector.
using ActionList = std::vector<Action, detail::BigAllocator<Action>>;

// Inline: the simulator calls these once per action. The three classes are
// disjoint: compute (F, B, I, W), communication (SEND_*, RECV_*), and
// REDUCE_GRAD, which is neither.
inline bool is_compute(ActionKind k) { return static_cast<uint8_t>(k) <= static_cast<uint8_t>(ActionKind::W); }  // F, B, I, W
inline bool is_communication(ActionKind k) {  // SEND_F, RECV_F, SEND_B, RECV_B
  return static_cast<uint8_t>(k) >= static_cast<uint8_t>(ActionKind::SEND_F) &&
         static_cast<uint8_t>(k) <= static_cast<uint8_t>(ActionKind::RECV_B);
}
inline bool is_backward(ActionKind k) { return k == ActionKind::B || k == ActionKind::I; }  // receives/sends the gradient
// Adds to the chunk's weight gradients: B, or the W after an I.
inline bool adds_weight_grads(ActionKind k) { return k == ActionKind::B || k == ActionKind::W; }
constexpr int kActionKinds = 9;  // number of ActionKind values

// Token of one action: "F3", "B3.1", "SF3", "RB0.2" (chunk suffix only when
// > 0); REDUCE_GRAD has no micro-batch: "RD" (chunk 0), "RD.1" (chunk 1).
// The F of an overlapped pair ends in '+' ("F3+"); the text form writes the
// pair as one token, "F3+B1".
std::string to_token(const Action& a);
inline Action reduce_grad(int chunk) { return Action(ActionKind::REDUCE_GRAD, 0, chunk); }
// Position of the partner of the overlapped pair whose F is at list[i]: the
// first action after it that is not communication (NOTE [overlapped pairs]
// in schedules/overlap.h); list.size() if none.
inline size_t pair_partner(const ActionList& list, size_t i) {
  size_t j = i + 1;
  while (j < list.size() && is_communication(list[j].kind)) ++j;
  return j;
}

// NOTE [placement] Where virtual stage s (0..p*v-1, in model order) runs.
// loop: Megatron's interleaving, s = chunk*p + rank (rank r holds r, p+r, 2p+r...).
// v:    a zig-zag: even chunks run ranks 0..p-1, odd chunks ranks p-1..0, so with
//       v=2 rank r holds stages r and 2p-1-r and the turn (p-1 -> p) stays on
//       rank p-1 (ZB-V, DualPipeV; PyTorch's style="v").
enum class Placement : uint8_t { loop, v };
std::string placement_name(Placement p);  // "loop" | "v"
Placement parse_placement(const std::string& name);  // throws ScheduleError naming the value

inline int stage_of(Placement pl, int p, int rank, int chunk) {
  const bool reversed = pl == Placement::v && chunk % 2 == 1;  // odd chunks of the V run back up
  return chunk * p + (reversed ? p - 1 - rank : rank);
}
inline int rank_of(Placement pl, int p, int stage) {
  const int c = stage / p, i = stage % p;
  return pl == Placement::v && c % 2 == 1 ? p - 1 - i : i;
}
inline int chunk_of(int p, int stage) { return stage / p; }
// The virtual stages rank r holds, in chunk order (chunk c at index c): what
// the layer split builds on that rank.
std::vector<int> stages_of_rank(Placement pl, int p, int v, int rank);

// Which rank and chunk run which virtual stage: p ranks, v chunks each, and
// the placement; no action lists (what the executor needs besides its own list).
struct StageMap {
  int pipeline_ranks = 1;  // p
  int chunks = 1;          // v: chunks (model pieces, one virtual stage each) per rank
  Placement placement = Placement::loop;

  int virtual_stages() const { return pipeline_ranks * chunks; }  // p*v
  int stage_of(int rank, int chunk) const { return sched::stage_of(placement, pipeline_ranks, rank, chunk); }
  int rank_of(int stage) const { return sched::rank_of(placement, pipeline_ranks, stage); }
  int chunk_of(int stage) const { return sched::chunk_of(pipeline_ranks, stage); }
};

struct Schedule {
  int pipeline_ranks = 1;  // p
  int microbatches = 1;    // m
  int chunks = 1;          // v: chunks per rank; virtual stages are p*v
  Placement placement = Placement::loop;
  std::vector<ActionList> ranks;  // ranks[r] = what rank r does, in order

  StageMap stage_map() const { return {pipeline_ranks, chunks, placement}; }
  int virtual_stages() const { return pipeline_ranks * chunks; }
  int stage_of(int rank, int chunk) const { return sched::stage_of(placement, pipeline_ranks, rank, chunk); }
  int rank_of(int stage) const { return sched::rank_of(placement, pipeline_ranks, stage); }
  int chunk_of(int stage) const { return sched::chunk_of(pipeline_ranks, stage); }
  bool operator==(const Schedule& o) const {
    return pipeline_ranks == o.pipeline_ranks && microbatches == o.microbatches && chunks == o.chunks &&
           placement == o.placement && ranks == o.ranks;
  }
};

// Actions in all of s's lists.
inline size_t action_count(const Schedule& s) {
  size_t n = 0;
  for (const ActionList& list : s.ranks) n += list.size();
  return n;
}

// Peer of a communication action on `rank`: SEND_F/RECV_B talk to the next
// virtual stage's rank, RECV_F/SEND_B to the previous one's. Asserts a comm kind.
int peer_rank(const StageMap& map, int rank, const Action& a);
// The action on peer_rank() that pairs with `a`: SEND_F(mb, c) on rank r pairs
// with RECV_F(mb, c') on the rank of virtual stage stage_of(r, c) + 1, and so on.
Action counterpart(const StageMap& map, int rank, const Action& a);

// Schedule with p, m, v set and p empty rank lists; throws on p, m or v < 1
// or v > 65535.
Schedule empty_schedule(int p, int m, int v, Placement pl = Placement::loop);

// Text form: a header "pipeline p=P m=M v=V [placement=v]", then one line
// "R: tok tok ..." per rank in rank order. '#' starts a comment; blank lines
// are ignored.
std::string to_text(const Schedule& s);
Schedule parse_text(const std::string& text);  // throws ScheduleError naming line and token

}  // namespace trident::sched
