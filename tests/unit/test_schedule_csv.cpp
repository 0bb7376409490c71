// PyTorch's schedule CSV: PyTorch's own published artifacts
// (tests/data/pytorch_pipelining/SOURCE.md) read, validated, simulated, and
// DualPipeV generated action for action.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "schedules/generators.h"
#include "schedules/pytorch_csv.h"
#include "schedules/simulate.h"
#include "schedules/validate.h"
#include "../schedule_helpers.h"

using namespace trident::sched;

namespace {

std::string artifact(const std::string& name) {
  std::ifstream in(std::string(TRIDENT_SOURCE_DIR) + "/tests/data/pytorch_pipelining/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string error_of(const std::string& csv) {
  try {
    from_pytorch_csv(csv);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

// True when some rank receives from a peer in another order than the peer
// sent: what a per-pair FIFO (no tags) could not run.
bool out_of_send_order(const Schedule& s) {
  for (int src = 0; src < s.pipeline_ranks; ++src)
    for (int dst = 0; dst < s.pipeline_ranks; ++dst) {
      std::vector<Action> sent, received;  // the receive each message is for, in list order
      for (const Action& a : s.ranks[src])
        if ((a.kind == ActionKind::SEND_F || a.kind == ActionKind::SEND_B) && peer_rank(s.stage_map(), src, a) == dst)
          sent.push_back(counterpart(s.stage_map(), src, a));
      for (const Action& a : s.ranks[dst])
        if ((a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B) && peer_rank(s.stage_map(), dst, a) == src)
          received.push_back(a);
      if (sent != received) return true;
    }
  return false;
}

}  // namespace

TEST(ScheduleCsv, DualPipeVGeneratorEqualsPyTorchArtifact) {
  // ScheduleDualPipeV's published order for p=4, m=10. Its overlapped pairs
  // are read as their two actions in order (NOTE [no overlapped pairs]); it
  // has no REDUCE_GRAD, which the file loaders add where the generator puts it.
  const std::string csv = artifact("dualpipev_4rank_10mb.csv");
  const Schedule theirs = from_pytorch_csv(csv);
  EXPECT_EQ(theirs.pipeline_ranks, 4);
  EXPECT_EQ(theirs.chunks, 2);
  EXPECT_EQ(theirs.microbatches, 10);
  EXPECT_EQ(theirs.placement, Placement::v);
  EXPECT_FALSE(has_reduce_grad(theirs));
  EXPECT_EQ(dualpipe_v(4, 10), with_reduce_grad(theirs));
  // Byte for byte, once each (A;B)OVERLAP_F_B cell is written as A,B and our REDUCE_GRAD cells are left out.
  const std::string unpaired = std::regex_replace(csv, std::regex(R"(\(([^;]+);([^)]+)\)OVERLAP_F_B)"), "$1,$2");
  EXPECT_EQ(std::regex_replace(to_pytorch_csv(dualpipe_v(4, 10)), std::regex(",[0-9]+REDUCE_GRAD"), ""), unpaired);
  EXPECT_NO_THROW(validate(with_reduce_grad(theirs)));
  EXPECT_NE(std::string(to_pytorch_csv(dualpipe_v(4, 10))).find(",7REDUCE_GRAD,0I6,"), std::string::npos);
}

TEST(ScheduleCsv, InterleavedZeroBubbleComputeArtifactValidates) {
  const Schedule s = with_reduce_grad(from_pytorch_csv(artifact("zb1p_2rank_2stagep_compute.csv")));
  EXPECT_EQ(s.pipeline_ranks, 2);
  EXPECT_EQ(s.chunks, 2);
  EXPECT_EQ(s.microbatches, 8);
  EXPECT_EQ(s.placement, Placement::loop);
  const ValidationReport rep = validate(s);
  EXPECT_TRUE(rep.split_backward);
  EXPECT_EQ(rep.compute_actions, 3 * 8 * 4);
  EXPECT_EQ(rep.messages, 2 * 8 * 3);
}

TEST(ScheduleCsv, CommsArtifactAndPairOrder) {
  // PyTorch's lowered schedule posts receives early (several before the
  // compute that needs them).
  const std::string csv = artifact("zb1p_2rank_2stagep_comms.csv");
  EXPECT_EQ(to_pytorch_csv(from_pytorch_csv(csv)), csv);  // exact round trip
  const Schedule s = with_reduce_grad(from_pytorch_csv(csv));
  EXPECT_TRUE(has_communication(s));
  const ValidationReport rep = validate(s);
  EXPECT_FALSE(rep.communication_added);
  EXPECT_EQ(rep.messages, 2 * 8 * 3);

  // PyTorch's lowering keeps each pair of ranks in send order (what NCCL,
  // which has no tags, needs: NOTE [pair order])...
  EXPECT_FALSE(out_of_send_order(s));
  // ...and so does add_communication() on the same compute order: rank 0
  // sends SB0.1 (after I0.1) before SF2, so rank 1 posts RB0.1 before RF2
  // although it needs mb 2's activation first.
  const Schedule compute_only = with_reduce_grad(from_pytorch_csv(artifact("zb1p_2rank_2stagep_compute.csv")));
  const Schedule ours = add_communication(compute_only);
  EXPECT_FALSE(out_of_send_order(ours));
  EXPECT_NO_THROW(validate(ours));
  // The receive right before each compute, as add_communication() placed it
  // before, is out of send order, and refused.
  const Schedule unordered = trident::testing::unordered_communication(compute_only);
  EXPECT_TRUE(out_of_send_order(unordered));
  EXPECT_THROW(validate(unordered), ScheduleError);

  // Its compute order equals the compute artifact's once I+W pairs that
  // PyTorch merged into B are merged there too.
  const Schedule compute = from_pytorch_csv(artifact("zb1p_2rank_2stagep_compute.csv"));
  for (int r = 0; r < 2; ++r) {
    std::vector<Action> merged, lowered;
    const auto& list = compute.ranks[r];
    for (size_t i = 0; i < list.size(); ++i) {
      const bool pair = list[i].kind == ActionKind::I && i + 1 < list.size() &&
                        list[i + 1] == Action(ActionKind::W, list[i].mb, list[i].chunk);
      merged.push_back(pair ? Action(ActionKind::B, list[i].mb, list[i].chunk) : list[i]);
      i += pair ? 1 : 0;
    }
    for (const Action& a : s.ranks[r])
      if (is_compute(a.kind)) lowered.push_back(a);
    EXPECT_EQ(merged, lowered) << "rank " << r;
  }
}

TEST(ScheduleCsv, EarlyPostedReceivesAreNotWaits) {
  // The same compute order simulates to the same step time whether receives
  // are posted early (PyTorch's lowering) or right before their compute.
  Costs c;  // F=1, B=2, W=1
  const Schedule lowered = with_reduce_grad(from_pytorch_csv(artifact("zb1p_2rank_2stagep_comms.csv")));
  Schedule compute = lowered;
  for (auto& list : compute.ranks) {
    ActionList kept;
    for (const Action& a : list)
      if (!is_communication(a.kind)) kept.push_back(a);
    list = kept;
  }
  const TimelineStats early = stats(simulate(lowered, c)), late = stats(simulate(compute, c));
  EXPECT_DOUBLE_EQ(early.step_time, late.step_time);
  EXPECT_DOUBLE_EQ(early.bubble_fraction, late.bubble_fraction);
  EXPECT_DOUBLE_EQ(simulate_stats(lowered, c).step_time, early.step_time);
}

TEST(ScheduleCsv, RoundTripOfGeneratedSchedules) {
  for (const std::string kind : {"1f1b", "interleaved", "zb-h2", "zb-v", "v-half", "v-min", "dualpipev"}) {
    const int v = kind == "1f1b" || kind == "zb-h2" ? 1 : 2;
    const Schedule s = generate(kind, 3, 7, v);
    EXPECT_EQ(from_pytorch_csv(to_pytorch_csv(s), 7), s) << kind;
    EXPECT_NE(to_pytorch_csv(s).find("REDUCE_GRAD"), std::string::npos) << kind;
    const Schedule c = generate_compute(kind, 3, 7, v);
    EXPECT_EQ(from_pytorch_csv(to_pytorch_csv(c), 7), c) << kind;
  }
}

TEST(ScheduleCsv, ReduceGradCellsRoundTrip) {
  // PyTorch writes "{stage}REDUCE_GRAD" (no micro-batch), as it appends one per stage to its single-stage orders.
  const Schedule s = from_pytorch_csv("0F0,0F1,0B0,0B1,0REDUCE_GRAD\n1F0,1B0,1F1,1B1,1REDUCE_GRAD\n");
  EXPECT_EQ(s.ranks[0].back(), reduce_grad(0));
  EXPECT_EQ(s, generate_compute("1f1b", 2, 2));
  EXPECT_EQ(to_pytorch_csv(generate_compute("zb-v", 2, 4)).substr(0, 4), "0F0,");
  const Schedule v = generate_compute("zb-v", 2, 4);
  EXPECT_EQ(from_pytorch_csv(to_pytorch_csv(v)), v);
}

TEST(ScheduleCsv, ErrorsNameRowAndCell) {
  std::string e = error_of("0F0,0UNSHARD\n");
  EXPECT_NE(e.find("row 0"), std::string::npos) << e;
  EXPECT_NE(e.find("'0UNSHARD'"), std::string::npos) << e;
  EXPECT_NE(e.find("UNSHARD (FSDP) has none"), std::string::npos) << e;
  e = error_of("0F0,0X1\n");
  EXPECT_NE(e.find("'0X1'"), std::string::npos) << e;
  e = error_of("0F0\n1F0\n2F0\n3F0\n1F1\n");  // 5 rows, 4 stages
  EXPECT_NE(e.find("multiple of the rank count"), std::string::npos) << e;
  e = error_of("0F0,1F0\n2F0,3F0\n");  // stages 0 and 1 on one rank: neither placement
  EXPECT_NE(e.find("neither as loop"), std::string::npos) << e;
  e = error_of("(0F0;0SEND_F0)OVERLAP_F_B\n");
  EXPECT_NE(e.find("two compute actions"), std::string::npos) << e;
  e = error_of("0F0,0REDUCE_GRAD0\n");  // REDUCE_GRAD has no micro-batch
  EXPECT_NE(e.find("'0REDUCE_GRAD0'"), std::string::npos) << e;
  EXPECT_NE(e.find("STAGE REDUCE_GRAD"), std::string::npos) << e;
  EXPECT_NE(error_of("\n").find("empty"), std::string::npos);
}
