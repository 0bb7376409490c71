// Schedule generators: GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-H2, ZB-V,
// V-Half, V-Min and DualPipeV as pure action lists, plus the pass that inserts the send/recv
// actions the executor runs.
#pragma once

#include <string>
#include <vector>

#include "schedules/action.h"

namespace trident::sched {

// Compute-only generators (F/B/I/W, and one REDUCE_GRAD per rank and chunk
// right after the last action adding to that chunk's weight gradients); see
// README.md for supported (p, m, v).
Schedule gpipe(int p, int m);
Schedule one_f_one_b(int p, int m);         // PipeDream-Flush
Schedule interleaved(int p, int m, int v);  // Megatron interleaved 1F1B; v > 1 needs m >= p
Schedule zb_h1(int p, int m);               // zero-bubble ZB-H1 (Qi et al. 2023)
Schedule zb_h2(int p, int m);               // ZB-H2: up to 2p-1 micro-batches in flight, W fills the bubble
Schedule zb_v(int p, int m);                // ZB-V: v = 2, V placement, I/W split (Qi et al. 2023/2024)
Schedule v_half(int p, int m);              // V-Half: v = 2, V placement, about 1/2 of 1F1B's activations
Schedule v_min(int p, int m);               // V-Min: v = 2, V placement, about 1/3 of 1F1B's activations
Schedule dualpipe_v(int p, int m);          // DualPipeV's order: v = 2, V placement, m >= 2p (no overlap)

// zb-auto (NOTE [zb-auto] in generators_auto.cpp): the best list of a family
// between ZB-H1 and ZB-H2 for these costs, with at most memory_limit micro-
// batches of activations in flight on any rank (p gives the paper's ZB-1p, 2p
// its ZB-2p). Needs costs, so generate() does not build it; `trident schedule
// --kind zb-auto --memory-limit N` does. Throws ScheduleError on a limit < 1.
// objective: what the search minimises. kSpan is the paper's accounting (the
// longest rank's span from its first to its last compute: the bubble a run
// with optimizer post-validation sees, its next step's fill overlapping this
// one's drain); kStep is the step as a run without post-validation sees it,
// every rank starting together: what Trident trains and plans (NOTE [zb-auto]).
struct Costs;
enum class ZbObjective { kSpan, kStep };
Schedule zb_auto(int p, int m, const Costs& costs, int memory_limit, ZbObjective objective = ZbObjective::kSpan);

// Every kind generate() accepts, in the order --help lists them.
const std::vector<std::string>& schedule_kinds();

// Every kind a run can name (schedule_kinds(), "zb-auto" and "file") with the
// chunks per rank it runs: exactly that many, or 0 for any number (interleaved;
// file: the file's). The trainer's config checks are handed it (NOTE [config
// tables] in core/config.h).
struct KindChunks {
  std::string kind;
  int chunks;
};
const std::vector<KindChunks>& kind_chunks();
// The chunks per rank a kind runs when none is asked for: 2 for the V kinds
// (zb-v, v-half, v-min, dualpipev: they need exactly 2), 1 for every other kind, file and zb-auto included
// (whose v comes from the file). Throws ScheduleError for an unknown kind.
int default_chunks(const std::string& kind);
// True for the kinds that run two chunks per rank in a V (Placement::v).
bool v_kind(const std::string& kind);

// Throws ScheduleError naming kind, p, m, v when the combination is unsupported.
void check_supported(const std::string& kind, int p, int m, int v);

// Dispatches on kind and returns the compute-only schedule; v = 0 means
// default_chunks(kind).
Schedule generate_compute(const std::string& kind, int p, int m, int v = 0);
// Dispatches on kind and returns the schedule WITH communication added and
// its sends placed for the executor's groups (add_communication(), then
// defer_coupled_sends(): NOTE [coupled sends]): what the executor runs.
Schedule generate(const std::string& kind, int p, int m, int v = 0);

// Evaluation's list for `rank`: every micro-batch through the rank's chunks in
// virtual-stage order, each F with its RECV_F before and SEND_F after (no
// backward, no REDUCE_GRAD). Every rank's such list passes
// check_pair_order() (tests/unit/test_pair_order.cpp).
ActionList forward_only_actions(const StageMap& map, int rank, int microbatches);

// True when any rank's list holds a SEND_* or RECV_* action.
bool has_communication(const Schedule& s);
// True when any rank's list holds a REDUCE_GRAD.
bool has_reduce_grad(const Schedule& s);

// Inserts on every rank, for every chunk with a weight-gradient action (B or
// W), one REDUCE_GRAD right after the last of them. What every generator
// ends with, and what a schedule read from a file gets when it has none
// (NOTE [files without REDUCE_GRAD] in generators.cpp). Throws if s already
// has a REDUCE_GRAD.
Schedule add_reduce_grad(Schedule s);
// s as given when it has REDUCE_GRAD actions, add_reduce_grad(s) otherwise:
// what the loaders of schedule files call.
Schedule with_reduce_grad(Schedule s);

// Inserts, for every compute action of a compute-only schedule, RECV_F right
// before F (unless first virtual stage), SEND_F right after F (unless last),
// RECV_B right before B/I (unless last) and SEND_B right after B/I (unless
// first); the partner of an overlapped pair receives before its F (NOTE
// [overlapped pairs] in schedules/overlap.h). REDUCE_GRAD is copied where it
// is. Throws if s already has communication.
Schedule add_communication(const Schedule& s);

}  // namespace trident::sched
