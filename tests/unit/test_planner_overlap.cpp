// The planner's overlap and compute closed forms on hand-computed cases: bucketed gradient
// reduction and parameter gathers (NOTE [bucketed overlap]), chunked tensor-parallel collectives,
// the GEMM roofline, the hierarchical data-parallel ring, the runtimes (NOTE [runtimes]) and the
// layouts users write (sp=1 at tp=1, Megatron's first/last stages, a split the planner picks).
#include <gtest/gtest.h>

#include <cmath>

#include "planner/compute_cost.h"
#include "planner/model_cost.h"
#include "planner/step.h"
#include "tests/error_of.h"
#include "tests/unit/planner_fixtures.h"

using namespace trident;
using namespace trident::plan;
using trident::testing::error_of;
using trident::testing::features_of;
using trident::testing::gpt;
using trident::testing::unit_problem;

TEST(PlannerOverlap, BucketsReadyThroughAWindowExposeTheLastOrTheBacklog) {
  // 4 buckets of 1 s ready at 2, 4, 6, 8 in a window of 8: each is sent before the next is ready,
  // the last ends at 9: 1 s past the window.
  EXPECT_DOUBLE_EQ(exposed_after_window(1.0, 4, 8.0), 1.0);
  // The same in a window of 2 (ready at 0.5, 1, 1.5, 2): sent 0.5-1.5, 1.5-2.5, 2.5-3.5, 3.5-4.5,
  // 2.5 s past the window.
  EXPECT_DOUBLE_EQ(exposed_after_window(1.0, 4, 2.0), 2.5);
  // One bucket is ready only when the window ends: nothing hides it.
  EXPECT_DOUBLE_EQ(exposed_after_window(3.0, 1, 100.0), 3.0);
  EXPECT_DOUBLE_EQ(exposed_after_window(0.0, 4, 1.0), 0.0);
}

TEST(PlannerOverlap, ChunkedCollectiveHidesBehindItsGemmButItsFirstChunk) {
  // 1 s of all-gather in 4 chunks before a 2 s GEMM in 4 pieces: the GEMM waits for the first chunk
  // only (0.25 s), the others arrive while it runs.
  EXPECT_DOUBLE_EQ(exposed_chunked(1.0, 2.0, 4), 0.25);
  // 3 s of communication: chunks end at 0.75, 1.5, 2.25, 3; GEMM pieces of 0.5 s run 0.75-1.25,
  // 1.5-2, 2.25-2.75, 3-3.5: 3.5 s in all, 1.5 s beyond the GEMM's 2.
  EXPECT_DOUBLE_EQ(exposed_chunked(3.0, 2.0, 4), 1.5);
  EXPECT_DOUBLE_EQ(exposed_chunked(3.0, 2.0, 1), 3.0);  // one chunk: nothing to pipeline
}

TEST(PlannerCompute, GemmIsTheSlowerOfItsFlopsAndItsBytes) {
  Device d;
  d.peak_flops = 1e12, d.gemm_efficiency = 0.5, d.memory_bytes_per_s = 1e9, d.elem_bytes = 2;
  // 1000^3: 2e9 FLOPs at 5e11 FLOP/s = 4 ms; three 1e6-element bf16 matrices at 1 GB/s = 6 ms.
  EXPECT_DOUBLE_EQ(gemm_seconds(1000, 1000, 1000, d), 6e-3);
  d.memory_bytes_per_s = 1e12;  // 6 us of traffic: the FLOPs rule
  EXPECT_DOUBLE_EQ(gemm_seconds(1000, 1000, 1000, d), 4e-3);
  // A fixed time per call, once for a batched call of 8.
  d.gemm_fixed_s = 1e-5;
  EXPECT_DOUBLE_EQ(gemm_seconds(1000, 1000, 1000, d), 4e-3 + 1e-5);
  EXPECT_DOUBLE_EQ(gemm_seconds(1000, 1000, 1000, d, 8), 8 * 4e-3 + 1e-5);
}

