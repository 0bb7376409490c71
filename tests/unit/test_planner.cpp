// The planner's cost and memory model on hand-computed cases and published
// figures, the cluster file's checks, one layout's breakdown, and the search.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/config.h"
#include "models/families.h"
#include "planner/calibration.h"
#include "planner/cluster.h"
#include "planner/model_cost.h"
#include "planner/search.h"
#include "planner/step.h"
#include "tests/error_of.h"
#include "tests/unit/planner_fixtures.h"

using namespace trident;
using namespace trident::plan;
using trident::testing::error_of;
using trident::testing::features_of;
using trident::testing::gpt;
using trident::testing::unit_cluster;
using trident::testing::unit_problem;

TEST(PlannerCost, GptStepFlopsWithRecomputationAreNarayanansFormula) {
  // Narayanan et al. 2021, Sec. 5.1: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) with full recomputation.
  for (auto [l, h, a, s, v, batch] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>{24, 2304, 24, 2048, 51200, 512},
                                      {80, 12288, 96, 2048, 51200, 2304}, {8, 64, 8, 32, 256, 16}}) {
    const ModelConfig m = gpt(l, h, a, s, v);
    const double B = batch, S = s, L = l, H = h, V = v;
    const double paper = 96 * B * S * L * H * H * (1 + S / (6 * H) + V / (16 * L * H));
    EXPECT_NEAR(step_flops(m, features_of(m), batch, "full") / paper, 1.0, 1e-12) << "h=" << h;
    // Without recomputation: 3 passes instead of 4 over the layers (72 B s l h^2 (1 + s/6h) + 6 B s h V).
    const double none = 72 * B * S * L * H * H * (1 + S / (6 * H)) + 6 * B * S * H * V;
    EXPECT_NEAR(step_flops(m, features_of(m), batch, "none") / none, 1.0, 1e-12);
  }
}

TEST(PlannerCost, LlamaLayerFlopsCountGroupedQueryAttentionAndSwiGlu) {
  ModelConfig m = gpt(2, 64, 4, 16, 256);
  m.arch = "llama", m.kv_heads = 2, m.ffn_hidden = 128;  // head_dim 16: k and v are 64 x 32 each
  const LayerFlops f = layer_flops(m, features_of(m), 3);
  const double matrices = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128;  // q, k v, o, gate up down = 36864
  EXPECT_DOUBLE_EQ(f.matmul, 2.0 * 3 * 16 * matrices);
  EXPECT_DOUBLE_EQ(f.attention, 4.0 * 3 * 16 * 16 * 64);
  EXPECT_DOUBLE_EQ(f.input_grad() + f.weight_grad(), 2 * f.forward());
}

TEST(PlannerCost, ParameterCountsMatchGpt2AndLlama2) {
  // GPT-2 small (Hugging Face gpt2): 124,439,808 parameters, the head tied to wte.
  ModelConfig g = gpt(12, 768, 12, 1024, 50257);
  EXPECT_EQ(total_params(g, features_of(g)), 124439808);
  // Llama 2 7B (Hugging Face meta-llama/Llama-2-7b-hf): 6,738,415,616 parameters, untied head.
  ModelConfig l = gpt(32, 4096, 32, 4096, 32000);
  l.arch = "llama", l.ffn_hidden = 11008, l.tie_embeddings = false;
  EXPECT_EQ(total_params(l, features_of(l)), 6738415616);
  // tp = 2: matrices and column biases halve; norms and row-parallel biases stay whole.
  const ParamCounts p2 = param_counts(g, features_of(g), 2, false);
  EXPECT_EQ(p2.layer, (4 * 768 * 768 + 2 * 768 * 3072 + 3 * 768 + 3072) / 2 + 6 * 768);
  EXPECT_EQ(p2.embedding, 50258 / 2 * 768 + 1024 * 768);  // vocab padded to a multiple of tp
  EXPECT_EQ(param_counts(g, features_of(g), 1, true).head, 2 * 768 + 50257 * 768);  // last stage's copy of wte under pp
}

TEST(PlannerMemory, ActivationsAreKorthikantisFormulaIn16Bit) {
  // Korthikanti et al. 2022: s b h (34 + 5 a s / h) bytes per layer (16-bit, dropout), tp: 10 + 24/t + 5as/(ht).
  ModelConfig m = gpt(4, 1024, 16, 2048, 51200);
  m.dropout = 0.1;
  const double s = 2048, b = 2, h = 1024, a = 16;
  const ModelFeatures shape = features_of(m);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, shape, 2, 1, false, "none", 2), s * b * h * (34 + 5 * a * s / h));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, shape, 2, 4, false, "none", 2), s * b * h * (10 + 24.0 / 4 + 5 * a * s / (h * 4)));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, shape, 2, 4, true, "none", 2), s * b * h * (34 + 5 * a * s / h) / 4);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, shape, 2, 4, true, "selective", 2), s * b * h * 34 / 4);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, shape, 2, 1, false, "full", 2), 2 * s * b * h);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, shape, 2, 4, true, "full", 2), 2 * s * b * h / 4);
  // Trident's fp32 path without dropout: 4 bytes an element, no masks, the softmax output once:
  // (4h + 4h + 2f) elements per token (f = 4h: 16h) and a s.
  m.dropout = 0;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, shape, 2, 1, false, "none", 4), s * b * (16 * h + a * s) * 4);
  EXPECT_THROW(layer_activation_bytes(m, shape, 2, 1, false, "some", 4), std::invalid_argument);
}

