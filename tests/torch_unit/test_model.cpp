// Single-process checks of the model's building blocks: init independence of
// the layout, the pipeline split, AdamW against a hand computation, the
// deferred weight-gradient path, and a short training run whose loss falls.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <tuple>

#include "core/config.h"
#include "core/lr_schedule.h"
#include "core/optimizer.h"
#include "models/gpt/gpt.h"
#include "core/param.h"
#include "parallel/recompute.h"
#include "parallel/tensor_parallel.h"
#include "tests/run_helpers.h"

namespace trident {
namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.ffn_hidden = 64;
  m.seq_len = 8;
  m.vocab_size = 50;  // padded to 56 at tp 1, 64 at tp 4 (multiple 8 x tp)
  return m;
}

TEST(Init, ShardIsASliceOfTheFullTensorOnEveryTpRank) {
  // The full tensors are built once (at tp = 1, where nothing is sharded), and
  // each shard is checked against rows/columns picked by index, at offsets the
  // test computes itself: rank r of tp holds block r of size full/tp along the
  // split dimension. Nothing of the plan's own offsets or narrow() is reused.
  const ModelConfig cfg = tiny_model();
  const ChunkSpec all{0, cfg.layers, true, true};
  for (int64_t tp : {2, 4}) {
    std::map<std::string, at::Tensor> full;  // per tp: the padded vocabulary depends on it
    for (int64_t rank = 0; rank < tp; ++rank) {
      for (const PlannedParam& p : gpt_param_plan(cfg, all, tp, rank)) {
        if (!full.count(p.info.name)) {
          ParamInfo whole = p.info;
          whole.shard_dim = -1;
          whole.shard_offset = 0;
          full[p.info.name] = init_full_tensor(7, whole);
        }
        const at::Tensor& f = full[p.info.name];
        at::Tensor shard = init_shard(7, p.info, p.local_shape).detach();
        at::Tensor expect = f;
        if (p.info.shard_dim >= 0) {
          const int64_t d = p.info.shard_dim, block = f.size(d) / tp;
          expect = f.index_select(d, at::arange(rank * block, (rank + 1) * block, at::kLong));
        }
        ASSERT_TRUE(at::equal(shard, expect)) << p.info.name << " tp " << tp << " rank " << rank;
      }
    }
  }
}

TEST(Init, DependsOnlyOnSeedAndName) {
  ParamInfo a;
  a.name = "layers.0.mlp.fc.weight";
  a.full_shape = {16, 8};
  ParamInfo b = a;
  b.name = "layers.1.mlp.fc.weight";
  EXPECT_TRUE(at::equal(init_full_tensor(3, a), init_full_tensor(3, a)));
  EXPECT_FALSE(at::equal(init_full_tensor(3, a), init_full_tensor(3, b)));
  EXPECT_FALSE(at::equal(init_full_tensor(3, a), init_full_tensor(4, a)));
  EXPECT_NEAR(init_full_tensor(3, a).std().item<double>(), 0.02, 0.006);
}

TEST(Init, PaddedVocabularyRowsStartAtZeroAndTiedCopiesAgree) {
  const ModelConfig cfg = tiny_model();
  auto plan = gpt_param_plan(cfg, {0, cfg.layers, true, true}, 1, 0);
  const PlannedParam* emb = nullptr;
  const PlannedParam* head = nullptr;
  for (const auto& p : plan)
    if (p.info.name == "embedding.word.weight") (p.info.tied_copy ? head : emb) = &p;
  ASSERT_TRUE(emb && head);
  at::Tensor e = init_full_tensor(1, emb->info), h = init_full_tensor(1, head->info);
  EXPECT_TRUE(at::equal(e, h));
  EXPECT_EQ(e.size(0), 56);
  EXPECT_EQ(e.narrow(0, 50, 6).abs().sum().item<double>(), 0.0);
  EXPECT_GT(e.narrow(0, 0, 50).abs().sum().item<double>(), 0.0);
}

TEST(Split, UniformExplicitAndErrors) {
  auto specs = split_layers(8, 4, {});
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_TRUE(specs[0].has_embedding);
  EXPECT_FALSE(specs[0].has_head);
  EXPECT_TRUE(specs[3].has_head);
  EXPECT_EQ(specs[2].first_layer, 4);
  specs = split_layers(8, 4, {1, 3, 3, 1});
  EXPECT_EQ(specs[1].first_layer, 1);
  EXPECT_EQ(specs[3].num_layers, 1);
  // check_config owns these rules; here they are internal invariants.
  EXPECT_THROW(split_layers(6, 4, {}), std::logic_error);
  EXPECT_THROW(split_layers(8, 4, {2, 2, 2}), std::logic_error);
  EXPECT_THROW(split_layers(8, 2, {4, 5}), std::logic_error);
}