TEST(PlannerCompute, LayerGemmsAreTheLayersMatmulFlopsAndFlashRunsHalfTheSquare) {
  const ModelConfig m = gpt(2, 64, 8, 32, 256);
  Device d;
  d.peak_flops = 1e12, d.gemm_efficiency = 0.5, d.attention_efficiency = 0.25, d.memory_bytes_per_s = 1e30;
  d.elem_bytes = 2;
  const LayerFlops lf = layer_flops(m, features_of(m), 2);
  const LayerTimes g = layer_times(m, features_of(m), 2, 2, false, AttentionKernel::Gemm, d);
  EXPECT_NEAR(g.gemm_f, lf.matmul / 2 / 5e11, 1e-18);
  EXPECT_NEAR(g.attn_f, lf.attention / 2 / 5e11, 1e-18);
  EXPECT_NEAR(g.attn_b, 2 * g.attn_f, 1e-18);
  EXPECT_EQ(g.elem_f, 0.0);  // the runtime's per-layer host time covers it
  // Flash: a causal kernel executes half the square, at attention_efficiency; backward 2.5x.
  const LayerTimes f = layer_times(m, features_of(m), 2, 2, false, AttentionKernel::Flash, d);
  EXPECT_NEAR(f.attn_f, lf.attention / 2 / 2 / 2.5e11, 1e-18);
  EXPECT_NEAR(f.attn_b, 2.5 * f.attn_f, 1e-18);
  // Element-wise traffic per token, GPT without dropout, no SP: forward 10h e + 2f e / tp.
  d.memory_bytes_per_s = 1e9;
  const LayerTimes e = layer_times(m, features_of(m), 2, 2, false, AttentionKernel::Flash, d);
  EXPECT_NEAR(e.elem_f, 2 * 32 * (10.0 * 64 * 2 + 2.0 * 256 * 2 / 2) / 1e9, 1e-15);
}

namespace {

// Links fast enough that every bucket hides but the one that cannot (unit cluster, 1 TFLOP/s).
Problem fast_link_problem(const ModelConfig& m, int64_t batch) {
  Problem pr = unit_problem(m, batch);
  set_cluster_key(pr.cluster, "intra_node.bandwidth_gbs=1e6");
  return pr;
}

}  // namespace

TEST(PlannerRuntime, ZeroGatherHiddenBehindTheNextForwardBucketByBucket) {
  const ModelConfig m = gpt(4, 2048, 16, 64, 256);
  Problem pr = fast_link_problem(m, 2);
  PlanLayout l;
  l.dp = 2, l.zero = 1;
  const ParamCounts pc = param_counts(m, features_of(m), 1, false);
  const double params = 4.0 * pc.layer + pc.embedding + pc.head, grads = 4 * params, bw = 1e15;
  // Trident: 25 MiB buckets; the reduce-scatter hides but its last bucket, and so does the fp32
  // all-gather in the next forward (parallel.overlap_param_gather) but its first bucket. A ring of 2
  // moves half of each bucket.
  const double nt = std::ceil(grads / (25.0 * 1024 * 1024));
  ASSERT_GT(nt, 1);
  const Estimate t = evaluate(pr, l);
  EXPECT_NEAR(t.breakdown.dp_exposed, 0.5 * grads / nt / bw + 0.5 * grads / nt / bw, 1e-18);
  // Without it the all-gather runs whole after the step, exposed.
  pr.overlap_param_gather = false;
  EXPECT_NEAR(evaluate(pr, l).breakdown.dp_exposed, 0.5 * grads / nt / bw + 0.5 * grads / bw, 1e-18);
  pr.overlap_param_gather = true;
  // Megatron: buckets of max(4e7, 1e6 x dp) parameters; the reduce-scatter's last bucket and the
  // all-gather's first (fp32 run: 4-byte parameters) are all that show.
  pr.runtime = "megatron";
  const double nm = std::ceil(grads / (4e7 * 4));
  ASSERT_GT(nm, 1);
  const Estimate g = evaluate(pr, l);
  EXPECT_NEAR(g.breakdown.dp_exposed, 0.5 * grads / nm / bw + 0.5 * params * 4 / nm / bw, 1e-18);
  // Megatron 2021: one all-reduce after the backward, nothing hidden.
  pr.runtime = "megatron-2021";
  l.zero = 0;
  EXPECT_NEAR(evaluate(pr, l).breakdown.dp_exposed, grads / bw, 1e-18);
  pr.runtime = "deepspeed";
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, l); }).find("expected trident, megatron or megatron-2021"),
            std::string::npos);
}