// A gated MLP (NOTE [model features]: Llama's SwiGLU) keeps four ffn-wide tensors
// (gate, up, silu(gate), their product) where GPT's keeps two; q, k, v at
// kv_heads x head_dim for k and v. fp32, no dropout, per token: the norms' and
// the two sublayers' inputs 4h, q h, k and v 2 kv, the projection's input h,
// the MLP 4f; the softmax output a s.
TEST(PlannerMemory, GatedMlpKeepsFourWideTensors) {
  ModelConfig m = gpt(4, 1024, 16, 2048, 51200);
  m.arch = "llama";
  m.kv_heads = 4;
  m.ffn_hidden = 3584;
  const double s = 2048, b = 2, h = 1024, a = 16, f = 3584, kv = 4 * 64;
  const ModelFeatures gated{.gated_mlp = true, .position_table = false};
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, gated, 2, 1, false, "none", 4),
                   s * b * (4 * h + h + 2 * kv + h + 4 * f + a * s) * 4);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, ModelFeatures{}, 2, 1, false, "none", 4),
                   s * b * (4 * h + h + 2 * kv + h + 2 * f + a * s) * 4);
}

// The planner prices a family by the features `trident plan` hands in (NOTE [model features]), not
// by its name: a gate on the shared experts is one more router row, parameters and FLOPs included.
TEST(PlannerCosts, ReadTheFamilysFeatures) {
  ModelConfig m = gpt(4, 64, 8, 32, 256);
  m.arch = "qwen2_moe", m.ffn_hidden = 128, m.experts = 8, m.moe_top_k = 2, m.moe_shared_ffn_hidden = 64;
  const ModelFeatures gated = features_of(m);
  ASSERT_TRUE(gated.shared_expert_gate);
  ModelFeatures ungated = gated;
  ungated.shared_expert_gate = false;
  EXPECT_EQ(mlp_shape(m, gated).router_rows, 9);
  EXPECT_EQ(mlp_shape(m, ungated).router_rows, 8);
  EXPECT_EQ(total_params(m, gated) - total_params(m, ungated), 4 * 64) << "one (1, h) gate a layer";
  EXPECT_DOUBLE_EQ(layer_flops(m, gated, 1).matmul - layer_flops(m, ungated, 1).matmul, 2.0 * 32 * 64);
  // GPT-2's block (features.gated_mlp false) has a position table, whatever model.arch says.
  EXPECT_EQ(param_counts(m, features_of(gpt(4, 64, 8, 32, 256)), 1, false).embedding, 256 * 64 + 32 * 64);
  EXPECT_EQ(param_counts(m, gated, 1, false).embedding, 256 * 64);
}

// NOTE [planned experts]: compute by the parameters a token passes, memory by all of them, against
// the published figures of the full-size MoE presets: Mixtral 8x7B 46.7B total, 12.9B active (Jiang
// et al. 2024); DeepSeek-V3 671B total, 37B activated (arXiv:2412.19437, its main model without the
// multi-token-prediction module); Qwen3-30B-A3B 30.5B total, 3.3B activated (arXiv:2505.09388). Active:
// the layers' weight GEMMs per token (forward FLOPs / 2 per token) plus the embedding and the head.
TEST(PlannerCost, MoePresetsHaveThePublishedTotalAndActiveParameters) {
  struct Case {
    const char* preset;
    double total, active;
  };
  for (const Case& c : {Case{"mixtral-8x7b", 46.7e9, 12.9e9}, Case{"deepseek-v3", 671e9, 37e9},
                        Case{"qwen3-30b-a3b", 30.5e9, 3.3e9}}) {
    const Config cfg = load_config(std::string(TRIDENT_SOURCE_DIR) + "/configs/" + c.preset + ".toml");
    const ModelConfig& m = cfg.model;
    const double per_token_layer = layer_flops(m, features_of(m), 1).matmul / 2 / static_cast<double>(m.seq_len);
    const double active = static_cast<double>(m.layers) * per_token_layer + 2.0 * static_cast<double>(m.vocab_size * m.hidden);
    EXPECT_NEAR(active / c.active, 1.0, 0.03) << c.preset << ": " << active;
    EXPECT_NEAR(static_cast<double>(total_params(m, features_of(m))) / c.total, 1.0, 0.01) << c.preset << ": " << total_params(m, features_of(m));
  }
}

