// Checkpoints of the GPT and Hugging Face interop, checked against an
// independent GPT-2 forward written here in plain ATen ops (manual LayerNorm
// and tanh-GELU, Conv1D as x @ W + b, HF's q|k|v split) on the exported
// model.safetensors: a wrong transpose, qkv order or padding shows up as
// different logits. Also: import round trip, resharded checkpoint loads,
// mismatch errors, the eval window rule, and generation (greedy and sampled)
// against a loop over the independent forward.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "core/atomic_file.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/checkpoint_tensors.h"
#include "core/json.h"
#include "checkpoint/safetensors.h"
#include "models/gpt/gpt.h"
#include "models/gpt/hf_gpt2.h"
#include "models/inference.h"
#include "models/registry.h"
#include "tests/error_of.h"

namespace trident {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny() {
  ModelConfig m;
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.ffn_hidden = 48;  // not 4 x hidden, so n_inner must travel
  m.seq_len = 8;
  m.vocab_size = 256;
  m.vocab_pad_multiple = 24;  // padded to 264 at tp 1, 288 at tp 2
  m.layernorm_eps = 1e-5;
  return m;
}

std::string fresh_dir(const std::string& name) {
  const std::string d = std::string(TRIDENT_BINARY_DIR) + "/test_hf_" + name;
  fs::remove_all(d);
  return d;
}

// Every parameter random (biases and norms too, so a misplaced bias or a
// wrong qkv order changes the logits); padded vocabulary rows stay zero.
std::unique_ptr<GptStage> random_model(const ModelConfig& cfg, uint64_t seed) {
  auto m = std::make_unique<GptStage>(cfg, ChunkSpec{0, cfg.layers, true, true}, TpContext{}, 1);
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::NoGradGuard no_grad;
  at::Tensor word;
  for (Param& p : m->params()) {
    if (p.info.tied_copy) continue;
    at::Tensor v = at::normal(0.0, 0.1, p.tensor.sizes().vec(), gen);
    if (p.info.init == "ones") v += 1.0;
    if (p.info.init_valid_rows >= 0) v.narrow(0, cfg.vocab_size, v.size(0) - cfg.vocab_size).zero_();
    p.tensor.copy_(v);
    if (p.info.name == "embedding.word.weight") word = p.tensor;
  }
  for (Param& p : m->params())
    if (p.info.tied_copy) p.tensor.copy_(word);
  return m;
}

std::map<std::string, at::Tensor> full_tensors(const GptStage& m) {
  std::map<std::string, at::Tensor> out;
  for (const Param& p : m.params())
    if (!p.info.tied_copy) out[p.info.name] = p.tensor.detach();
  return out;
}

// Saves the model as a tp = 2 run would: column/row-parallel weights split in
// two, the vocabulary padded for tp 2, replicated tensors written by both ranks.
void save_as_tp2(const std::string& dir, const ModelConfig& cfg, const GptStage& m) {
  const auto full = full_tensors(m);
  Config c;
  c.model = cfg;
  c.parallel.tp = 2;
  for (int r = 0; r < 2; ++r) {
    ckpt::ShardWriter w(dir, 7, r, 2);
    for (const PlannedParam& p : gpt_param_plan(cfg, {0, cfg.layers, true, true}, 2, r)) {
      if (p.info.tied_copy) continue;
      at::Tensor t = full.at(p.info.name);
      if (p.info.init_valid_rows >= 0) t = at::cat({t, at::zeros({p.info.full_shape[0] - t.size(0), t.size(1)})});
      if (p.info.shard_dim >= 0) t = t.narrow(p.info.shard_dim, p.info.shard_offset, p.local_shape[p.info.shard_dim]);
      ckpt::add_param(w, p.info.name, p.info, t);
    }
    ckpt::Meta meta;
    meta.config_toml = to_toml(c);
    meta.layout = "tp=2";
    w.set_meta(meta);
    w.finish();
  }
  ckpt::commit(dir, 7, 2, 2);
}

// ---- the independent reference -----------------------------------------------

at::Tensor reference_logits(const std::map<std::string, at::Tensor>& w, int64_t layers, int64_t heads, double eps,
                            const at::Tensor& ids) {
  auto W = [&](const std::string& n) { return w.at(n); };
  const int64_t B = ids.size(0), T = ids.size(1);
  at::Tensor x = W("wte.weight").index_select(0, ids.flatten()).view({B, T, -1}) + W("wpe.weight").narrow(0, 0, T);
  const int64_t C = x.size(2), hd = C / heads;
  auto ln = [&](const at::Tensor& t, const std::string& p) {
    const at::Tensor mu = t.mean(-1, true), var = (t - mu).pow(2).mean(-1, true);
    return (t - mu) / at::sqrt(var + eps) * W(p + ".weight") + W(p + ".bias");
  };
  auto conv1d = [&](const at::Tensor& t, const std::string& p) {  // HF Conv1D: weight (in, out)
    return at::matmul(t, W(p + ".weight")) + W(p + ".bias");
  };
  auto heads_of = [&](const at::Tensor& t) { return t.reshape({B, T, heads, hd}).transpose(1, 2); };
  const at::Tensor future = at::ones({T, T}).triu(1).to(at::kBool);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string pre = "h." + std::to_string(l) + ".";
    const at::Tensor qkv = conv1d(ln(x, pre + "ln_1"), pre + "attn.c_attn");  // (B, T, 3C): q | k | v
    const at::Tensor q = heads_of(qkv.narrow(2, 0, C)), k = heads_of(qkv.narrow(2, C, C)),
                     v = heads_of(qkv.narrow(2, 2 * C, C));
    at::Tensor att = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    att = at::softmax(att.masked_fill(future, -INFINITY), -1);
    x = x + conv1d(at::matmul(att, v).transpose(1, 2).reshape({B, T, C}), pre + "attn.c_proj");
    at::Tensor h = conv1d(ln(x, pre + "ln_2"), pre + "mlp.c_fc");
    h = 0.5 * h * (1 + at::tanh(std::sqrt(2.0 / M_PI) * (h + 0.044715 * h.pow(3))));
    x = x + conv1d(h, pre + "mlp.c_proj");
  }
  return at::matmul(ln(x, "ln_f"), W("wte.weight").t());
}

