// The planner with a measured profile (planner/profile.h) and the link
// model's per-call collective and busy-pipeline latency: the file's checks,
// and the step model on hand-computed cases.
#include <gtest/gtest.h>

#include <string>

#include "core/config.h"
#include "planner/calibration.h"
#include "planner/cluster.h"
#include "planner/model_cost.h"
#include "planner/profile.h"
#include "planner/step.h"
#include "tests/error_of.h"
#include "tests/unit/planner_fixtures.h"

using namespace trident;
using namespace trident::plan;
using trident::testing::error_of;
using trident::testing::gpt;
using trident::testing::unit_problem;

namespace {

// A profile of gpt(4, 64, 8, 32, 256) at micro-batch sizes 1 and 2: whole-model F 1 + 4 x 2 + 3 = 12 ms,
// B 24 ms (selective 26, full 36), step overhead 5 ms.
std::string profile_text() {
  std::string rows;
  for (int mbs : {1, 2})
    rows += "[[micro_batch]]\nsize = " + std::to_string(mbs) +
            "\nlayer_forward_ms = 2.0\nembedding_forward_ms = 1.0\nhead_forward_ms = 3\n"
            "layer_backward_ms = 4.0\nlayer_backward_selective_ms = 4.5\nlayer_backward_full_ms = 6.5\n"
            "embedding_backward_ms = 2.0\nembedding_backward_selective_ms = 2.0\nembedding_backward_full_ms = 2.0\n"
            "head_backward_ms = 6.0\nhead_backward_selective_ms = 6.0\nhead_backward_full_ms = 8.0\n"
            "step_overhead_ms = 5.0\nsplit_backward_ratio = 0.75\nweight_share = 0.25\npipeline_slowdown = 1.0\n";
  return "[model]\narch = \"gpt\"\nlayers = 4\nhidden = 64\nheads = 8\nkv_heads = 8\nffn_hidden = 256\nseq_len = 32\n"
         "vocab_size = 256\nprecision = \"fp32\"\nthreads = 1\n" + rows;
}

Problem problem() {
  Problem pr = unit_problem(gpt(4, 64, 8, 32, 256), 8);
  pr.profile = parse_profile(profile_text(), "p.toml");
  return pr;
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  return s.replace(s.find(from), from.size(), to);
}

}  // namespace

TEST(PlannerProfile, FileRoundTripsAndBadFilesNameTheKey) {
  const Profile p = parse_profile(profile_text(), "p.toml");
  ASSERT_EQ(p.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(p.at(2).forward_ms(4), 12.0);
  EXPECT_DOUBLE_EQ(p.at(2).backward_ms(recompute_index("full"), 4), 6.5 * 4 + 2 + 8);
  const Profile again = parse_profile(to_toml(p), "again.toml");
  EXPECT_EQ(again.micro_batches(), p.micro_batches());
  EXPECT_DOUBLE_EQ(again.at(1).layer_backward_ms[1], 4.5);
  EXPECT_EQ(again.arch, "gpt");
  EXPECT_EQ(again.ffn_hidden, 256);
  EXPECT_NE(error_of([] { parse_profile(profile_text(), "p.toml").at(4); }).find("no micro-batch size 4 (it has 1, 2)"),
            std::string::npos);
  const std::string t = profile_text();
  EXPECT_NE(error_of([&] { parse_profile(replaced(t, "head_forward_ms = 3", "head_forward_ms = -3"), "p.toml"); })
                .find("micro_batch.head_forward_ms (line"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_profile(replaced(t, "head_forward_ms = 3", "head_forwards_ms = 3"), "p.toml"); })
                .find("micro_batch.head_forwards_ms (line"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_profile(replaced(t, "head_forward_ms = 3\n", ""), "p.toml"); })
                .find("size = 1 has no head_forward_ms"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_profile(replaced(t, "weight_share = 0.25", "weight_share = 1.5"), "p.toml"); })
                .find("expected a fraction in (0, 1)"),
            std::string::npos);
  const std::string twice = error_of([&] { parse_profile(replaced(t, "\nsize = 2", "\nsize = 1"), "p.toml"); });
  EXPECT_NE(twice.find("size 1 given twice"), std::string::npos) << twice;
  EXPECT_NE(error_of([&] { parse_profile(replaced(t, "threads = 1\n", ""), "p.toml"); }).find("missing model.threads"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_profile(replaced(t, "[model]", "[modle]"), "p.toml"); }).find("unknown section [modle]"),
            std::string::npos);
  // Another model's profile is refused, every difference named; another layer count is not a difference.
  Problem pr = problem();
  pr.model.hidden = 128, pr.model.seq_len = 64, pr.model.layers = 8;
  const std::string e = error_of([&] { evaluate(pr, parse_layout("mbs=2", 1)); });
  EXPECT_NE(e.find("measured on another model: hidden 64 there, 128 here; ffn_hidden 256 there, 512 here; seq_len 32 there, 64 here"), std::string::npos)
      << e;

  pr = problem();
  pr.precision = "bf16";
  pr.cluster.peak_tflops_bf16 = 1.0;
  EXPECT_NE(error_of([&] { evaluate(pr, parse_layout("mbs=2", 1)); }).find("precision fp32 there, bf16 here"),
            std::string::npos);
  pr = problem();
  EXPECT_NE(error_of([&] { evaluate(pr, parse_layout("mbs=4", 1)); }).find("no micro-batch size 4"), std::string::npos);
}