TEST(PlannerStep, OneDeviceStepIsFlopsOverRateAndTpAddsRingAllReduces) {
  Problem pr;
  pr.model = gpt(4, 64, 8, 32, 256);
  pr.features = features_of(pr.model);
  pr.precision = "fp32";
  pr.cluster = unit_cluster();
  pr.global_batch = 8;
  PlanLayout l;
  l.micro_batch = 2;
  const Estimate e = evaluate(pr, l);
  EXPECT_EQ(e.microbatches, 4);
  EXPECT_NEAR(e.breakdown.compute, step_flops(pr.model, pr.features, 8, "none") / 1e12, 1e-15);
  EXPECT_DOUBLE_EQ(e.breakdown.bubble + e.breakdown.tp_comm + e.breakdown.pp_comm + e.breakdown.dp_exposed, 0.0);
  EXPECT_NEAR(e.step_s, e.breakdown.compute + e.breakdown.optimizer, 1e-15);
  // tp = 2: per layer and micro-batch 2 all-reduces forward, 2 backward of (b, s, h) fp32; a ring of 2
  // moves 2 (n-1)/n = 1 message per link: 4 * (2*32*64*4 bytes) / 1 GB/s.
  l.tp = 2;
  const Estimate t = evaluate(pr, l);
  EXPECT_NEAR(t.breakdown.tp_comm, 4.0 * 4 * 4 * (2 * 32 * 64 * 4) / 1e9, 1e-12);
  EXPECT_NEAR(t.breakdown.compute, step_flops(pr.model, pr.features, 8, "none", 2) / 2 / 1e12, 1e-12);
  // Full recomputation: one more forward of every layer, and its 2 all-reduces.
  l.recompute = "full";
  const Estimate r = evaluate(pr, l);
  EXPECT_NEAR(r.breakdown.recompute, 4.0 * layer_flops(pr.model, pr.features, 2).forward() / 2 / 1e12 * 4, 1e-12);
  EXPECT_NEAR(r.breakdown.tp_comm, t.breakdown.tp_comm * 1.5, 1e-12);
  // tp = 4 and 8: a ring of n moves 2 (n-1)/n of the message per link, 1.5 and 1.75 messages.
  l.recompute = "none";
  l.tp = 4;
  EXPECT_NEAR(evaluate(pr, l).breakdown.tp_comm, 4.0 * 4 * 4 * 1.5 * (2 * 32 * 64 * 4) / 1e9, 1e-12);
  l.tp = 8;
  EXPECT_NEAR(evaluate(pr, l).breakdown.tp_comm, 4.0 * 4 * 4 * 1.75 * (2 * 32 * 64 * 4) / 1e9, 1e-12);
}

TEST(PlannerStep, PipelineBubbleAndMemoryFollowTheSimulatedSchedule) {
  Problem pr;
  pr.model = gpt(8, 256, 8, 64, 8);  // a tiny vocabulary: the head costs ~0.3 % of a stage
  pr.precision = "fp32";
  pr.cluster = unit_cluster();
  pr.global_batch = 8;
  PlanLayout l;
  l.pp = 4;
  const Estimate e = evaluate(pr, l);
  // 1F1B with p = 4, m = 8: bubble (p-1)/(m+p-1) of the pipeline's time with free transfers.
  const double pipe = e.step_s - e.breakdown.optimizer - e.breakdown.pp_comm;
  EXPECT_GT(e.breakdown.pp_comm, 0.0);
  EXPECT_NEAR(e.breakdown.bubble / pipe, 3.0 / 11.0, 0.01);
  ASSERT_EQ(e.memory.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(e.memory[r].peak_inflight, 4 - r);  // 1F1B: p - r micro-batches alive
  const double layer = layer_activation_bytes(pr.model, pr.features, 1, 1, false, "none", 4);
  EXPECT_DOUBLE_EQ(e.memory[0].activations, 4 * 2 * layer);
  const ParamCounts pc = param_counts(pr.model, pr.features, 1, true);
  EXPECT_DOUBLE_EQ(e.memory[0].params, 4.0 * (2 * pc.layer + pc.embedding));
  EXPECT_DOUBLE_EQ(e.memory[0].optimizer, 8.0 * (2 * pc.layer + pc.embedding));
  // dp = 2 with ZeRO-1: the moments are halved, nothing else.
  pr.global_batch = 16;
  l.dp = 2, l.zero = 1;
  const Estimate z = evaluate(pr, l);
  EXPECT_DOUBLE_EQ(z.memory[0].optimizer, e.memory[0].optimizer / 2);
  EXPECT_DOUBLE_EQ(z.memory[0].grads, e.memory[0].grads);
  EXPECT_GT(z.breakdown.dp_exposed, 0.0);
}

TEST(PlannerStep, BadLayoutsNameTheirProblem) {
  Problem pr;
  pr.model = gpt(8, 64, 8, 32, 256);
  pr.features = features_of(pr.model);
  pr.precision = "fp32";
  pr.cluster = unit_cluster();
  pr.global_batch = 16;
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("tp=3,dp=1", 3)); }).find("does not divide model.heads = 8"),
            std::string::npos);
  // 8 layers on 3 stages: the planner picks 2 each and the 2 left over on the middle, then the first.
  EXPECT_EQ(evaluate(pr, parse_layout("pp=3", 3)).layout.layers, (std::vector<int>{3, 3, 2}));
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("pp=2,layers=3+4", 2)); }).find("layers sum to 7"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("mbs=3", 1)); }).find("global batch 16 is not a multiple"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([] { parse_layout("tp=2,pp=2,dp=1", 8); }).find("x dp(1) = 4 but --gpus 8"), std::string::npos);
  EXPECT_NE(error_of<PlanError>([] { parse_layout("tp=2,colour=red", 2); }).find("unknown key 'colour'"), std::string::npos);
  EXPECT_NE(error_of<PlanError>([] { parse_layout("schedule=fast", 1); }).find("schedule=fast: expected one of"),
            std::string::npos);
  // An uneven split is accepted and simulated as given.
  const Estimate u = evaluate(pr, parse_layout("pp=2,layers=5+3", 2));
  EXPECT_GT(u.memory[0].params, u.memory[1].params - 1e9);
  EXPECT_EQ(u.layout.layers, (std::vector<int>{5, 3}));
}