std::map<std::string, at::Tensor> read_safetensors(const std::string& path) {
  std::map<std::string, at::Tensor> out;
  for (const auto& t : safetensors::read_file(path)) {
    const auto v = safetensors::to_float(t, path);
    out[t.name] = at::tensor(v).view(t.shape);
  }
  return out;
}

at::Tensor sample_ids(const ModelConfig& cfg) {
  at::Generator gen = at::detail::createCPUGenerator(11);
  return at::randint(0, cfg.vocab_size, {3, cfg.seq_len}, gen, at::TensorOptions().dtype(at::kLong));
}

using testing::error_of;

TEST(HfGpt2, ExportedModelMatchesAnIndependentGpt2Forward) {
  const ModelConfig cfg = tiny();
  const auto model = random_model(cfg, 3);
  const std::string ck = fresh_dir("export_ck"), out = fresh_dir("export_hf");
  save_as_tp2(ck, cfg, *model);
  EXPECT_EQ(export_checkpoint(ck, "hf-gpt2", out), 2 + 12 * 2 + 2);

  const auto w = read_safetensors(out + "/model.safetensors");
  EXPECT_EQ(w.size(), 2u + 12 * 2 + 2);
  EXPECT_EQ(w.at("wte.weight").sizes().vec(), (std::vector<int64_t>{256, 32})) << "padding removed";
  EXPECT_EQ(w.at("h.1.attn.c_attn.weight").sizes().vec(), (std::vector<int64_t>{32, 96})) << "Conv1D is (in, out)";
  EXPECT_EQ(w.at("h.0.mlp.c_fc.weight").sizes().vec(), (std::vector<int64_t>{32, 48}));
  EXPECT_EQ(w.at("h.0.mlp.c_proj.weight").sizes().vec(), (std::vector<int64_t>{48, 32}));
  const json::Value c = json::parse(read_file(out + "/config.json"), "config.json");
  EXPECT_EQ(json::as_string(json::at(c, "model_type", "c"), "c"), "gpt2");
  EXPECT_EQ(json::as_int(json::at(c, "n_layer", "c"), "c"), 2);
  EXPECT_EQ(json::as_int(json::at(c, "n_head", "c"), "c"), 4);
  EXPECT_EQ(json::as_int(json::at(c, "n_embd", "c"), "c"), 32);
  EXPECT_EQ(json::as_int(json::at(c, "n_positions", "c"), "c"), 8);
  EXPECT_EQ(json::as_int(json::at(c, "n_inner", "c"), "c"), 48);
  EXPECT_EQ(json::as_int(json::at(c, "vocab_size", "c"), "c"), 256);
  EXPECT_DOUBLE_EQ(json::as_double(json::at(c, "layer_norm_epsilon", "c"), "c"), 1e-5);
  EXPECT_EQ(json::as_string(json::at(c, "tokenizer", "c"), "c"), "byte");

  const at::Tensor ids = sample_ids(cfg);
  at::NoGradGuard no_grad;
  const at::Tensor ours = model->logits(ids), ref = reference_logits(w, cfg.layers, cfg.heads, 1e-5, ids);
  ASSERT_EQ(ours.sizes(), ref.sizes());
  const double scale = ref.abs().max().item<double>(), diff = (ours - ref).abs().max().item<double>();
  EXPECT_GT(scale, 0.1);
  EXPECT_LE(diff, 1e-5 * scale) << "max |logit difference| " << diff << " at logit scale " << scale;
}

