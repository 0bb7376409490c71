// Trident's MoE layer (models/common/moe_layer.h) against transformers' own blocks:
// tests/reference/moe_reference.py runs MixtralSparseMoeBlock,
// Qwen2MoeSparseMoeBlock and DeepseekV3MoE on random weights of odd sizes and
// load_balancing_loss_func on three layers' logits, and writes everything to a
// safetensors file; here the same weights and tokens go through Trident's
// router, sorted-token experts and shared experts. CTest `MoeReference`, label
// `reference`.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "models/common/experts.h"
#include "models/common/moe_layer.h"
#include "models/common/moe_losses.h"
#include "parallel/token_permutation.h"

namespace trident {
namespace {

class MoeReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("trident-moe-reference-" + std::to_string(::getpid()) + ".safetensors")).string();
    const std::string cmd = std::string(TRIDENT_PYTHON) + " " + TRIDENT_SOURCE_DIR +
                            "/tests/reference/moe_reference.py " + path + " 2>&1";
    const int status = std::system(cmd.c_str());
    ASSERT_EQ(status, 0) << "the reference script failed: " << cmd;
    for (const safetensors::Tensor& t : safetensors::read_file(path)) {
      std::vector<float> v = safetensors::to_float(t, path);
      tensors_[t.name] = at::from_blob(v.data(), t.shape, at::kFloat).clone();
    }
    std::filesystem::remove(path);
  }
  static at::Tensor get(const std::string& name) {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error("the reference file has no " + name);
    return it->second;
  }
  static at::Tensor maybe(const std::string& name) {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? at::Tensor() : it->second;
  }
  // Runs the case through Trident and compares output, chosen experts and weights, logits.
  static void check(const std::string& name, const RouterOptions& o) {
    check_router_options(o);
    MoeWeights w;
    w.router = get(name + ".router");
    w.bias = maybe(name + ".bias");
    w.gate = get(name + ".gate");
    w.up = get(name + ".up");
    w.down = get(name + ".down");
    w.shared_gate = maybe(name + ".shared_gate");
    w.shared_up = maybe(name + ".shared_up");
    w.shared_down = maybe(name + ".shared_down");
    w.shared_expert_gate = maybe(name + ".shared_expert_gate");
    const MoeOutput out = moe_forward(get(name + ".x"), w, o);
    // The same experts with the same weights (each sorted by expert per token).
    const auto sorted = out.routing.experts.sort(-1);
    EXPECT_TRUE(at::equal(std::get<0>(sorted).to(at::kFloat), get(name + ".experts"))) << name;
    const at::Tensor weights = out.routing.weights.gather(1, std::get<1>(sorted));
    EXPECT_TRUE(at::allclose(weights, get(name + ".weights"), 1e-5, 1e-6))
        << name << ": weights differ by " << (weights - get(name + ".weights")).abs().max().item<float>();
    EXPECT_TRUE(at::allclose(out.routing.logits, get(name + ".logits"), 1e-5, 1e-6)) << name;
    const at::Tensor y = get(name + ".y");
    const double diff = (out.y - y).abs().max().item<double>(), scale = y.abs().max().item<double>();
    EXPECT_LE(diff, 1e-5 * scale) << name << ": output differs by " << diff << " (largest value " << scale << ")";
  }
  static std::map<std::string, at::Tensor> tensors_;
};
std::map<std::string, at::Tensor> MoeReference::tensors_;

TEST_F(MoeReference, MixtralSoftmaxTopTwoRenormalised) {
  RouterOptions o;
  o.experts = 5;
  o.top_k = 2;
  check("mixtral", o);
}

TEST_F(MoeReference, Qwen2MoeTopThreeNotRenormalisedWithAGatedSharedExpert) {
  RouterOptions o;
  o.experts = 6;
  o.top_k = 3;
  o.norm_topk_prob = false;
  check("qwen2_moe", o);
}

// DeepSeek-V3's router as the reference file's block has it: 8 experts, top-3 of the best 2 of 4
// groups by sigmoid scores, weights scaled by 2.5.
RouterOptions deepseek_v3_router() {
  RouterOptions o;
  o.experts = 8;
  o.top_k = 3;
  o.score = "sigmoid";
  o.n_group = 4;
  o.topk_group = 2;
  o.routed_scaling_factor = 2.5;
  return o;
}

TEST_F(MoeReference, DeepseekV3SigmoidGroupsBiasAndScaling) { check("deepseek_v3", deepseek_v3_router()); }

// NOTE [MoE balancing losses]: under a sigmoid router with the correction bias and groups the
// balancing loss reads the scores normalised per token and their own top-k, as megatron-core's
// compute_routing_scores_for_aux_loss and switch_load_balancing_loss_func do.
TEST_F(MoeReference, DeepseekV3BalancingLossIsMegatronCores) {
  const RouterOptions o = deepseek_v3_router();
  const Routing r = route(get("deepseek_v3.x"), get("deepseek_v3.router"), get("deepseek_v3.bias"), o);
  EXPECT_NEAR(switch_aux_loss(r, 3).item<double>(), get("deepseek_v3.aux_loss").item<double>(), 1e-6);
  // The biased, group-limited choice differs from the scores' own top-k on these tokens, so the test
  // tells the two apart.
  EXPECT_FALSE(at::equal(std::get<0>(r.experts.sort(-1)), std::get<0>(r.aux_experts.sort(-1))));
}

TEST_F(MoeReference, PooledAuxLossIsLoadBalancingLossFunc) {
  const std::vector<at::Tensor> layers = {get("pooled.logits0"), get("pooled.logits1"), get("pooled.logits2")};
  EXPECT_NEAR(pooled_aux_loss(layers, 2).item<double>(), get("pooled.loss").item<double>(), 1e-5);
  // Pooled is not the mean of per-layer losses (what would make it a per-layer sum).
  double mean = 0;
  for (const at::Tensor& l : layers) mean += pooled_aux_loss({l}, 2).item<double>() / 3;
  EXPECT_GT(std::abs(mean - get("pooled.loss").item<double>()), 1e-4);
}

}  // namespace
}  // namespace trident