// NOTE [planned context parallelism]: cp = 2 halves a rank's tokens (its
// activations exactly), its gradients reduce over dp x cp, and the exchanges
// are priced on the cp group's link: all_gather's all-gather of the whole
// sequence's keys and values forward and reduce-scatter backward, exposed.
TEST(PlannerStep, ContextParallelHalvesTheTokensAndPricesItsExchanges) {
  Problem pr;
  pr.model = gpt(4, 64, 8, 64, 256);
  pr.features = features_of(pr.model);
  pr.precision = "fp32";
  pr.cluster = unit_cluster();
  pr.global_batch = 8;
  PlanLayout one;
  one.micro_batch = 2;
  const Estimate e1 = evaluate(pr, one);
  PlanLayout l = parse_layout("cp=2,mbs=2", 2);
  EXPECT_EQ(l.dp, 1);
  EXPECT_EQ(layout_text(l), "tp=1,pp=1,dp=1,schedule=1f1b,chunks=1,mbs=2,recompute=none,zero=0,sp=0,cp=2,cp_comm=p2p");
  const Estimate e2 = evaluate(pr, l);
  EXPECT_DOUBLE_EQ(e2.memory[0].activations, e1.memory[0].activations / 2);
  EXPECT_DOUBLE_EQ(e2.memory[0].optimizer, e1.memory[0].optimizer);  // ZeRO off: every rank all the moments
  EXPECT_LT(e2.breakdown.compute, e1.breakdown.compute * 0.75);
  EXPECT_GT(e2.breakdown.cp_comm, 0.0);
  EXPECT_GT(e2.breakdown.dp_exposed, 0.0);  // the gradients are averaged over the cp pair
  const Breakdown& b = e2.breakdown;
  EXPECT_NEAR(b.compute + b.recompute + b.tp_comm + b.cp_comm + b.bubble + b.pp_comm + b.dp_exposed + b.optimizer +
                  b.step_sync,
              e2.step_s, 1e-12);
  // all_gather: per layer and micro-batch an all-gather of k and v of the whole sequence
  // ((b=2) x 64 tokens x 2 x 64 fp32 = 65536 bytes; a ring of 2 moves half of it per link) forward
  // and a reduce-scatter of their gradients backward: 4 layers x 4 micro-batches x 2 x 32768 B at 1 GB/s.
  l.cp_comm = "all_gather";
  EXPECT_NEAR(evaluate(pr, l).breakdown.cp_comm, 4.0 * 4 * 2 * 32768 / 1e9, 1e-12);
  // ZeRO-1 shards the moments over dp x cp.
  l.zero = 1;
  EXPECT_DOUBLE_EQ(evaluate(pr, l).memory[0].optimizer, e1.memory[0].optimizer / 2);
  // What does not split: 2 x cp must divide seq_len; a2a needs the heads per tp rank to split;
  // cp_comm means nothing at cp = 1; the devices count cp.
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("cp=3", 3)); }).find("2 x cp does not divide model.seq_len = 64"),
            std::string::npos);
  Problem six = pr;
  six.model = gpt(4, 96, 6, 64, 256);  // 6 heads do not split over 4 ranks
  EXPECT_NE(error_of<PlanError>([&] { evaluate(six, parse_layout("cp=4,cp_comm=a2a", 4)); }).find("cp_comm=a2a: cp(4)"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([] { parse_layout("cp_comm=a2a", 1); }).find("with cp=1: no sequence is split"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([] { parse_layout("tp=2,cp=2,dp=1", 8); }).find("tp(2) x cp(2) x pp(1) x dp(1) = 4"),
            std::string::npos);
}

// NOTE [planned expert parallelism]: ep 2 of a 4-layer, 8-expert top-2 model (every layer MoE) on 2
// ranks. Each rank holds half of the experts: its parameter memory falls by half the experts'
// (4 layers x 8 x 3 x 64 x 32 / 2 fp32 values, times 4 + 4 bytes of weights and gradients); the
// all-to-alls per layer and micro-batch: two forward and two backward, each (ep-1)/ep of the
// micro-batch's k rows (1 x 32 tokens x 2 x 64 fp32 = 16384 bytes, half of it leaving) at 1 GB/s with
// no latency: 4 layers x 4 micro-batches x 4 x 8192 B. ZeRO-1 shards the experts' moments over
// dp / ep = 1 (not at all) and the rest over dp = 2.
// A 4-layer Mixtral (8 experts, top 2) on the unit cluster, global batch 8.
Problem tiny_mixtral_problem() {
  ModelConfig m = gpt(4, 64, 8, 32, 256);
  m.arch = "mixtral", m.ffn_hidden = 32, m.experts = 8, m.moe_top_k = 2, m.tie_embeddings = false;
  return unit_problem(m, 8);
}

TEST(PlannerStep, ExpertParallelismSplitsTheExpertsAndPricesItsAllToAlls) {
  const Problem pr = tiny_mixtral_problem();
  const PlanLayout dp2 = parse_layout("dp=2,mbs=1", 2), ep2 = parse_layout("dp=2,ep=2,mbs=1", 2);
  EXPECT_EQ(layout_text(ep2), "tp=1,pp=1,dp=2,schedule=1f1b,chunks=1,mbs=1,recompute=none,zero=0,sp=0,ep=2");
  const Estimate a = evaluate(pr, dp2), b = evaluate(pr, ep2);
  const double half_experts = 4.0 * 8 * 3 * 64 * 32 / 2;
  EXPECT_DOUBLE_EQ(a.memory[0].params - b.memory[0].params, half_experts * 4);
  EXPECT_DOUBLE_EQ(a.memory[0].grads - b.memory[0].grads, half_experts * 4);
  EXPECT_DOUBLE_EQ(a.breakdown.ep_comm, 0.0);
  EXPECT_NEAR(b.breakdown.ep_comm, 4.0 * 4 * 4 * 8192 / 1e9, 1e-12);
  const Breakdown& k = b.breakdown;
  EXPECT_NEAR(k.compute + k.recompute + k.tp_comm + k.cp_comm + k.ep_comm + k.bubble + k.pp_comm + k.dp_exposed +
                  k.optimizer + k.step_sync,
              b.step_s, 1e-12);
  PlanLayout z = ep2;
  z.zero = 1;
  const double experts_moments = half_experts * 8, rest = b.memory[0].optimizer - experts_moments;
  EXPECT_DOUBLE_EQ(evaluate(pr, z).memory[0].optimizer, experts_moments + rest / 2);
  // What does not fold: ep not dividing the experts or dp (cp x dp under cp), a dense model.
  Problem six = pr;
  six.model.experts = 6;
  EXPECT_NE(error_of<PlanError>([&] { evaluate(six, parse_layout("dp=4,ep=4", 4)); }).find("ep(4) must divide model.experts = 6"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("dp=2,pp=2,ep=4", 4)); }).find("and dp = 2"),
            std::string::npos);
  Problem dense = pr;
  dense.model = gpt(4, 64, 8, 32, 256);
  dense.features = features_of(dense.model);
  EXPECT_NE(error_of<PlanError>([&] { evaluate(dense, ep2); }).find("a dense model has no experts"), std::string::npos);
  // NOTE [expert grid]: the cp ranks fold into ep as the dp replicas do.
  EXPECT_NO_THROW(evaluate(pr, parse_layout("cp=2,dp=2,ep=4", 4)));
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("cp=2,dp=1,ep=4", 2)); }).find("cp x dp = 2"),
            std::string::npos);
  // etp = 1 (NOTE [planned experts]): whole experts, the tp ranks folded into ep. tp 2 x dp 2 with
  // ep 4 holds the same expert parameters per rank as etp = tp with ep 2 (a quarter of the experts
  // whole, or half of them split in two), but each tp rank dispatches half the tokens over an ep
  // group as wide: less all-to-all per rank.
  const PlanLayout whole = parse_layout("tp=2,dp=2,ep=4,etp=1,mbs=1", 4), split = parse_layout("tp=2,dp=2,ep=2,mbs=1", 4);
  EXPECT_EQ(layout_text(whole), "tp=2,pp=1,dp=2,schedule=1f1b,chunks=1,mbs=1,recompute=none,zero=0,sp=0,ep=4,etp=1");
  const Estimate w = evaluate(pr, whole), sp = evaluate(pr, split);
  EXPECT_DOUBLE_EQ(w.memory[0].params, sp.memory[0].params);
  EXPECT_GT(w.breakdown.ep_comm, 0.0);
  EXPECT_NEAR(w.breakdown.ep_comm / sp.breakdown.ep_comm, (3.0 / 4 / 2) / (1.0 / 2), 0.05);
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("tp=2,dp=2,ep=8,etp=1", 4)); })
                .find("(tp / etp) x cp x dp = 4"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("tp=4,etp=3", 4)); }).find("etp(3) must divide tp(4)"),
            std::string::npos);
  EXPECT_NO_THROW(evaluate(pr, parse_layout("tp=4,etp=2,ep=2", 4)));  // two token slices of two ranks each
  EXPECT_NE(error_of<PlanError>([&] { evaluate(dense, parse_layout("tp=2,etp=1", 2)); }).find("a dense model has no experts"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("cp=2,dp=2,ep=2,overlap_moe=1", 4)); })
                .find("overlap_moe=1 with cp(2)"),
            std::string::npos);
}