TEST(PlannerProfile, OneDeviceStepIsTheProfilesActionsAndOverhead) {
  Problem pr = problem();
  // pp = 1: 4 micro-batches of the whole model's F and B, then the step overhead.
  const Estimate e = evaluate(pr, parse_layout("mbs=2", 1));
  EXPECT_NEAR(e.step_s, 4 * (12 + 24) * 1e-3 + 5e-3, 1e-12);
  EXPECT_NEAR(e.breakdown.optimizer, 5e-3, 1e-12);
  EXPECT_NEAR(e.breakdown.compute, 4 * 36e-3, 1e-12);
  // Recomputation: its measured backward; the difference is the recompute part.
  const Estimate full = evaluate(pr, parse_layout("mbs=2,recompute=full", 1));
  EXPECT_NEAR(full.step_s, 4 * (12 + 36) * 1e-3 + 5e-3, 1e-12);
  EXPECT_NEAR(full.breakdown.recompute, 4 * 12e-3, 1e-12);
  // A ZB schedule splits B as measured: 0.75 of the unsplit B, a quarter of it W.
  EXPECT_NEAR(evaluate(pr, parse_layout("mbs=2,schedule=zb-h1", 1)).step_s, 4 * (12 + 18) * 1e-3 + 5e-3, 1e-12);
  // An action overhead stays one per action: the whole-model F and B already held one each.
  set_cluster_key(pr.cluster, "compute.action_overhead_us=500");
  EXPECT_NEAR(evaluate(pr, parse_layout("mbs=2", 1)).step_s, e.step_s, 1e-12);
}

TEST(PlannerProfile, PipelineStagesSplitThePiecesAndPayTheirOwnActions) {
  Problem pr = problem();
  set_cluster_key(pr.cluster, "compute.action_overhead_us=1000");
  // pp = 2, 1f1b, 4 micro-batches; a transfer is (2, 32, 64) fp32 at 1 GB/s, 16.384 us. Scale of the pieces: F (12 - 1) / 12, B (24 - 1) / 24.
  // Stage 0: embedding + 2 layers, stage 1: 2 layers + head; each action adds the 1 ms overhead back.
  const double kf = 11.0 / 12, kb = 23.0 / 24;
  const double f0 = (1 + 2 * 2) * kf + 1, b0 = (2 + 2 * 4) * kb + 1;
  const double f1 = (2 * 2 + 3) * kf + 1, b1 = (2 * 4 + 6) * kb + 1;
  const Estimate e = evaluate(pr, parse_layout("pp=2,mbs=2", 2));
  // 1f1b on 2 ranks, m = 4: stage 1 waits f0 for its first input, then runs its 4 F and 4 B back to
  // back (stage 0's inputs and gradients come in time: f0 <= f1 + b1 and b1 >= f0); stage 0's last B
  // follows stage 1's last B. Two transfers lie on that path: the first activation and the last gradient.
  const double pipe = f0 + 4 * (f1 + b1) + b0 + 2 * 0.016384;
  // Overhead: each rank's share of the parameters (the larger rank's), on top.
  const ParamCounts pc = param_counts(pr.model, pr.features, 1, true);
  const double share = std::max(2.0 * pc.layer + pc.embedding, 2.0 * pc.layer + pc.head) / total_params(pr.model, pr.features);
  EXPECT_NEAR(e.step_s, (pipe + 5 * share) * 1e-3 + e.breakdown.step_sync, 1e-9);
  // The step's small collectives over 2 ranks (a ring of 2 moves the message once): the norm's 8 bytes
  // per layer, the tied word embedding's gradient (256 x 64 fp32), the logged loss and busy times.
  EXPECT_NEAR(e.breakdown.step_sync, (8.0 * 4 + 256 * 64 * 4 + 2 * 8.0 * 4) / 1e9, 1e-15);
}

