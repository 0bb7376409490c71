// Single-process checks of the Llama family against closed forms: parameter
// counts of the published models, the rotary frequencies with and without
// Llama 3.1's scaling, grouped-query attention as multi-head attention with
// repeated key/value heads, RMSNorm's written-out backward against autograd's,
// the TP plan's shards, recomputation and bf16.
// (Logits against transformers' LlamaForCausalLM: tests/reference/test_hf_llama.py.)
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include "core/config.h"
#include "core/cpu_memory.h"
#include "models/common/rms_norm.h"
#include "models/llama/llama.h"
#include "parallel/tensor_parallel.h"

namespace trident {
namespace {

ModelConfig small(int64_t kv_heads) {
  ModelConfig m;
  m.arch = "llama";
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.kv_heads = kv_heads;
  m.ffn_hidden = 48;
  m.seq_len = 8;
  m.vocab_size = 50;
  m.tie_embeddings = false;
  return m;
}

int64_t parameter_count(const ModelConfig& m) {
  int64_t n = 0;
  for (const ParamInfo& p : LlamaModel(m, {}).unique_params(1)) {
    int64_t e = 1;
    for (int64_t d : p.full_shape) e *= d;
    n += e;
  }
  return n;
}

// Meta's Llama 3.2 1B has 1,235,814,400 parameters (tied) and Llama 3.1 8B
// 8,030,261,248 (untied): the sums of the tensors of their safetensors files.
TEST(Llama, ParameterCountsAreThePublishedModels) {
  ModelConfig one = small(8);
  one.layers = 16, one.hidden = 2048, one.heads = 32, one.ffn_hidden = 8192, one.vocab_size = 128256;
  one.vocab_pad_multiple = 128, one.tie_embeddings = true;
  EXPECT_EQ(parameter_count(one), 1235814400);
  ModelConfig eight = one;
  eight.layers = 32, eight.hidden = 4096, eight.ffn_hidden = 14336, eight.tie_embeddings = false;
  EXPECT_EQ(parameter_count(eight), 8030261248);
}

// theta^(-2i/d), and with llama3 scaling each frequency by its band: kept
// when its wavelength is under original/high_freq_factor, divided by factor
// over original/low_freq_factor, interpolated between (written here in double).
TEST(Llama, RotaryFrequenciesAndLlama3Scaling) {
  ModelConfig m = small(2);
  m.hidden = 64, m.heads = 4;  // head_dim 16: 8 frequencies
  m.rope_theta = 10000.0;
  const at::Tensor plain = rope_inv_freq(m);
  ASSERT_EQ(plain.numel(), 8);
  for (int64_t i = 0; i < 8; ++i)
    EXPECT_NEAR(plain[i].item<double>(), std::pow(10000.0, -2.0 * static_cast<double>(i) / 16), 1e-6);
  m.rope_scaling = "llama3";
  m.rope_factor = 8, m.rope_low_freq_factor = 1, m.rope_high_freq_factor = 4, m.rope_original_max_position = 64;
  const at::Tensor scaled = rope_inv_freq(m);
  int kept = 0, slowed = 0, mixed = 0;
  for (int64_t i = 0; i < 8; ++i) {
    const double f = std::pow(10000.0, -2.0 * static_cast<double>(i) / 16), wavelen = 2 * M_PI / f;
    double want;
    if (wavelen < 64.0 / 4) {
      want = f, ++kept;
    } else if (wavelen > 64.0 / 1) {
      want = f / 8, ++slowed;
    } else {
      const double s = (64.0 / wavelen - 1) / (4 - 1);
      want = (1 - s) * f / 8 + s * f, ++mixed;
    }
    EXPECT_NEAR(scaled[i].item<double>(), want, 1e-6 * f) << "frequency " << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(slowed, 0);
  EXPECT_GT(mixed, 0);
}

// NOTE [YaRN], written here in double from the paper's definitions (Peng et al.
// 2023, section 3: the ramp between the dimensions turning beta_fast and
// beta_slow times over the original length; the mscale 0.1 m ln s + 1): head
// width 16 (8 frequencies), 64 original positions, factor 4, base 10000.
TEST(Llama, YarnFrequenciesAndScales) {
  ModelConfig m = small(2);
  m.hidden = 64, m.heads = 4;
  m.rope_theta = 10000.0;
  m.rope_scaling = "yarn";
  m.rope_factor = 4, m.rope_original_max_position = 64, m.rope_beta_fast = 32, m.rope_beta_slow = 1;
  const at::Tensor f = rope_inv_freq(m);
  ASSERT_EQ(f.numel(), 8);
  const auto dim_of = [](double rotations) { return 16 * std::log(64 / (rotations * 2 * M_PI)) / (2 * std::log(10000.0)); };
  const double low = std::max(std::floor(dim_of(32)), 0.0), high = std::min(std::ceil(dim_of(1)), 15.0);
  int kept = 0, interpolated = 0, mixed = 0;
  for (int64_t i = 0; i < 8; ++i) {
    const double base = std::pow(10000.0, -2.0 * static_cast<double>(i) / 16);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double want = base / 4 * ramp + base * (1 - ramp);
    ramp == 0 ? ++kept : ramp == 1 ? ++interpolated : ++mixed;
    EXPECT_NEAR(f[i].item<double>(), want, 1e-6 * base) << "frequency " << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(interpolated, 0);
  EXPECT_GT(mixed, 0);
  // The tables' factor: mscale(4) alone, or mscale(4, 0.707) / mscale(4, 1); MLA's softmax
  // scale times mscale(4, mscale_all_dim)^2 (DeepSeek-V3's attention).
  const double s1 = 0.1 * std::log(4.0) + 1;
  EXPECT_NEAR(m.rope_attention_factor(), s1, 1e-12);
  m.rope_mscale = 0.707, m.rope_mscale_all_dim = 1.0;
  EXPECT_NEAR(m.rope_attention_factor(), (0.0707 * std::log(4.0) + 1) / s1, 1e-12);
  m.qk_nope_head_dim = 12, m.qk_rope_head_dim = 4;
  EXPECT_NEAR(m.mla_softmax_scale(), s1 * s1 / 4.0, 1e-12);
  m.rope_scaling = "none";
  EXPECT_EQ(m.rope_attention_factor(), 1.0);
  EXPECT_EQ(m.mla_softmax_scale(), 0.25);
}

// A model with 2 key/value heads is the model with 4 whose k and v rows
// repeat each head for its two query heads.
TEST(Llama, GroupedQueryAttentionIsMultiHeadWithRepeatedKeyValueHeads) {
  const ChunkSpec all{0, 2, true, true};
  LlamaStage gqa(small(2), all, TpContext{}, 3), mha(small(4), all, TpContext{}, 4);
  const int64_t d = 8;
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < mha.params().size(); ++i) {
      Param& dst = mha.params()[i];
      const Param& src = gqa.params()[i];
      ASSERT_EQ(dst.info.name, src.info.name);
      const bool kv = dst.info.name.find(".attn.k.") != std::string::npos ||
                      dst.info.name.find(".attn.v.") != std::string::npos;
      if (!kv) {
        dst.tensor.copy_(src.tensor);
        continue;
      }
      // (2 heads x d, h) -> (4 heads x d, h): head j of 4 is head j / 2 of 2.
      dst.tensor.copy_(src.tensor.view({2, 1, d, 32}).expand({2, 2, d, 32}).reshape({4 * d, 32}));
    }
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const at::Tensor ids = at::randint(50, {2, 8}, gen);
  const at::Tensor a = gqa.logits(ids), b = mha.logits(ids);
  EXPECT_LE((a - b).abs().max().item<double>(), 1e-5 * a.abs().max().item<double>());
}

// Each TP rank holds whole query heads and whole key/value heads.
// NOTE [RMSNorm]: the one-node function against the same forward through
// autograd's operations, values and both gradients, in fp32 (within fp32
// rounding) and bf16 (within bf16 rounding of the outputs), with one backward node.
TEST(Llama, RmsNormBackwardIsAutogradsWithinRounding) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    at::manual_seed(5);
    const at::Tensor x = (at::randn({2, 6, 16}) * 3).to(dtype).requires_grad_(true);
    const at::Tensor w = (at::rand({16}) + 0.5).to(dtype).requires_grad_(true);
    const at::Tensor g = at::randn({2, 6, 16}).to(dtype);
    const at::Tensor y = rms_norm(x, w, 1e-5), ref = rms_norm_reference(x, w, 1e-5);
    ASSERT_EQ(y.scalar_type(), dtype);
    EXPECT_TRUE(at::equal(y, ref)) << "forward, " << dtype;
    // One node, whose next edges are x's and w's AccumulateGrad: no chain of elementwise nodes.
    const auto& edges = y.grad_fn()->next_edges();
    ASSERT_EQ(edges.size(), 2u);
    for (const auto& e : edges) EXPECT_EQ(e.function->name(), "torch::autograd::AccumulateGrad");
    const auto got = torch::autograd::grad({y}, {x, w}, {g});
    const auto want = torch::autograd::grad({ref}, {x, w}, {g});
    const double tol = dtype == at::kFloat ? 1e-5 : 2e-2;
    for (int i = 0; i < 2; ++i) {
      const at::Tensor a = got[i].to(at::kDouble), b = want[i].to(at::kDouble);
      EXPECT_LT(((a - b).abs().max() / b.abs().max()).item<double>(), tol) << "grad " << i << ", " << dtype;
    }
  }
}

TEST(Llama, TpPlanSplitsHeadsAndKeepsNormsWhole) {
  const ModelConfig m = small(2);
  const ChunkSpec all{0, 2, true, true};
  for (const PlannedParam& p : llama_param_plan(m, all, 2, 1)) {
    if (p.info.name == "layers.0.attn.q.weight") {
      EXPECT_EQ(p.local_shape, (std::vector<int64_t>{16, 32}));
    }
    if (p.info.name == "layers.0.attn.k.weight") {
      EXPECT_EQ(p.local_shape, (std::vector<int64_t>{8, 32}));  // one of the two kv heads
      EXPECT_EQ(p.info.shard_offset, 8);
    }
    if (p.info.name == "layers.0.attn.o.weight") {
      EXPECT_EQ(p.info.shard_dim, 1);
    }
    if (p.info.name == "layers.1.mlp.down.weight") {
      EXPECT_EQ(p.local_shape, (std::vector<int64_t>{32, 24}));
    }
    if (p.info.name.find("norm") != std::string::npos) {
      EXPECT_EQ(p.info.shard_dim, -1) << p.info.name;
      EXPECT_TRUE(p.info.no_decay) << p.info.name;
    }
    if (p.info.name == "head.weight") {
      EXPECT_FALSE(p.info.tied_copy);
    }
  }
  ModelConfig tied = m;
  tied.tie_embeddings = true;
  EXPECT_EQ(LlamaModel(tied, {}).tied_groups(2).size(), 1u);
  EXPECT_TRUE(LlamaModel(m, {}).tied_groups(2).empty());
}

// The stage's gradients after one backward of a (2, 8) batch in `dtype`;
// with `halves`, as two backwards of one sample each at half weight (the same
// gradient, summed in another order: what fp32 rounding alone changes).
std::vector<at::Tensor> grads_of(Recompute mode, at::ScalarType dtype, double* loss, bool halves = false) {
  LlamaStage c(small(2), {0, 2, true, true}, TpContext{}, 9);
  c.set_recompute(mode);
  c.set_compute_dtype(dtype);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
  const at::Tensor ids = at::randint(50, {2, 8}, gen), targets = at::randint(50, {2, 8}, gen);
  if (halves) {
    for (int64_t i = 0; i < 2; ++i) (c.forward(ids.narrow(0, i, 1), targets.narrow(0, i, 1)) * 0.5).backward();
    *loss = NAN;
  } else {
    at::Tensor l = c.forward(ids, targets);
    l.backward();
    *loss = l.item<double>();
  }
  std::vector<at::Tensor> g;
  for (Param& p : c.params()) g.push_back(p.tensor.grad().clone());
  return g;
}

// Median absolute difference of two gradient sets over all their elements.
double median_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  std::vector<at::Tensor> d;
  for (size_t i = 0; i < a.size(); ++i) d.push_back((a[i] - b[i]).abs().flatten().to(at::kDouble));
  return at::cat(d).median().item<double>();
}