// NOTE [planned overlap]: the same layout with each backward paired with the
// forward after it; the simulator prices the pairs from the all-to-alls' share
// of F and B, and what they hide comes off the ep_comm column.
TEST(PlannerStep, OverlapMoePairsHideAllToAllsAndAreRefusedWhereNothingRuns) {
  const Problem pr = tiny_mixtral_problem();
  const PlanLayout plain = parse_layout("dp=2,ep=2,mbs=1", 2), paired = parse_layout("dp=2,ep=2,mbs=1,overlap_moe=1", 2);
  EXPECT_EQ(layout_text(paired), "tp=1,pp=1,dp=2,schedule=1f1b,chunks=1,mbs=1,recompute=none,zero=0,sp=0,ep=2,overlap_moe=1");
  const Estimate a = evaluate(pr, plain), b = evaluate(pr, paired);
  EXPECT_GT(a.breakdown.ep_comm, 0.0);
  EXPECT_LT(b.breakdown.ep_comm, a.breakdown.ep_comm);
  EXPECT_LT(b.step_s, a.step_s);
  // One stage, 4 micro-batches: F0, then F(k+1) with B(k) three times, then B3; the pipeline
  // part of the step shrinks by exactly what ep_comm lost.
  const double hidden = a.breakdown.ep_comm - b.breakdown.ep_comm;
  EXPECT_NEAR((a.step_s - a.breakdown.dp_exposed) - (b.step_s - b.breakdown.dp_exposed), hidden, 1e-12);
  const Breakdown& k = b.breakdown;
  EXPECT_NEAR(k.compute + k.recompute + k.tp_comm + k.cp_comm + k.ep_comm + k.bubble + k.pp_comm + k.dp_exposed +
                  k.optimizer + k.step_sync,
              b.step_s, 1e-12);
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("dp=2,overlap_moe=1", 2)); })
                .find("overlap_moe=1 with ep(1): there is no expert all-to-all to hide"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("dp=2,ep=2,recompute=full,overlap_moe=1", 2)); })
                .find("overlap_moe=1 with recompute=full"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { evaluate(pr, parse_layout("dp=2,ep=2,schedule=gpipe,overlap_moe=1", 2)); })
                .find("overlap_moe=1 with schedule=gpipe"),
            std::string::npos);
}