TEST(AdamW, OneStepEqualsHandComputation) {
  Param p;
  p.tensor = at::tensor({1.0, -2.0, 0.5}, at::kDouble).set_requires_grad(true);
  p.info.name = "w";
  Param bias;
  bias.tensor = at::tensor({0.25}, at::kDouble).set_requires_grad(true);
  bias.info.no_decay = true;
  p.tensor.mutable_grad() = at::tensor({0.1, 0.2, -0.3}, at::kDouble);
  bias.tensor.mutable_grad() = at::tensor({-0.5}, at::kDouble);
  AdamWOptions o{0.9, 0.95, 1e-8, 0.1};
  AdamW opt(std::vector<Param*>{&p, &bias}, o);
  const double lr = 1e-2;
  opt.step(lr);
  // Step 1: m = (1-b1) g, v = (1-b2) g^2, mhat = g, vhat = g^2, so the update
  // is lr * g / (|g| + eps) after decoupled decay w *= 1 - lr*wd.
  const double w0[] = {1.0, -2.0, 0.5}, g[] = {0.1, 0.2, -0.3};
  for (int i = 0; i < 3; ++i) {
    const double expect = w0[i] * (1 - lr * 0.1) - lr * g[i] / (std::fabs(g[i]) + 1e-8);
    EXPECT_NEAR(p.tensor[i].item<double>(), expect, 1e-12);
  }
  EXPECT_NEAR(bias.tensor[0].item<double>(), 0.25 + lr * 0.5 / (0.5 + 1e-8), 1e-12);  // no decay
  // Step 2 with a new gradient, against the textbook formulas.
  p.tensor.mutable_grad() = at::tensor({0.3, 0.0, 0.1}, at::kDouble);
  const double w1 = p.tensor[0].item<double>();
  opt.step(lr);
  const double m = 0.9 * 0.1 * 0.1 + 0.1 * 0.3, v = 0.95 * 0.05 * 0.01 + 0.05 * 0.09;
  const double mhat = m / (1 - 0.81), vhat = v / (1 - 0.9025);
  EXPECT_NEAR(p.tensor[0].item<double>(), w1 * (1 - lr * 0.1) - lr * mhat / (std::sqrt(vhat) + 1e-8), 1e-12);
}

