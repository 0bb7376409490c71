// PyTorch's schedule CSV (torch.distributed.pipelining: _Action's text, as
// written by _dump_csv and read by _load_csv): one row per rank, one cell per
// action "{stage}{TYPE}{mb}", e.g. 0F0, 2I1, 1SEND_F3, 3RECV_B0, with the
// stage global (0..p*v-1) and TYPE one of F B I W SEND_F RECV_F SEND_B
// RECV_B, and "{stage}REDUCE_GRAD" (no micro-batch); empty cells are idle
// steps and are skipped. PyTorch's overlapped pair "(0F7;7B3)OVERLAP_F_B" is
// read as its two actions in order (Trident's IR has no pairs) and never
// written. Used by `trident schedule --from-csv` and
// `--format csv`.
#pragma once

#include <string>

#include "schedules/action.h"

namespace trident::sched {

// Rows in rank order, ending in '\n'.
std::string to_pytorch_csv(const Schedule& s);

// p = the number of rows, v = (largest stage + 1) / p, the placement is the
// one (loop or v) every action's stage agrees with, and m = largest
// micro-batch + 1 unless microbatches > 0 is given. Throws ScheduleError
// naming the row, the cell and what was expected (PyTorch's UNSHARD and
// RESHARD, FSDP's, have no Trident action and are rejected by name). What is
// read is as written: without REDUCE_GRAD it has none (with_reduce_grad()).
Schedule from_pytorch_csv(const std::string& text, int microbatches = 0);

}  // namespace trident::sched