// The longest sequence a cluster trains: activations grow with the sequence
// (and attention's with its square) while a rank's share shrinks with cp, so
// searching cp up to 8 reaches a longer sequence than cp = 1 alone.
TEST(PlannerSearch, LongestSequenceGrowsWithContextParallelism) {
  Problem pr;
  pr.model = gpt(4, 256, 8, 1024, 256);
  pr.features = features_of(pr.model);
  pr.precision = "fp32";
  pr.cluster = unit_cluster();
  set_cluster_key(pr.cluster, "cluster.device_memory_gib=1");
  pr.global_batch = 8;
  SearchOptions o;
  o.gpus = 8;
  o.max_micro_batch = 1;
  const LongestSequence without = longest_sequence(pr, o);
  o.max_cp = 8;
  const LongestSequence with = longest_sequence(pr, o);
  EXPECT_GE(without.seq_len, 1024);
  EXPECT_GE(with.seq_len, 2 * without.seq_len);
  EXPECT_EQ(without.first_too_long, 2 * without.seq_len);
  for (const Estimate& e : with.at_longest.best) EXPECT_TRUE(e.fits);
  EXPECT_GT(with.at_longest.best[0].layout.cp, 1);
}

TEST(PlannerCluster, PresetsParseAndBadFilesNameKeyAndLine) {
  for (const char* f : {"dgx-a100", "dgx-h100", "dgx-h200"}) {
    const std::string path = std::string(TRIDENT_SOURCE_DIR "/configs/clusters/") + f + ".toml";
    const Cluster c = load_cluster(path);
    EXPECT_EQ(c.devices_per_node, 8) << f;
    EXPECT_EQ(parse_cluster(to_toml(c), "again").peak_tflops_bf16, c.peak_tflops_bf16);
  }
  EXPECT_EQ(load_cluster(TRIDENT_SOURCE_DIR "/configs/clusters/dgx-a100.toml").peak_tflops("bf16"), 312.0);
  const std::string base = "[cluster]\nnodes = 1\ndevices_per_node = 2\ndevice_memory_gib = 8\n[compute]\npeak_tflops_fp32 = 1\n";
  EXPECT_NE(error_of<PlanError>([&] { parse_cluster(base + "gemm_eficiency = 0.5\n", "c.toml"); })
                .find("c.toml: unknown key compute.gemm_eficiency (line 7): keys of [compute] are"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { parse_cluster(base + "gemm_efficiency = 1.5\n", "c.toml"); })
                .find("expected a fraction in (0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { parse_cluster(base + "[network]\nx = 1\n", "c.toml"); }).find("unknown section [network]"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { parse_cluster("[cluster]\nnodes = \"two\"\n", "c.toml"); })
                .find("cluster.nodes = \"two\" (line 2): expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { parse_cluster(base + "[intra_node]\nbandwidth_gbs = 0\n", "c.toml"); })
                .find("intra_node.bandwidth_gbs = 0 (line 8): expected a number > 0"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { parse_cluster("[cluster]\nnodes = 1\n", "c.toml"); }).find("missing cluster.devices_per_node"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([&] { parse_cluster(base, "c.toml").peak_tflops("bf16"); }).find("no compute.peak_tflops_bf16"),
            std::string::npos);
  Cluster c = parse_cluster(base, "c.toml");
  set_cluster_key(c, "compute.gemm_efficiency=0.25");
  EXPECT_EQ(c.gemm_efficiency, 0.25);
  EXPECT_NE(error_of<PlanError>([&] { set_cluster_key(c, "compute.speed=2"); }).find("unknown key compute.speed"),
            std::string::npos);
}

