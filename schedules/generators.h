// Schedule generators: GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V and
// DualPipeV as pure action lists, plus the pass that inserts the send/recv
// actions the executor runs.
#pragma once

#include <string>
#include <vector>

#include "schedules/action.h"

namespace trident::sched {

// Compute-only generators (F/B/I/W); see README.md for supported (p, m, v).
Schedule gpipe(int p, int m);
Schedule one_f_one_b(int p, int m);         // PipeDream-Flush
Schedule interleaved(int p, int m, int v);  // Megatron interleaved 1F1B; v > 1 needs m >= p
Schedule zb_h1(int p, int m);               // zero-bubble ZB-H1 (Qi et al. 2023)
Schedule zb_v(int p, int m);                // ZB-V: v = 2, V placement, I/W split (Qi et al. 2023/2024)
Schedule dualpipe_v(int p, int m);          // DualPipeV: v = 2, V placement, overlapped F/B pairs; m >= 2p

// Every kind generate() accepts, in the order --help lists them.
const std::vector<std::string>& schedule_kinds();

// Throws ScheduleError naming kind, p, m, v when the combination is unsupported.
void check_supported(const std::string& kind, int p, int m, int v);

// Dispatches on kind and returns the compute-only schedule.
Schedule generate_compute(const std::string& kind, int p, int m, int v = 1);
// Dispatches on kind and returns the schedule WITH communication added: what
// the executor runs.
Schedule generate(const std::string& kind, int p, int m, int v = 1);

// True when any rank's list holds a SEND_* or RECV_* action.
bool has_communication(const Schedule& s);

// Inserts, for every compute action of a compute-only schedule, RECV_F right
// before F (unless first virtual stage), SEND_F right after F (unless last),
// RECV_B right before B/I (unless last) and SEND_B right after B/I (unless
// first). An overlapped pair gets both receives before and both sends after
// it. Throws if s already has communication.
Schedule add_communication(const Schedule& s);

}  // namespace trident::sched