// Bytes a forward of a (4, 8) batch leaves held for its backward: live CPU
// bytes after it less before, the executor's measure (runtime/executor.cpp).
int64_t held_bytes(Recompute mode) {
  install_cpu_memory_meter();
  LlamaStage c(small(2), {0, 2, true, true}, TpContext{}, 9);
  c.set_recompute(mode);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
  const at::Tensor ids = at::randint(50, {4, 8}, gen), targets = at::randint(50, {4, 8}, gen);
  const int64_t before = live_cpu_bytes();
  const at::Tensor l = c.forward(ids, targets);
  return live_cpu_bytes() - before;
}

// Recomputation replays the same ops on the same values: every gradient
// bit-identical. And it does what it is for: the forward holds fewer bytes.
TEST(Llama, RecomputationIsBitIdenticalAndHoldsFewerBytes) {
  double l0, l1, l2;
  const auto none = grads_of(Recompute::kNone, at::kFloat, &l0);
  const auto full = grads_of(Recompute::kFull, at::kFloat, &l1);
  const auto sel = grads_of(Recompute::kSelective, at::kFloat, &l2);
  EXPECT_EQ(l0, l1);
  EXPECT_EQ(l0, l2);
  for (size_t i = 0; i < none.size(); ++i) {
    EXPECT_TRUE(at::equal(none[i], full[i])) << "full, parameter " << i;
    EXPECT_TRUE(at::equal(none[i], sel[i])) << "selective, parameter " << i;
  }
  const int64_t b_none = held_bytes(Recompute::kNone), b_full = held_bytes(Recompute::kFull),
                b_sel = held_bytes(Recompute::kSelective);
  std::printf("bytes held by the forward: none %lld, selective %lld, full %lld\n", static_cast<long long>(b_none),
              static_cast<long long>(b_sel), static_cast<long long>(b_full));
  ASSERT_GT(b_full, 0);
  // Full keeps each block's (b, s, h) input; selective drops the attention core and silu(gate) * up.
  EXPECT_LT(b_full * 3, b_none);
  EXPECT_LT(b_sel * 10, b_none * 9);
}

// bf16 computes the same function within bf16's precision, and really in
// bf16: its gradients' median difference from fp32 is at least 10x the
// median difference fp32 rounding alone makes (the same batch in two halves).
TEST(Llama, Bf16IsCloseAndItsDifferenceIsBf16Rounding) {
  double l0, l_half, l3;
  const auto fp32 = grads_of(Recompute::kNone, at::kFloat, &l0);
  const auto split = grads_of(Recompute::kNone, at::kFloat, &l_half, true);
  const auto bf = grads_of(Recompute::kNone, at::kBFloat16, &l3);
  EXPECT_NEAR(l3, l0, 0.02 * l0);
  for (size_t i = 0; i < bf.size(); ++i) EXPECT_EQ(bf[i].scalar_type(), at::kFloat) << "fp32 master gradients";
  const double fp32_d = median_difference(fp32, split), bf16_d = median_difference(fp32, bf);
  std::printf("median gradient difference from fp32: fp32 in two halves %.3g, bf16 %.3g\n", fp32_d, bf16_d);
  EXPECT_GT(bf16_d, 0.0);
  EXPECT_GE(bf16_d, 10 * fp32_d);
}

}  // namespace
}  // namespace trident