TEST(PlannerSearch, SmallCaseKeepsTheFastestThatFitAndCountsDrops) {
  Problem pr;
  pr.model = gpt(8, 64, 8, 32, 256);
  pr.features = features_of(pr.model);
  pr.precision = "fp32";
  pr.cluster = unit_cluster();
  pr.global_batch = 16;
  SearchOptions o;
  o.gpus = 4;
  o.top = 4;
  const SearchResult r = search(pr, o);
  ASSERT_EQ(r.best.size(), 4u);
  for (size_t i = 1; i < r.best.size(); ++i) EXPECT_LE(r.best[i - 1].step_s, r.best[i].step_s);
  for (const Estimate& e : r.best) {
    EXPECT_TRUE(e.fits);
    EXPECT_EQ(e.layout.tp * e.layout.pp * e.layout.dp, 4);
  }
  EXPECT_GT(r.evaluated, 100);
  EXPECT_GT(r.dropped.at("global batch not a multiple of dp x micro-batch"), 0);
  // Every layout the search ranks is one evaluate() gives the same figures for.
  EXPECT_DOUBLE_EQ(evaluate(pr, r.best[0].layout).step_s, r.best[0].step_s);
  // A device memory nothing fits in: the error lists the reasons.
  set_cluster_key(pr.cluster, "cluster.device_memory_gib=1e-6");
  EXPECT_NE(error_of<PlanError>([&] { search(pr, o); }).find("no layout of 4 devices fits:"), std::string::npos);
}

TEST(PlannerCalibration, RingTermsAreTheRingFormulasAtTwoFourAndEightRanks) {
  for (const trident::testing::RingCase& c : trident::testing::ring_cases()) {
    const RingTerms r = ring_terms({c.kind, c.ranks, 4096.0, 0});
    EXPECT_DOUBLE_EQ(r.volume_bytes, c.volume_per_byte * 4096.0) << c.kind << " on " << c.ranks << " ranks";
    EXPECT_EQ(r.steps, c.steps) << c.kind << " on " << c.ranks << " ranks";
    EXPECT_EQ(r.calls, c.calls) << c.kind << " on " << c.ranks << " ranks";
  }
}

TEST(PlannerCalibration, FitRecoversTheRingModelsBandwidthAndLatency) {
  // Timings by the hand-written ring formulas from 2 GB/s and 30 us, over 2, 4 and 8 ranks.
  const std::vector<LinkSample> s = trident::testing::model_link_samples(2.0, 30.0, 0.0);
  const LinkFit f = fit_link(s);
  EXPECT_NEAR(f.bandwidth_gbs, 2.0, 1e-6);
  EXPECT_NEAR(f.latency_us, 30.0, 1e-6);
  EXPECT_LT(f.worst_rel_error, 1e-9);
  // And the fitted model predicts a collective it was not fitted on: an all-reduce of 1 MiB on 8 ranks,
  // 1.75 MiB over each link at 2 GB/s and 14 steps of 30 us.
  EXPECT_NEAR(f.model_seconds({"all_reduce", 8, 1048576.0, 0}), 1.75 * 1048576 / 2e9 + 14 * 30e-6, 1e-12);
}