TEST(HfGpt2, ImportRoundTripAndReshardedCheckpointGiveIdenticalLogits) {
  const ModelConfig cfg = tiny();
  const auto model = random_model(cfg, 4);
  const std::string ck = fresh_dir("rt_ck"), out = fresh_dir("rt_hf");
  save_as_tp2(ck, cfg, *model);
  export_checkpoint(ck, "hf-gpt2", out);
  const at::Tensor ids = sample_ids(cfg);
  at::NoGradGuard no_grad;
  const at::Tensor want = model->logits(ids);

  GptStage imported(cfg, {0, cfg.layers, true, true}, TpContext{}, 99);
  init_from_hf(out, cfg, imported.params());
  EXPECT_TRUE(at::equal(imported.logits(ids), want)) << "HF import";
  EXPECT_TRUE(at::equal(load_model(ck, "").stage->logits(ids), want)) << "tp=2 checkpoint read at tp=1";
  // config.json does not record Trident's vocabulary padding (HF has none), so
  // load_model pads to the default multiple (256 rows here, not 264): the head
  // matmul has another shape, and BLAS may round differently in the last bit.
  const LoadedModel from_hf = load_model("", out);
  EXPECT_EQ(from_hf.model.padded_vocab(1), 256);
  const double diff = (from_hf.stage->logits(ids) - want).abs().max().item<double>();
  EXPECT_LE(diff, 1e-6 * want.abs().max().item<double>()) << "load_gpt --init-from";

  // The init_from hook on tp = 2 slices: each equals the slice of the full tensor.
  const auto full = full_tensors(*model);
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<Param> params;
    for (const PlannedParam& p : gpt_param_plan(cfg, {0, cfg.layers, true, true}, 2, r))
      params.push_back({at::zeros(p.local_shape), p.info});
    init_from_hf(out, cfg, params);
    for (const Param& p : params) {
      at::Tensor f = full.at(p.info.name);
      if (p.info.init_valid_rows >= 0) f = at::cat({f, at::zeros({p.info.full_shape[0] - f.size(0), f.size(1)})});
      if (p.info.shard_dim >= 0) f = f.narrow(p.info.shard_dim, p.info.shard_offset, p.tensor.size(p.info.shard_dim));
      ASSERT_TRUE(at::equal(p.tensor, f)) << p.info.name << " tp rank " << r;
    }
  }
}

TEST(HfGpt2, MismatchesAreErrorsNamingWhatDiffers) {
  const ModelConfig cfg = tiny();
  const auto model = random_model(cfg, 5);
  const std::string ck = fresh_dir("mm_ck"), out = fresh_dir("mm_hf");
  save_as_tp2(ck, cfg, *model);
  export_checkpoint(ck, "hf-gpt2", out);

  ModelConfig deeper = cfg;
  deeper.layers = 3;
  deeper.hidden = 64;
  GptStage other(deeper, {0, deeper.layers, true, true}, TpContext{}, 1);
  const std::string e = error_of([&] { init_from_hf(out, deeper, other.params()); });
  EXPECT_NE(e.find("n_layer = 2 but model.layers = 3"), std::string::npos) << e;
  EXPECT_NE(e.find("n_embd = 32 but model.hidden = 64"), std::string::npos) << e;

  // A checkpoint of another model: its config names what differs...
  const std::string cc = error_of([&] { check_checkpoint_matches(ck, deeper); });
  EXPECT_NE(cc.find("holds another model: model.layers: 2 in the checkpoint, 3 in the config; "
                    "model.hidden: 32 in the checkpoint, 64 in the config"),
            std::string::npos)
      << cc;
  EXPECT_NO_THROW(check_checkpoint_matches(ck, cfg));
  // ...and loading names the first differing tensor with both shapes.
  const std::string ce = error_of([&] {
    ckpt::Reader r(ck);
    for (Param& p : other.params()) ckpt::load_param(r, p.info.name, p.info, p.tensor);
  });
  EXPECT_NE(ce.find("has shape [288, 32] in checkpoint"), std::string::npos) << ce;
  EXPECT_NE(ce.find("the model's is [264, 64]"), std::string::npos) << ce;

  // An HF file whose tensor has the wrong shape.
  auto ts = safetensors::read_file(out + "/model.safetensors");
  for (auto& t : ts)
    if (t.name == "h.1.mlp.c_fc.weight") {
      t.shape = {48, 32};  // stored (out, in) by mistake
    }
  safetensors::write_file(out + "/model.safetensors", ts);
  const std::string se = error_of([&] { load_model("", out); });
  EXPECT_NE(se.find("h.1.mlp.c_fc.weight has shape [48, 32] but layers.1.mlp.fc.weight needs [32, 48]"),
            std::string::npos)
      << se;
}