TEST(PlannerProfile, TensorParallelismDividesWhatExceedsTheLayersHostTime) {
  Problem pr = problem();
  set_cluster_key(pr.cluster, "compute.gpt_layer_forward_us=1000");
  set_cluster_key(pr.cluster, "compute.gpt_layer_backward_us=1000");
  const Estimate e = evaluate(pr, parse_layout("tp=2,mbs=2", 2));
  // Per micro-batch: F = 4 x (1 + (2 - 1) / 2) + 1 + (1 + (3 - 1) / 2) = 9 ms,
  // B = 4 x (1 + 3/2) + (1 + 1/2) + (1 + 5/2) = 15 ms; compute is everything but the collectives.
  EXPECT_NEAR(e.breakdown.compute, 4 * (9 + 15) * 1e-3, 1e-12);
  EXPECT_GT(e.breakdown.tp_comm, 0.0);
}

TEST(PlannerLink, CollectiveCallTimeCountsPerCallAndSequenceParallelismDoublesTheCalls) {
  Problem pr = unit_problem(gpt(4, 64, 8, 32, 256), 8);
  const double base = evaluate(pr, parse_layout("tp=2,mbs=2", 2)).breakdown.tp_comm;
  set_cluster_key(pr.cluster, "intra_node.collective_us=100");
  // 4 layers x 4 micro-batches x 4 all-reduces (2 forward, 2 backward), each one call.
  EXPECT_NEAR(evaluate(pr, parse_layout("tp=2,mbs=2", 2)).breakdown.tp_comm - base, 4 * 4 * 4 * 100e-6, 1e-12);
  // With SP: the same volume in an all-gather and a reduce-scatter each: twice the calls.
  EXPECT_NEAR(evaluate(pr, parse_layout("tp=2,sp=1,mbs=2", 2)).breakdown.tp_comm - base, 2 * 4 * 4 * 4 * 100e-6, 1e-12);
  // A pipeline transfer takes pipeline_latency_us when it is given, else latency_us.
  const double pp_free = evaluate(pr, parse_layout("pp=2,mbs=2", 2)).breakdown.pp_comm;
  set_cluster_key(pr.cluster, "intra_node.latency_us=10");
  const double pp_lat = evaluate(pr, parse_layout("pp=2,mbs=2", 2)).breakdown.pp_comm;
  set_cluster_key(pr.cluster, "intra_node.pipeline_latency_us=1000");
  const double pp_busy = evaluate(pr, parse_layout("pp=2,mbs=2", 2)).breakdown.pp_comm;
  EXPECT_GT(pp_lat, pp_free);
  EXPECT_GT(pp_busy, 20 * pp_lat);
  EXPECT_EQ(parse_cluster(to_toml(pr.cluster), "again.toml").intra_pipeline_latency_us, 1000.0);
}