TEST(PlannerCalibration, FitHoldsLatencyAtZeroAndRejectsBadSamples) {
  // Times falling short of proportional at small sizes would need a negative latency: held at 0.
  const LinkFit f = fit_link({{"p2p", 2, 1000, 0.5e-6}, {"p2p", 2, 1e6, 1e-3}});
  EXPECT_EQ(f.latency_us, 0.0);
  EXPECT_GT(f.bandwidth_gbs, 0.0);
  EXPECT_GT(f.worst_rel_error, 0.1);  // the two rows disagree: the error says so
  EXPECT_NE(error_of([] { fit_link({{"broadcast", 2, 1000, 1e-5}, {"p2p", 2, 2000, 2e-5}}); }).find("kind 'broadcast'"),
            std::string::npos);
  EXPECT_NE(error_of([] { fit_link({{"p2p", 1, 1000, 1e-5}, {"p2p", 1, 2000, 2e-5}}); }).find("ranks >= 2"),
            std::string::npos);
  EXPECT_NE(error_of([] { fit_link({{"p2p", 2, 1000, 0}, {"p2p", 2, 2000, 2e-5}}); }).find("seconds > 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { fit_link({{"p2p", 2, 1000, 1e-5}, {"all_reduce", 2, 1000, 2e-5}}); }).find("two message sizes"),
            std::string::npos);
  EXPECT_NE(error_of([] { fit_link({{"p2p", 2, 1000, 2e-5}, {"p2p", 2, 2000, 1e-5}}); }).find("no bandwidth"),
            std::string::npos);
}

TEST(PlannerCalibration, LayerHostOverheadAddsPerLayerAndMicroBatchForItsFamilyOnly) {
  Problem pr;
  pr.model = gpt(4, 64, 4, 32, 256);
  pr.features = features_of(pr.model);
  pr.precision = "fp32";
  pr.cluster = unit_cluster();
  pr.global_batch = 8;
  const PlanLayout l = parse_layout("mbs=2", 1);  // 4 micro-batches, pp = 1
  const double base = evaluate(pr, l).step_s;
  set_cluster_key(pr.cluster, "compute.gpt_layer_forward_us=100");
  set_cluster_key(pr.cluster, "compute.gpt_layer_backward_us=200");
  set_cluster_key(pr.cluster, "compute.llama_layer_forward_us=5000");
  const Estimate e = evaluate(pr, l);
  EXPECT_NEAR(e.step_s - base, 4 * 4 * 300e-6, 1e-12);  // micro-batches x layers x (F + B)
  // Full recomputation runs each layer's forward once more in its backward: its host time too.
  const PlanLayout full = parse_layout("mbs=2,recompute=full", 1);
  const double full_delta = evaluate(pr, full).step_s;
  pr.cluster = unit_cluster();
  EXPECT_NEAR(full_delta - evaluate(pr, full).step_s, 4 * 4 * 400e-6, 1e-12);
  Cluster written = unit_cluster();
  set_cluster_key(written, "compute.llama_layer_backward_us=7");
  EXPECT_EQ(parse_cluster(to_toml(written), "again.toml").llama_layer_backward_us, 7.0);  // the file keeps it
  EXPECT_NE(error_of([] { Cluster c = unit_cluster(); set_cluster_key(c, "compute.gpt_layer_forward_us=-1"); }).find(
                "expected a number >= 0"),
            std::string::npos);
}

// zb-auto in the planner (NOTE [zb-auto in the search]): its list is searched for the layout's own
// stage costs within mem=N micro-batches in flight per rank, and the search tries it on its fastest
// pipelined layouts with the limits pp, 3pp/2 and 2pp, keeping those the device's memory holds.
TEST(PlannerZbAuto, TheListKeepsItsLimitAndMoreMemoryBuysAShorterStep) {
  Problem pr;
  pr.model = gpt(8, 256, 8, 64, 8);
  pr.features = features_of(pr.model);
  pr.precision = "fp32";
  pr.cluster = unit_cluster();
  pr.global_batch = 16;  // m = 16 at pp = 4
  const Estimate h1 = evaluate(pr, parse_layout("pp=4,schedule=zb-h1", 4));
  const Estimate z1 = evaluate(pr, parse_layout("pp=4,schedule=zb-auto,mem=4", 4));
  const Estimate z2 = evaluate(pr, parse_layout("pp=4,schedule=zb-auto,mem=8", 4));
  const Estimate z0 = evaluate(pr, parse_layout("pp=4,schedule=zb-auto,mem=1", 4));
  for (const Estimate* e : {&z0, &z1, &z2})
    for (const RankMemory& r : e->memory) EXPECT_LE(r.peak_inflight, e->layout.memory_limit) << layout_text(e->layout);
  int z2_peak = 0;
  for (const RankMemory& r : z2.memory) z2_peak = std::max(z2_peak, r.peak_inflight);
  EXPECT_GT(z2_peak, 4);                       // ZB-2p holds more than 1F1B's p on some rank ...
  EXPECT_LT(z2.step_s, z1.step_s);             // ... and buys a shorter step with it
  EXPECT_LE(z1.step_s, h1.step_s * 1.000001);  // ZB-1p: ZB-H1's memory, no longer a step
  EXPECT_GT(z0.step_s, z1.step_s);             // one micro-batch in flight: a longer step
  const double layer = layer_activation_bytes(pr.model, pr.features, 1, 1, false, "none", 4);
  EXPECT_DOUBLE_EQ(z2.memory[0].activations, z2.memory[0].peak_inflight * 2 * layer);
  EXPECT_EQ(layout_text(z2.layout), "tp=1,pp=4,dp=1,schedule=zb-auto,chunks=1,mbs=1,recompute=none,zero=0,sp=0,mem=8");
  EXPECT_NE(error_of<PlanError>([] { parse_layout("pp=2,schedule=zb-auto", 2); }).find("schedule=zb-auto needs mem=N"),
            std::string::npos);
  EXPECT_NE(error_of<PlanError>([] { parse_layout("pp=2,mem=4", 2); }).find("mem=4 with schedule=1f1b: only zb-auto"),
            std::string::npos);
}

TEST(PlannerZbAuto, TheSearchReportsTheLimitThatFitsTheDevice) {
  Problem pr;
  pr.model = gpt(8, 256, 8, 64, 8);
  pr.features = features_of(pr.model);
  pr.precision = "fp32";
  pr.cluster = unit_cluster();
  pr.global_batch = 16;
  SearchOptions o;
  o.gpus = 4;
  o.top = 100000;
  o.max_micro_batch = 1;
  auto zb_limits = [](const SearchResult& r, const std::string& base) {
    std::vector<int> out;
    for (const Estimate& e : r.best)
      if (e.layout.schedule == "zb-auto" && layout_text(e.layout) == base + std::to_string(e.layout.memory_limit))
        out.push_back(e.layout.memory_limit);
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::string base = "tp=1,pp=4,dp=1,schedule=zb-auto,chunks=1,mbs=1,recompute=none,zero=0,sp=0,mem=";
  const SearchResult all = search(pr, o);
  EXPECT_EQ(zb_limits(all, base), (std::vector<int>{4, 6, 8}));
  // A device between ZB-1p's peak and ZB-2p's: 2pp (and 3pp/2 where it does not fit) is dropped.
  const double p1 = evaluate(pr, parse_layout("pp=4,schedule=zb-auto,mem=4", 4)).peak_memory;
  const double p2 = evaluate(pr, parse_layout("pp=4,schedule=zb-auto,mem=8", 4)).peak_memory;
  ASSERT_LT(p1, p2);
  set_cluster_key(pr.cluster, "cluster.device_memory_gib=" + std::to_string((p1 + p2) / 2 / (1024.0 * 1024 * 1024)));
  const SearchResult tight = search(pr, o);
  const std::vector<int> kept = zb_limits(tight, base);
  ASSERT_FALSE(kept.empty());
  EXPECT_EQ(kept.front(), 4);
  EXPECT_LT(kept.back(), 8);
}