TEST(PlannerRuntime, MegatronSplitsSequenceParallelCollectivesBehindTheirGemms) {
  const ModelConfig m = gpt(2, 512, 8, 64, 256);
  Problem pr = unit_problem(m, 2);
  set_cluster_key(pr.cluster, "intra_node.bandwidth_gbs=1000");
  const PlanLayout l = parse_layout("tp=2,sp=1", 2);
  // One all-gather or reduce-scatter of the (b, s, h) fp32 activation over 2 ranks: half of it.
  const double c = 0.5 * (64.0 * 512 * 4) / 1e12;
  // Trident: per layer and micro-batch, 2 passes of 2 all-gather + reduce-scatter pairs, all exposed.
  EXPECT_NEAR(evaluate(pr, l).breakdown.tp_comm, 2 * 2 * 2 * (2 * c) * 2, 1e-15);
  // Megatron: each of the 4 collectives of a pass in 2 chunks; every GEMM outlasts its collective
  // (the smallest, 64 x 512 x 256, is 17 us against c = 66 ns), so only the first chunk shows.
  pr.runtime = "megatron";
  EXPECT_NEAR(evaluate(pr, l).breakdown.tp_comm, 2 * 2 * 2 * (4 * c / 2), 1e-15);
}

TEST(PlannerRuntime, DataParallelRingAcrossNodesUsesEveryNicOfTheGroupOnANode) {
  Problem pr = unit_problem(gpt(2, 64, 8, 32, 256), 16);
  pr.cluster = parse_cluster(
      "[cluster]\nnodes = 2\ndevices_per_node = 8\ndevice_memory_gib = 16\n"
      "[compute]\npeak_tflops_fp32 = 1.0\nmemory_bandwidth_gbs = 1e12\n"
      "[intra_node]\nbandwidth_gbs = 100.0\n[inter_node]\nbandwidth_gbs = 1.0\n",
      "two.toml");
  pr.overlap_grad_reduce = false;
  const ParamCounts pc = param_counts(pr.model, pr.features, 1, false);
  const double grads = 4.0 * (2 * pc.layer + pc.embedding + pc.head);
  // dp = 16 over 2 nodes: 8 ranks a node, 8 NICs carry the ring's inter-node part: 8 GB/s, not 1.
  const Estimate e = evaluate(pr, parse_layout("dp=16", 16));
  EXPECT_NEAR(e.breakdown.dp_exposed, 2.0 * 15 / 16 * grads / 8e9, 1e-15);
}

TEST(PlannerLayout, SpAtTpOneIsOffAndUnevenSplitsAreMegatronsOrPicked) {
  EXPECT_FALSE(parse_layout("sp=1", 1).sequence_parallel);
  EXPECT_TRUE(parse_layout("tp=2,sp=1", 2).sequence_parallel);
  Problem pr = unit_problem(gpt(10, 64, 8, 32, 256), 8);
  EXPECT_GT(evaluate(pr, parse_layout("sp=1", 1)).step_s, 0.0);
  // Megatron's decoder_first/last_pipeline_num_layers: the ends as given, the rest even.
  EXPECT_EQ(evaluate(pr, parse_layout("pp=4,first=1,last=3", 4)).layout.layers, (std::vector<int>{1, 3, 3, 3}));
  EXPECT_EQ(evaluate(pr, parse_layout("pp=4,first=4", 4)).layout.layers, (std::vector<int>{4, 2, 2, 2}));
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("pp=4,first=1,last=2", 4)); })
                .find("leaves 7, not a positive multiple of the 2 other stages"),
            std::string::npos);
  // 10 layers on 4 stages: 2 each, the 2 left over to the middle stages.
  EXPECT_EQ(evaluate(pr, parse_layout("pp=4", 4)).layout.layers, (std::vector<int>{2, 3, 3, 2}));
  // 11: the third left over goes to the first stage (the embedding), not the last (the LM head).
  pr.model.layers = 11;
  EXPECT_EQ(evaluate(pr, parse_layout("pp=4", 4)).layout.layers, (std::vector<int>{3, 3, 3, 2}));
  EXPECT_NE(error_of<PlanError>([] { parse_layout("pp=2,first=1,layers=5+5", 2); }).find("not both"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("first=4", 1)); }).find("need pp x chunks > 1"),
            std::string::npos);
}