TEST(PlannerLink, FitRecoversBandwidthLatencyAndCallTime) {
  // Timings by the hand-written ring formulas (planner_fixtures.h) from 2 GB/s, 30 us per step and 400 us per call.
  const std::vector<LinkSample> s = trident::testing::model_link_samples(2.0, 30.0, 400.0);
  const LinkFit f = fit_link(s);
  EXPECT_NEAR(f.bandwidth_gbs, 2.0, 1e-6);
  EXPECT_NEAR(f.latency_us, 30.0, 1e-6);
  EXPECT_NEAR(f.collective_us, 400.0, 1e-6);
  EXPECT_LT(f.worst_rel_error, 1e-9);
  // With the latency given, only bandwidth and call time are fitted (and found again).
  const LinkFit g = fit_link(s, 30.0);
  EXPECT_EQ(g.latency_us, 30.0);
  EXPECT_NEAR(g.collective_us, 400.0, 1e-6);
  // Collectives no slower than their ring volume need no call time: held at 0, not negative.
  std::vector<LinkSample> fast;
  for (double bytes : {1024.0, 65536.0}) fast.push_back({"all_reduce", 2, bytes, bytes / 1e9});
  EXPECT_EQ(fit_link(fast).collective_us, 0.0);
}

TEST(PlannerProfile, RanksSharingTheMachineComputeSlowerByTheProfilesMeasure) {
  Problem pr = problem();
  const Estimate base = evaluate(pr, parse_layout("dp=2,mbs=2", 2));
  // The cluster's compute slots give way to the profile's measure of the machine it ran on.
  set_cluster_key(pr.cluster, "cluster.compute_slots_per_node=1");
  EXPECT_NEAR(evaluate(pr, parse_layout("dp=2,mbs=2", 2)).breakdown.compute, base.breakdown.compute, 1e-12);
  // As a 2-process pipeline it computed 1.25 x slower: 1.6 devices' worth, 2 ranks x 1.25, 4 ranks x 2.5.
  for (MicroBatchProfile& r : pr.profile->rows) r.pipeline_slowdown = 1.25;
  const Estimate shared = evaluate(pr, parse_layout("dp=2,mbs=2", 2));
  EXPECT_NEAR(shared.breakdown.compute, 1.25 * base.breakdown.compute, 1e-12);
  EXPECT_NEAR(shared.breakdown.optimizer, 1.25 * base.breakdown.optimizer, 1e-12);
  EXPECT_EQ(shared.breakdown.dp_exposed, base.breakdown.dp_exposed);  // transfers are not compute
  pr.global_batch = 16;
  const Estimate four = evaluate(pr, parse_layout("dp=4,mbs=2", 4));
  for (MicroBatchProfile& r : pr.profile->rows) r.pipeline_slowdown = 1.0;  // 4 ranks on 2 slots: x 2
  EXPECT_NEAR(four.breakdown.compute, 2.5 / 2.0 * evaluate(pr, parse_layout("dp=4,mbs=2", 4)).breakdown.compute, 1e-12);
  // One rank alone computes at its own speed.
  for (MicroBatchProfile& r : pr.profile->rows) r.pipeline_slowdown = 1.25;
  pr.global_batch = 8;
  EXPECT_NEAR(evaluate(pr, parse_layout("mbs=2", 1)).step_s, 4 * (12 + 24) * 1e-3 + 5e-3, 1e-12);
  // Even where the pipeline ran more than twice slower (a loaded machine): less than one device's
  // worth for two ranks, yet one rank alone still at its own speed.
  for (MicroBatchProfile& r : pr.profile->rows) r.pipeline_slowdown = 2.5;
  EXPECT_NEAR(evaluate(pr, parse_layout("mbs=2", 1)).step_s, 4 * (12 + 24) * 1e-3 + 5e-3, 1e-12);
  EXPECT_NEAR(evaluate(pr, parse_layout("dp=2,mbs=2", 2)).breakdown.compute, 2.5 * base.breakdown.compute, 1e-12);
}

TEST(PlannerProfile, WithoutAProfileTheClustersComputeSlotsCount) {
  Problem pr = problem();
  pr.profile.reset();
  const Estimate base = evaluate(pr, parse_layout("dp=2,mbs=2", 2));
  set_cluster_key(pr.cluster, "cluster.compute_slots_per_node=1.6");
  EXPECT_NEAR(evaluate(pr, parse_layout("dp=2,mbs=2", 2)).breakdown.compute, 1.25 * base.breakdown.compute, 1e-12);
}

