// The tensor adapters of the store on real GPT parameter plans: a model saved
// as tp = 2 (two writers) reads back at tp = 4 and tp = 1 as exact slices of the
// full tensors; optimizer-like state saved as ZeRO flat shards reads back per
// parameter; dtypes round-trip; a missing tensor is named.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <map>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/checkpoint_tensors.h"
#include "models/gpt/gpt.h"

namespace trident::ckpt {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny() {
  ModelConfig m;
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.ffn_hidden = 48;
  m.seq_len = 8;
  m.vocab_size = 250;
  m.vocab_pad_multiple = 12;  // padded to 252 at tp 1, 264 at tp 2, 288 at tp 4
  return m;
}

std::string fresh_dir(const std::string& name) {
  const std::string d = std::string(TRIDENT_BINARY_DIR) + "/test_ckt_" + name;
  fs::remove_all(d);
  return d;
}

// Full random tensors by name, vocabulary rows beyond vocab_size zero, padded to `rows`.
std::map<std::string, at::Tensor> full_random(const ModelConfig& cfg) {
  std::map<std::string, at::Tensor> out;
  at::Generator gen = at::detail::createCPUGenerator(3);
  for (const PlannedParam& p : gpt_param_plan(cfg, {0, cfg.layers, true, true}, 1, 0)) {
    at::Tensor t = at::normal(0.0, 1.0, p.info.full_shape, gen);
    if (p.info.init_valid_rows >= 0) t = t.narrow(0, 0, cfg.vocab_size).contiguous();
    out[p.info.name] = t;
  }
  return out;
}

// This rank's slice of the full tensor under `info` (vocabulary padded with zeros).
at::Tensor slice_of(const std::map<std::string, at::Tensor>& full, const PlannedParam& p) {
  at::Tensor f = full.at(p.info.name);
  if (p.info.init_valid_rows >= 0) f = at::cat({f, at::zeros({p.info.full_shape[0] - f.size(0), f.size(1)})});
  return p.info.shard_dim < 0 ? f : f.narrow(p.info.shard_dim, p.info.shard_offset, p.local_shape[p.info.shard_dim]);
}

std::vector<Param> params_of(const ModelConfig& cfg, int64_t tp, int64_t rank,
                             const std::map<std::string, at::Tensor>* full) {
  std::vector<Param> out;
  for (const PlannedParam& p : gpt_param_plan(cfg, {0, cfg.layers, true, true}, tp, rank))
    out.push_back({full ? slice_of(*full, p).clone() : at::full(p.local_shape, -7.0f), p.info});
  return out;
}

TEST(CheckpointTensors, Tp2SaveReadsAtTp4AndTp1WithOptimizerStateAsZeroShards) {
  const ModelConfig cfg = tiny();
  const auto full = full_random(cfg);
  std::map<std::string, at::Tensor> exp_avg;  // stands in for an optimizer state
  for (const auto& [n, t] : full) exp_avg[n] = t * 0.5 + 1;
  const std::string dir = fresh_dir("tp2");
  // World 4 = tp 2 x dp 2. Parameters from dp rank 0; the exp_avg of each TP
  // slice split as ZeRO-1 would: flattened, dp rank d holding its half.
  for (int world_rank = 0; world_rank < 4; ++world_rank) {
    const int tp_rank = world_rank % 2, dp_rank = world_rank / 2;
    ShardWriter w(dir, 5, world_rank, 4);
    const std::vector<Param> params = params_of(cfg, 2, tp_rank, &full);
    if (dp_rank == 0) save_params(w, params, tp_rank);
    for (const Param& p : params) {
      if (!stores_param(p.info, tp_rank)) continue;
      PlannedParam pp{p.info, p.tensor.sizes().vec()};
      const at::Tensor flat = slice_of(exp_avg, pp).flatten();
      const int64_t half = (flat.numel() + 1) / 2, begin = dp_rank * half, count = std::min(half, flat.numel() - begin);
      add_tensor_flat(w, "optim.exp_avg." + p.info.name, p.info.full_shape, param_offset(p.info),
                      p.tensor.sizes().vec(), begin, flat.narrow(0, begin, count));
    }
    w.finish();
  }
  commit(dir, 5, 4, 2);
  const Reader r(dir);
  for (int64_t tp : {4, 1}) {
    for (int64_t rank = 0; rank < tp; ++rank) {
      std::vector<Param> params = params_of(cfg, tp, rank, nullptr);
      std::vector<at::Tensor> state;
      for (const Param& p : params) state.push_back(at::zeros_like(p.tensor));
      load_params(r, params, "");
      load_params(r, params, "optim.exp_avg.", &state);
      const std::vector<PlannedParam> plan = gpt_param_plan(cfg, {0, cfg.layers, true, true}, tp, rank);
      for (size_t i = 0; i < params.size(); ++i) {
        ASSERT_TRUE(at::equal(params[i].tensor, slice_of(full, plan[i]))) << params[i].info.name << " tp " << tp;
        ASSERT_TRUE(at::equal(state[i], slice_of(exp_avg, plan[i])))
            << "exp_avg of " << params[i].info.name << " tp " << tp;
      }
    }
  }
}

TEST(CheckpointTensors, DtypesRoundTripAndMissingTensorsAreNamed) {
  const std::string dir = fresh_dir("dtypes");
  const at::Tensor f = at::arange(12, at::kFloat).view({3, 4}) / 3, i = at::arange(5, at::kLong) * static_cast<int64_t>(1000000007),
                   h = f.to(at::kBFloat16), b = at::tensor(std::vector<int64_t>{1, 0, 1}).to(at::kBool);
  {
    ShardWriter w(dir, 1, 0, 1);
    add_tensor(w, "f", {3, 4}, {0, 0}, f);
    add_tensor(w, "i", {5}, {0}, i);
    add_tensor(w, "h", {3, 4}, {0, 0}, h);
    add_tensor(w, "b", {3}, {0}, b);
    w.finish();
  }
  commit(dir, 1, 1, 2);
  const Reader r(dir);
  EXPECT_TRUE(at::equal(read_tensor(r, "f", at::kFloat, {3, 4}, {1, 1}, {2, 3}), f.narrow(0, 1, 2).narrow(1, 1, 3)));
  EXPECT_TRUE(at::equal(read_tensor(r, "i", at::kLong, {5}, {0}, {5}), i));
  EXPECT_TRUE(at::equal(read_tensor(r, "h", at::kBFloat16, {3, 4}, {0, 0}, {3, 4}), h));
  EXPECT_TRUE(at::equal(read_tensor(r, "b", at::kBool, {3}, {0}, {3}), b));
  std::vector<Param> params = params_of(tiny(), 1, 0, nullptr);
  try {
    load_params(r, params);
    FAIL() << "loaded a model from a checkpoint without it";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("has no tensor embedding.word.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trident::ckpt