// A file as the Hugging Face hub stores GPT-2: a "transformer." prefix, the
// causal-mask buffers h.{i}.attn.bias, lm_head.weight tied to wte, here in BF16.
TEST(HfGpt2, ReadsHubStyleFiles) {
  const ModelConfig cfg = tiny();
  const auto model = random_model(cfg, 9);
  const std::string ck = fresh_dir("hub_ck"), out = fresh_dir("hub_f32"), hub = fresh_dir("hub_bf16");
  save_as_tp2(ck, cfg, *model);
  export_checkpoint(ck, "hf-gpt2", out);
  const HfGpt2 f32 = read_hf_gpt2(out);
  std::vector<safetensors::Tensor> ts;
  auto bf16 = [](const std::string& name, const at::Tensor& t) {
    const at::Tensor b = t.to(at::kBFloat16).contiguous();
    return safetensors::Tensor{name, "BF16", t.sizes().vec(),
                               std::string(static_cast<const char*>(b.data_ptr()), b.numel() * 2)};
  };
  for (const auto& [name, t] : f32.tensors) ts.push_back(bf16("transformer." + name, t));
  ts.push_back(bf16("lm_head.weight", f32.tensors.at("wte.weight")));
  for (int l = 0; l < 2; ++l)
    ts.push_back({"transformer.h." + std::to_string(l) + ".attn.bias", "U8", {1, 1, 8, 8}, std::string(64, '\1')});
  fs::create_directories(hub);
  safetensors::write_file(hub + "/model.safetensors", ts);
  fs::copy_file(out + "/config.json", hub + "/config.json");
  const HfGpt2 h = read_hf_gpt2(hub);
  ASSERT_EQ(h.tensors.size(), f32.tensors.size());
  for (const auto& [name, t] : f32.tensors)
    ASSERT_TRUE(at::equal(h.tensors.at(name), t.to(at::kBFloat16).to(at::kFloat))) << name;
  EXPECT_EQ(h.tokenizer, "byte");
  GptStage m(h.model, {0, cfg.layers, true, true}, TpContext{}, 1);
  EXPECT_NO_THROW(init_from_hf(h, h.model, m.params()));

  ts[ts.size() - 3] = bf16("lm_head.weight", f32.tensors.at("wte.weight") + 1);  // an untied head
  safetensors::write_file(hub + "/model.safetensors", ts);
  EXPECT_NE(error_of([&] { read_hf_gpt2(hub); }).find("lm_head.weight differs from wte.weight"), std::string::npos);
}

TEST(Eval, WindowsPredictEveryTokenAfterTheFirstOnce) {
  const ModelConfig cfg = tiny();
  const auto model = random_model(cfg, 6);
  // 20 tokens, L = 8: windows [0, 9), [8, 17), [16, 20) predict 8 + 8 + 3 = 19 tokens.
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 20; ++i) tokens.push_back((i * 37 + 5) % 256);
  const EvalResult r = evaluate(*model, cfg.seq_len, tokens);
  EXPECT_EQ(r.tokens, 19);
  // The same windows scored by the reference forward on the exported weights.
  const std::string ck = fresh_dir("eval_ck"), out = fresh_dir("eval_hf");
  save_as_tp2(ck, cfg, *model);
  export_checkpoint(ck, "hf-gpt2", out);
  const auto w = read_safetensors(out + "/model.safetensors");
  const at::Tensor all = at::tensor(tokens, at::kLong);
  double sum = 0;
  for (int64_t start : {0, 8, 16}) {
    const int64_t len = std::min<int64_t>(8, 19 - start);
    const at::Tensor logits = reference_logits(w, cfg.layers, cfg.heads, 1e-5, all.narrow(0, start, len).unsqueeze(0));
    const at::Tensor logp = at::log_softmax(logits.squeeze(0).to(at::kDouble), -1);
    sum -= logp.gather(1, all.narrow(0, start + 1, len).unsqueeze(1)).sum().item<double>();
  }
  EXPECT_NEAR(r.loss, sum / 19, 1e-5 * std::abs(sum / 19));
  EXPECT_THROW(evaluate(*model, cfg.seq_len, {1}), std::runtime_error);
}