TEST(LrSchedule, WarmupThenCosineToFloor) {
  EXPECT_DOUBLE_EQ(lr_at(0, 100, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(9, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(10, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_NEAR(lr_at(99, 100, 10, 1.0, 0.1), 0.1, 1e-12);
  EXPECT_GT(lr_at(40, 100, 10, 1.0, 0.1), lr_at(60, 100, 10, 1.0, 0.1));
}

// NOTE [whole-vocabulary cross-entropy] (tp = 1) against PyTorch's own
// cross_entropy in float64 over the valid columns: per-token losses within
// fp32 rounding, also for tokens 90 and 150 nats below their row's best
// (probabilities that are a subnormal float and that underflow to 0); the
// gradient within fp32 rounding, and 0 in the padded columns.
TEST(CrossEntropy, WholeVocabularyIsPyTorchsCrossEntropy) {
  TpContext tp;
  const int64_t V = 40, valid = 37;
  at::manual_seed(3);
  at::Tensor L = at::randn({2, 8, V}) * 3;
  const at::Tensor targets = at::randint(0, valid, {2, 8}, at::kLong);
  const at::Tensor G = at::rand({2, 8}) + 0.5;
  L[0][1][targets[0][1].item<int64_t>()] = -90;  // 90 nats below: p is about e^-93, subnormal
  L[1][5].zero_();
  L[1][5][targets[1][5].item<int64_t>()] = -150;  // p underflows to 0
  at::Tensor x = L.clone().requires_grad_(true);
  const at::Tensor loss = vocab_parallel_cross_entropy(tp, x, targets, 0, valid);
  loss.backward(G);
  at::Tensor x64 = L.to(at::kDouble).requires_grad_(true);
  const at::Tensor ref = at::cross_entropy_loss(x64.narrow(2, 0, valid).reshape({-1, valid}), targets.view(-1), {},
                                                at::Reduction::None)
                             .view({2, 8});
  ref.backward(G.to(at::kDouble));
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t s = 0; s < 8; ++s) {
      const double got = loss[b][s].item<double>(), want = ref[b][s].item<double>();
      EXPECT_NEAR(got, want, 1e-5 * std::max(1.0, want)) << b << "," << s;
    }
  }
  EXPECT_GT(ref[0][1].item<double>(), 90.0);
  EXPECT_GT(ref[1][5].item<double>(), 150.0);
  const at::Tensor grad = x.grad().to(at::kDouble);
  EXPECT_LT((grad.narrow(2, 0, valid) - x64.grad().narrow(2, 0, valid)).abs().max().item<double>(), 1e-6);
  EXPECT_EQ(grad.narrow(2, valid, V - valid).abs().max().item<double>(), 0.0);
}

// The deferred (I then W) backward gives the same weight gradients, bit for bit.
TEST(DeferredWeightGrads, BitIdenticalToTheFullBackward) {
  const ModelConfig cfg = tiny_model();
  TpContext tp;
  at::Tensor ids = at::randint(0, cfg.vocab_size, {2, cfg.seq_len}, at::kLong);
  at::Tensor tgt = at::randint(0, cfg.vocab_size, {2, cfg.seq_len}, at::kLong);
  GptStage a(cfg, {0, cfg.layers, true, true}, tp, 5), b(cfg, {0, cfg.layers, true, true}, tp, 5);
  a.forward(ids, tgt).backward();
  WeightGradQueue q;
  at::Tensor loss;
  {
    WeightGradScope scope(&q);
    loss = b.forward(ids, tgt);
  }
  q.arm(true);
  loss.backward();
  EXPECT_GT(q.size(), 0u);
  const Param* deferred = nullptr;
  for (const Param& p : b.params())
    if (p.info.name == "layers.0.mlp.fc.weight") deferred = &p;
  ASSERT_TRUE(deferred);
  EXPECT_FALSE(deferred->tensor.grad().defined());  // waits for W
  q.run();
  for (size_t i = 0; i < a.params().size(); ++i) {
    const at::Tensor& ga = a.params()[i].tensor.grad();
    const at::Tensor& gb = b.params()[i].tensor.grad();
    ASSERT_TRUE(ga.defined() && gb.defined()) << a.params()[i].info.name;
    EXPECT_TRUE(at::equal(ga, gb)) << a.params()[i].info.name;
  }
}

// NOTE [I/W split] on another thread. On CUDA the autograd engine runs
// backward functions on a device thread of its own, so a queue the caller's
// thread knows of is invisible there unless the graph carries it. Here the
// forward runs on the test's thread inside the queue's scope and the queue is
// armed there, as the executor does; the backward runs on a fresh std::thread
// (on CPU the engine computes on the thread that calls backward). W must still
// wait for the W action, and I + W must equal B bit for bit: with
// recomputation (whose re-forward runs inside that backward, on the other
// thread) and under bf16 (whose linear weights are autograd casts of the fp32
// masters, NOTE [bf16]).
void on_another_thread(const at::Tensor& loss) {
  std::thread t([&loss] { loss.backward(); });
  t.join();
}

// A linear layer's weight: what a split backward defers (a row-parallel
// layer's bias is added after the reduction, outside linear()).
bool is_linear_weight(const std::string& name) {
  const bool linear = name.find(".attn.") != std::string::npos || name.find(".mlp.") != std::string::npos;
  return linear && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
}

struct SplitCase {
  Recompute recompute;
  at::ScalarType dtype;
  std::string name;
};

void PrintTo(const SplitCase& c, std::ostream* os) { *os << c.name; }

class DeferredWeightGradsOnAnotherThread : public ::testing::TestWithParam<SplitCase> {};

TEST_P(DeferredWeightGradsOnAnotherThread, WWaitsAndIPlusWEqualsB) {
  const SplitCase c = GetParam();
  const ModelConfig cfg = tiny_model();
  TpContext tp;
  at::Tensor ids = at::randint(0, cfg.vocab_size, {2, cfg.seq_len}, at::kLong);
  at::Tensor tgt = at::randint(0, cfg.vocab_size, {2, cfg.seq_len}, at::kLong);
  GptStage full(cfg, {0, cfg.layers, true, true}, tp, 5), split(cfg, {0, cfg.layers, true, true}, tp, 5);
  WeightGradQueue queue_b, queue_i;
  at::Tensor loss_b, loss_i;
  for (auto [stage, queue, loss] : {std::tuple{&full, &queue_b, &loss_b}, std::tuple{&split, &queue_i, &loss_i}}) {
    stage->set_recompute(c.recompute);
    stage->set_compute_dtype(c.dtype);
    WeightGradScope scope(queue);
    *loss = stage->forward(ids, tgt);
  }
  queue_b.arm(false);  // a B: the queue is recorded but not armed
  queue_i.arm(true);   // an I
  on_another_thread(loss_b);
  on_another_thread(loss_i);
  EXPECT_TRUE(queue_b.empty());
  ASSERT_FALSE(queue_i.empty()) << "the I deferred nothing: the backward thread did not find the queue";
  int waiting = 0;
  for (const Param& p : split.params()) {
    if (!is_linear_weight(p.info.name)) continue;
    EXPECT_FALSE(p.tensor.grad().defined()) << p.info.name << " has its gradient before W";
    ++waiting;
  }
  EXPECT_GT(waiting, 0);
  queue_i.run();
  EXPECT_TRUE(queue_i.empty());
  for (size_t i = 0; i < full.params().size(); ++i) {
    const at::Tensor& gb = full.params()[i].tensor.grad();
    const at::Tensor& giw = split.params()[i].tensor.grad();
    const std::string& name = full.params()[i].info.name;
    ASSERT_TRUE(gb.defined()) << name;
    ASSERT_TRUE(giw.defined()) << name << " has no gradient after I + W";
    EXPECT_TRUE(at::equal(gb, giw)) << name << ": I + W differs from B";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DeferredWeightGradsOnAnotherThread,
    ::testing::Values(SplitCase{Recompute::kNone, at::kFloat, "fp32"},
                      SplitCase{Recompute::kFull, at::kFloat, "fp32_recompute_full"},
                      SplitCase{Recompute::kSelective, at::kFloat, "fp32_recompute_selective"},
                      SplitCase{Recompute::kNone, at::kBFloat16, "bf16"},
                      SplitCase{Recompute::kFull, at::kBFloat16, "bf16_recompute_full"},
                      SplitCase{Recompute::kSelective, at::kBFloat16, "bf16_recompute_selective"}),
    [](const ::testing::TestParamInfo<SplitCase>& param_info) { return param_info.param.name; });

// A 30-step gpt-tiny run through the real command: the loss must fall.
TEST(Training, GptTinyLossFallsOver30Steps) {
  const std::string dir = testing::temp_dir() + "trident_tiny30";
  auto r = testing::run_command(testing::bin("trident") + " train --config " + testing::src("configs/gpt-tiny.toml") +
                                " --set training.steps=30 --set logging.dir=" + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  auto rows = testing::read_metrics(dir + "/metrics.jsonl");
  ASSERT_EQ(rows.size(), 30u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += rows[i]["loss"], last += rows[25 + i]["loss"];
  EXPECT_LT(last, first - 5 * 0.5) << "mean loss of the last 5 steps should be at least 0.5 below the first 5";
  for (const auto& row : rows) {
    EXPECT_TRUE(std::isfinite(row.at("loss")));
    for (const char* k : {"step", "lr", "grad_norm", "tokens_per_s", "tflops", "mfu"}) EXPECT_TRUE(row.count(k)) << k;
  }
  EXPECT_NE(r.output.find("done: 30 steps"), std::string::npos);
  std::ifstream svg(dir + "/loss.svg");
  std::string head((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_EQ(head.rfind("<svg", 0), 0u);
  std::ifstream cfg(dir + "/config.toml");
  EXPECT_TRUE(cfg.good());
}

TEST(Training, EvalLossIsLoggedOnEvalSteps) {
  const std::string dir = testing::temp_dir() + "trident_tiny_eval";
  auto r = testing::run_command(testing::bin("trident") + " train --config " + testing::src("configs/gpt-tiny.toml") +
                                " --set training.steps=4 --set training.eval_interval=2 --set logging.dir=" + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  auto rows = testing::read_metrics(dir + "/metrics.jsonl");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_FALSE(rows[0].count("eval_loss"));
  ASSERT_TRUE(rows[1].count("eval_loss"));
  EXPECT_TRUE(std::isfinite(rows[1]["eval_loss"]));
  EXPECT_TRUE(rows[3].count("eval_loss"));
}

}  // namespace
}  // namespace trident

namespace trident {
namespace {

// Evaluation and generation apply no dropout: a dropout-0.5 stage set to
// evaluation computes what the same weights without dropout compute, every
// time; set back to training it drops again.
TEST(Dropout, OnlyWhileTraining) {
  ModelConfig cfg = tiny_model();
  ModelConfig with_dropout = cfg;
  with_dropout.dropout = 0.5;
  TpContext tp;
  at::Tensor ids = at::randint(0, cfg.vocab_size, {2, cfg.seq_len}, at::kLong);
  at::Tensor tgt = at::randint(0, cfg.vocab_size, {2, cfg.seq_len}, at::kLong);
  GptStage plain(cfg, {0, cfg.layers, true, true}, tp, 5), dropping(with_dropout, {0, cfg.layers, true, true}, tp, 5);
  const at::Tensor want = plain.forward(ids, tgt).detach();
  const at::Tensor trained = dropping.forward(ids, tgt).detach();
  EXPECT_FALSE(at::equal(trained, want));  // dropout is on while training
  dropping.set_training(false);
  EXPECT_TRUE(at::equal(dropping.forward(ids, tgt).detach(), want));
  EXPECT_TRUE(at::equal(dropping.forward(ids, tgt).detach(), want));
  dropping.set_training(true);
  EXPECT_FALSE(at::equal(dropping.forward(ids, tgt).detach(), want));
}

}  // namespace
}  // namespace trident
