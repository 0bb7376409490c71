// Action IR of a pipeline schedule: one list of actions per pipeline rank, plus
// the compact text form (see schedules/README.md for the token grammar).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace trident::sched {

// Thrown for every caller error about a schedule: bad text, unsupported
// (p, m, v), invalid action lists, bad costs.
class ScheduleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ActionKind {
  F,       // forward of one micro-batch through one chunk
  B,       // full backward (input and weight gradients together)
  I,       // backward, input-gradient part only (frees the activations)
  W,       // backward, weight-gradient part (after its I)
  SEND_F,  // send this chunk's output activation to the next virtual stage
  RECV_F,  // receive this chunk's input activation from the previous virtual stage
  SEND_B,  // send the gradient of this chunk's input to the previous virtual stage
  RECV_B,  // receive the gradient of this chunk's output from the next virtual stage
};

struct Action {
  ActionKind kind = ActionKind::F;
  int mb = 0;     // micro-batch index, 0..m-1
  int chunk = 0;  // chunk local to the rank, 0..v-1; virtual stage = chunk * p + rank

  bool operator==(const Action& o) const { return kind == o.kind && mb == o.mb && chunk == o.chunk; }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

bool is_compute(ActionKind k);       // F, B, I, W
bool is_communication(ActionKind k);  // SEND_*, RECV_*
bool is_backward(ActionKind k);       // B or I: the action that receives/sends the gradient

// Token of one action: "F3", "B3.1", "SF3", "RB0.2" (chunk suffix only when > 0).
std::string to_token(const Action& a);

struct Schedule {
  int stages = 1;        // p: pipeline ranks
  int microbatches = 1;  // m
  int chunks = 1;        // v: virtual stages (model chunks) per rank
  std::vector<std::vector<Action>> ranks;  // ranks[r] = what rank r does, in order

  int virtual_stages() const { return stages * chunks; }
  int stage_of(int rank, int chunk) const { return chunk * stages + rank; }  // Megatron loop placement
  int rank_of(int stage) const { return stage % stages; }
  int chunk_of(int stage) const { return stage / stages; }
  bool operator==(const Schedule& o) const {
    return stages == o.stages && microbatches == o.microbatches && chunks == o.chunks && ranks == o.ranks;
  }
};

// Peer of a communication action on `rank`: SEND_F/RECV_B talk to the next
// virtual stage's rank, RECV_F/SEND_B to the previous one's. Asserts a comm kind.
int peer_rank(const Schedule& s, int rank, const Action& a);
// The action on peer_rank() that pairs with `a`: SEND_F(mb, c) on rank r pairs
// with RECV_F(mb, c') on the rank of virtual stage chunk*p + r + 1, and so on.
Action counterpart(const Schedule& s, int rank, const Action& a);

// Schedule with p, m, v set and p empty rank lists; throws on p, m or v < 1.
Schedule empty_schedule(int p, int m, int v);

// Text form: a header "pipeline p=P m=M v=V", then one line "R: tok tok ..." per
// rank in rank order. '#' starts a comment; blank lines are ignored.
std::string to_text(const Schedule& s);
Schedule parse_text(const std::string& text);  // throws ScheduleError naming line and token

}  // namespace trident::sched