TEST(PlannerLink, BusyAllReduceAndAllGatherGiveAStepAndACall) {
  // 16 KiB at 1 GB/s: the all-reduce on 2 ranks moves it once (16.384 us), the all-gather half (8.192 us).
  LinkFit fit;
  fit.bandwidth_gbs = 1.0;
  const BusyLink b = busy_link(fit, 16384, 2400 + 16.384, 1400 + 8.192);
  EXPECT_NEAR(b.step_us, 1000.0, 1e-9);
  EXPECT_NEAR(b.collective_us, 400.0, 1e-9);
  // An all-gather as slow as the all-reduce leaves no step time; neither figure goes below 0.
  const BusyLink flat = busy_link(fit, 16384, 1500, 1600);
  EXPECT_EQ(flat.step_us, 0.0);
  EXPECT_NEAR(flat.collective_us, 1600 - 8.192, 1e-9);
}

TEST(PlannerLink, BusyBandwidthIsTheLargerAllReducesExtraVolumeOverItsExtraTime) {
  // On 2 ranks an all-reduce moves its message once: 4 MiB and 16 KiB move 4,177,920 bytes apart;
  // 2000 us apart that is 2.08896 GB/s.
  EXPECT_NEAR(busy_bandwidth_gbs(16384, 800, 4 << 20, 2800), (4194304.0 - 16384.0) / 2000e-6 / 1e9, 1e-12);
  EXPECT_NEAR(busy_bandwidth_gbs(16384, 800, 4 << 20, 2800), 2.08896, 1e-12);
  // The larger no slower, or not larger: no bandwidth.
  EXPECT_EQ(busy_bandwidth_gbs(16384, 800, 4 << 20, 800), 0.0);
  EXPECT_EQ(busy_bandwidth_gbs(16384, 800, 16384, 900), 0.0);
}

// `trident schedule --profile` and zb-auto's costs: per stage its layers' F and
// B, the embedding's on the first and the head's on the last; B scaled by the
// split backward's ratio and W its weight share. Hand-computed from the
// profile above (layer F 2, B 4 / 6.5 full; embedding 1, 2; head 3, 6 / 8 full).
TEST(PlannerProfile, StageCostsOfAnEvenSplit) {
  const Profile p = parse_profile(profile_text(), "p.toml");
  sched::Costs c = stage_costs_from_profile(p, 2, "none", 4, 2);
  ASSERT_EQ(c.stage_costs.size(), 2u);
  EXPECT_DOUBLE_EQ(c.stage_costs[0].forward, 2 * 2.0 + 1);
  EXPECT_DOUBLE_EQ(c.stage_costs[0].backward, (2 * 4.0 + 2) * 0.75);
  EXPECT_DOUBLE_EQ(c.stage_costs[0].weight, (2 * 4.0 + 2) * 0.75 * 0.25);
  EXPECT_DOUBLE_EQ(c.stage_costs[1].forward, 2 * 2.0 + 3);
  EXPECT_DOUBLE_EQ(c.stage_costs[1].backward, (2 * 4.0 + 6) * 0.75);
  c = stage_costs_from_profile(p, 1, "full", 8, 4);  // more layers than profiled: the costs are per layer
  ASSERT_EQ(c.stage_costs.size(), 4u);
  EXPECT_DOUBLE_EQ(c.stage_costs[1].forward, 2 * 2.0);
  EXPECT_DOUBLE_EQ(c.stage_costs[1].backward, 2 * 6.5 * 0.75);
  EXPECT_DOUBLE_EQ(c.stage_costs[3].backward, (2 * 6.5 + 8) * 0.75);
  c = stage_costs_from_profile(p, 1, "none", 1, 1);  // one stage holds everything
  EXPECT_DOUBLE_EQ(c.stage_costs[0].forward, 2.0 + 1 + 3);
  EXPECT_NE(error_of([&] { stage_costs_from_profile(p, 1, "none", 5, 2); }).find("5 layers do not split evenly over 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { stage_costs_from_profile(p, 3, "none", 4, 2); }).find("3"), std::string::npos);
  EXPECT_NE(error_of([&] { stage_costs_from_profile(p, 1, "some", 4, 2); }).find("recompute 'some'"),
            std::string::npos);
}