// The last position's logits of the last seq_len tokens of `seq` by the
// independent forward on the exported weights (vocabulary unpadded).
at::Tensor next_logits(const std::map<std::string, at::Tensor>& w, const ModelConfig& cfg,
                       const std::vector<int64_t>& seq) {
  const int64_t ctx = std::min<int64_t>(cfg.seq_len, static_cast<int64_t>(seq.size()));
  const std::vector<int64_t> window(seq.end() - ctx, seq.end());
  return reference_logits(w, cfg.layers, cfg.heads, 1e-5, at::tensor(window, at::kLong).unsqueeze(0))[0][ctx - 1];
}

// Greedy generation is the reference loop: the argmax of the independent
// forward's last logits over a window that slides once the sequence passes
// seq_len (8), token after token, from a short prompt and one longer than
// seq_len.
TEST(Generate, GreedyIsTheReferenceLoopsArgmaxThroughTheSlidingWindow) {
  at::set_num_threads(1);  // dozens of tiny forwards: threads only contend on a loaded machine
  const ModelConfig cfg = tiny();
  const auto model = random_model(cfg, 8);
  const std::string ck = fresh_dir("gen_ck"), out = fresh_dir("gen_hf");
  save_as_tp2(ck, cfg, *model);
  export_checkpoint(ck, "hf-gpt2", out);
  const auto w = read_safetensors(out + "/model.safetensors");
  at::NoGradGuard no_grad;
  std::vector<int64_t> long_prompt;
  for (int64_t i = 0; i < 20; ++i) long_prompt.push_back((i * 53 + 11) % 256);
  for (const std::vector<int64_t>& prompt : {std::vector<int64_t>{1, 2, 3}, long_prompt}) {
    const auto g = generate(*model, cfg.seq_len, prompt, 10, 0.0, 0, 0);
    std::vector<int64_t> seq = prompt, want;
    for (int i = 0; i < 10; ++i) {
      want.push_back(next_logits(w, cfg, seq).argmax().item<int64_t>());
      seq.push_back(want.back());
    }
    EXPECT_EQ(g, want) << "prompt of " << prompt.size() << " tokens";
  }
  const auto g = generate(*model, cfg.seq_len, {1, 2, 3}, 10, 0.0, 0, 0);
  EXPECT_EQ(generate(*model, cfg.seq_len, {1, 2, 3}, 10, 0.0, 0, 0, g[0]).size(), 1u) << "stops at the stop token";
}

// Sampling at temperature 1: a seed gives the same tokens again, another seed
// other tokens; with top_k every token is among the k most likely at its
// step (by the reference forward), and not always the most likely one.
TEST(Generate, SamplingIsSeededAndStaysWithinTopK) {
  at::set_num_threads(1);  // dozens of tiny forwards: threads only contend on a loaded machine
  const ModelConfig cfg = tiny();
  const auto model = random_model(cfg, 8);
  const std::string ck = fresh_dir("sample_ck"), out = fresh_dir("sample_hf");
  save_as_tp2(ck, cfg, *model);
  export_checkpoint(ck, "hf-gpt2", out);
  const auto w = read_safetensors(out + "/model.safetensors");
  const std::vector<int64_t> prompt = {1, 2, 3};
  const auto a = generate(*model, cfg.seq_len, prompt, 12, 1.0, 0, 42);
  EXPECT_EQ(a, generate(*model, cfg.seq_len, prompt, 12, 1.0, 0, 42));
  EXPECT_NE(a, generate(*model, cfg.seq_len, prompt, 12, 1.0, 0, 43));
  at::NoGradGuard no_grad;
  int not_argmax = 0;
  for (uint64_t seed : {1, 2, 3}) {
    const auto g = generate(*model, cfg.seq_len, prompt, 12, 1.0, 3, seed);
    std::vector<int64_t> seq = prompt;
    for (size_t i = 0; i < g.size(); ++i) {
      const at::Tensor logits = next_logits(w, cfg, seq);
      const at::Tensor top = std::get<1>(logits.topk(3));
      EXPECT_TRUE((top == g[i]).any().item<bool>()) << "seed " << seed << " token " << i << " = " << g[i]
                                                    << " is not among the 3 most likely";
      not_argmax += g[i] != logits.argmax().item<int64_t>();
      seq.push_back(g[i]);
    }
  }
  EXPECT_GT(not_argmax, 0) << "top-k sampling never left the argmax";
}

}  // namespace
}  // namespace trident
