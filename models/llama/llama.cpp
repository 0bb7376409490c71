// Llama stage: parameters from the TP plan (NOTE [Llama TP plan]), forward
// through embedding, blocks and head. Shapes in comments are per TP rank.
#include "models/llama/llama.h"

#include <cmath>
#include <stdexcept>

#include "core/config_rules.h"
#include "core/context_split.h"
#include "models/common/attention.h"
#include "models/common/context_attention.h"
#include "models/common/document_attention.h"
#include "models/common/mla.h"
#include "models/common/moe_layer.h"
#include "parallel/expert_parallel.h"
#include "models/common/rms_norm.h"
#include "models/llama/llama_rules.h"

namespace trident {

namespace {

// llama_param_plan's declarations, one method a part of the block (NOTE [Llama TP plan]), each in
// the plan's order. Output projections scaled by 1/sqrt(2 layers), as GPT's (GPT-2's init).
struct LlamaPlanWriter {
  const ModelConfig& cfg;
  const ModelFeatures& features;
  ParamPlan& plan;
  double std_dev = cfg.init_std, out_std = cfg.init_std / std::sqrt(2.0 * static_cast<double>(cfg.layers));

  // An RMSNorm weight: ones, replicated, fed a sequence shard under SP, no weight decay.
  void norm(const std::string& name, int64_t width) {
    ParamDecl decl;
    decl.name = name;
    decl.shape = {width};
    decl.init = "ones";
    decl.no_decay = true;
    decl.sequence_parallel_grad = true;
    plan.add(decl);
  }
  // A replicated weight fed this rank's tokens (a sequence shard under SP): MLA's down projections.
  void latent(const std::string& name, std::vector<int64_t> shape) {
    ParamDecl decl;
    decl.name = name;
    decl.shape = std::move(shape);
    decl.std_dev = std_dev;
    decl.sequence_parallel_grad = true;
    plan.add(decl);
  }
  // The word embedding or the untied LM head, split over TP by vocabulary rows; padding rows are zero
  // at init. Tied: the head is the word embedding's copy (same name, so the same init).
  void vocab_matrix(const std::string& name, bool tied_copy, int64_t padded_vocab) {
    ParamDecl decl;
    decl.name = name;
    decl.shape = {padded_vocab, cfg.hidden};
    decl.shard_dim = kColumnParallel;
    decl.std_dev = std_dev;
    decl.init_valid_rows = cfg.vocab_size;
    decl.tied_copy = tied_copy;
    plan.add(decl);
  }
  // NOTE [MLA]: the down projections and their norms replicated, fed this rank's tokens; the up
  // projections split by heads.
  void latent_attention(const std::string& pre) {
    const int64_t h = cfg.hidden, heads = cfg.heads, qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim;
    if (cfg.q_lora_rank > 0) {
      latent(pre + ".attn.q_down.weight", {cfg.q_lora_rank, h});
      norm(pre + ".attn.q_down_norm.weight", cfg.q_lora_rank);
    }
    plan.add_weight(pre + ".attn.q.weight", {heads * qk, cfg.q_lora_rank > 0 ? cfg.q_lora_rank : h}, kColumnParallel,
                    std_dev);
    latent(pre + ".attn.kv_down.weight", {cfg.kv_lora_rank + cfg.qk_rope_head_dim, h});
    norm(pre + ".attn.kv_down_norm.weight", cfg.kv_lora_rank);
    plan.add_weight(pre + ".attn.kv_up.weight", {heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank},
                    kColumnParallel, std_dev);
    plan.add_weight(pre + ".attn.o.weight", {h, heads * cfg.v_head_dim}, kRowParallel, out_std);
  }
  // Grouped-query attention, and what the family's features add to it.
  void attention(const std::string& pre) {
    const int64_t h = cfg.hidden, d = cfg.head_dim(), q_rows = cfg.heads * d, kv_rows = cfg.kv() * d;
    if (cfg.mla()) {
      latent_attention(pre);
    } else {
      plan.add_weight(pre + ".attn.q.weight", {q_rows, h}, kColumnParallel, std_dev);
      plan.add_weight(pre + ".attn.k.weight", {kv_rows, h}, kColumnParallel, std_dev);
      plan.add_weight(pre + ".attn.v.weight", {kv_rows, h}, kColumnParallel, std_dev);
      plan.add_weight(pre + ".attn.o.weight", {h, q_rows}, kRowParallel, out_std);
    }
    if (features.qkv_bias) {  // zeros, split as their weights' rows
      for (const auto& [name, rows] : {std::pair{".attn.q.bias", q_rows}, {".attn.k.bias", kv_rows}, {".attn.v.bias", kv_rows}}) {
        ParamDecl decl;
        decl.name = pre + name;
        decl.shape = {rows};
        decl.shard_dim = kColumnParallel;
        decl.init = "zeros";
        decl.no_decay = true;
        plan.add(decl);
      }
    }
    if (features.qk_norm) {  // one RMSNorm weight over a head's width, for every q head and every k head
      for (const char* name : {".attn.q_norm.weight", ".attn.k_norm.weight"}) {
        ParamDecl decl;
        decl.name = pre + name;
        decl.shape = {d};
        decl.init = "ones";
        decl.no_decay = true;
        decl.tp_partial_grad = true;  // each tp rank normalises its own heads
        plan.add(decl);
      }
    }
  }
  // NOTE [MoE layout]: the router and every expert's SwiGLU, experts stacked on dim 0; the shared
  // expert and its gate where the family has them. The routed experts split over EP along dim 0 (NOTE
  // [expert grid] in parallel/layout.h) and over `parts` of the tp ranks along their width as the
  // dense MLP (NOTE [experts under tensor parallelism]): part tp_rank mod parts.
  void moe(const std::string& pre, int64_t parts, int64_t tp_rank) {
    const int64_t h = cfg.hidden, e = cfg.experts, fe = cfg.moe_ffn(), fs = cfg.moe_shared_ffn_hidden;
    plan.add_weight(pre + ".moe.router.weight", {e, h}, kReplicated, std_dev);
    if (cfg.moe_expert_bias) {
      // NOTE [expert bias]: chooses experts, gets no gradient; AdamW leaves it as it is.
      ParamDecl decl;
      decl.name = pre + ".moe.router.bias";
      decl.shape = {e};
      decl.init = "zeros";
      decl.no_decay = true;
      plan.add(decl);
    }
    for (const auto& [name, shape, sd, dim] :
         {std::tuple{".moe.experts.gate.weight", std::vector<int64_t>{e, fe, h}, std_dev, 1},
          std::tuple{".moe.experts.up.weight", std::vector<int64_t>{e, fe, h}, std_dev, 1},
          std::tuple{".moe.experts.down.weight", std::vector<int64_t>{e, h, fe}, out_std, 2}}) {
      ParamDecl decl;
      decl.name = pre + name;
      decl.shape = shape;
      decl.std_dev = sd;
      decl.expert = true;
      decl.shard_dim = parts > 1 ? dim : kReplicated;
      decl.shards = parts, decl.shard_rank = tp_rank % parts;
      plan.add(decl);
    }
    if (fs > 0) {  // the shared experts split over TP as the dense MLP
      plan.add_weight(pre + ".moe.shared.gate.weight", {fs, h}, kColumnParallel, std_dev);
      plan.add_weight(pre + ".moe.shared.up.weight", {fs, h}, kColumnParallel, std_dev);
      plan.add_weight(pre + ".moe.shared.down.weight", {h, fs}, kRowParallel, out_std);
      if (features.shared_expert_gate) plan.add_weight(pre + ".moe.shared_gate.weight", {1, h}, kReplicated, std_dev);
    }
  }
  void mlp(const std::string& pre) {
    const int64_t h = cfg.hidden, f = cfg.ffn();
    plan.add_weight(pre + ".mlp.gate.weight", {f, h}, kColumnParallel, std_dev);
    plan.add_weight(pre + ".mlp.up.weight", {f, h}, kColumnParallel, std_dev);
    plan.add_weight(pre + ".mlp.down.weight", {h, f}, kRowParallel, out_std);
  }
};

}  // namespace

std::vector<PlannedParam> llama_param_plan(const ModelConfig& cfg, const ChunkSpec& spec, int64_t tp_size,
                                           int64_t tp_rank, int64_t ep_size, int64_t ep_rank, int64_t etp) {
  ParamPlan plan(tp_size, tp_rank, ep_size, ep_rank);
  LlamaPlanWriter w{cfg, llama_features(cfg), plan};
  const int64_t vp = cfg.padded_vocab(tp_size);
  if (spec.has_embedding) w.vocab_matrix("embedding.word.weight", /*tied_copy=*/false, vp);
  for (int64_t l = spec.first_layer; l < spec.first_layer + spec.num_layers; ++l) {
    const std::string pre = "layers." + std::to_string(l);
    w.norm(pre + ".attn_norm.weight", cfg.hidden);
    w.attention(pre);
    w.norm(pre + ".mlp_norm.weight", cfg.hidden);
    if (cfg.moe_layer(l)) w.moe(pre, etp == 0 ? tp_size : etp, tp_rank);
    else w.mlp(pre);
  }
  if (spec.has_head) {
    w.norm("final_norm.weight", cfg.hidden);
    w.vocab_matrix(cfg.tie_embeddings ? "embedding.word.weight" : "head.weight", /*tied_copy=*/cfg.tie_embeddings, vp);
  }
  return std::move(plan.params());
}

namespace {

// NOTE [YaRN] (core/config_model.cpp): f_i blended with f_i / factor by a ramp
// over the dimensions whose rotations over the original length lie between
// beta_fast and beta_slow (the range floored and ceiled, as transformers
// truncates by default), in fp32 as transformers computes it.
at::Tensor yarn_inv_freq(const ModelConfig& cfg) {
  const int64_t d = cfg.rope_dim();
  const double base = cfg.rope_theta, factor = cfg.rope_factor;
  const double original = static_cast<double>(cfg.rope_original_max_position);
  const auto correction_dim = [&](double rotations) {
    return static_cast<double>(d) * std::log(original / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  const double low = std::max(std::floor(correction_dim(cfg.rope_beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(cfg.rope_beta_slow)), static_cast<double>(d - 1));
  if (low == high) high += 0.001;  // no zero-width ramp
  const at::Tensor pos_freqs = at::pow(base, at::arange(0, d, 2, at::kLong).to(at::kFloat) / d);
  const at::Tensor extrapolation = 1.0 / pos_freqs, interpolation = 1.0 / (factor * pos_freqs);
  const at::Tensor ramp = ((at::arange(d / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
  const at::Tensor extrapolation_share = 1 - ramp;
  return interpolation * (1 - extrapolation_share) + extrapolation * extrapolation_share;
}

}  // namespace

at::Tensor rope_inv_freq(const ModelConfig& cfg) {
  if (cfg.rope_scaling == "yarn") return yarn_inv_freq(cfg);
  const int64_t d = cfg.rope_dim();
  // 1 / theta^(2i/d), in fp32 as transformers computes it.
  at::Tensor inv = at::reciprocal(at::pow(cfg.rope_theta, at::arange(0, d, 2, at::kLong).to(at::kFloat) / d));
  if (cfg.rope_scaling != "llama3") return inv;
  // Llama 3.1: wavelengths longer than original/low_freq_factor are slowed by
  // `factor`, shorter than original/high_freq_factor kept, and the band in
  // between interpolated (Meta's Llama 3.1 reference; transformers'
  // _compute_llama3_parameters).
  const double old_len = static_cast<double>(cfg.rope_original_max_position);
  const double lo = cfg.rope_low_freq_factor, hi = cfg.rope_high_freq_factor, factor = cfg.rope_factor;
  const double low_freq_wavelen = old_len / lo, high_freq_wavelen = old_len / hi;
  const at::Tensor wavelen = 2 * M_PI / inv;
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv / factor, inv);
  const at::Tensor smooth = (old_len / wavelen - lo) / (hi - lo);
  const at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  const at::Tensor medium = (wavelen < high_freq_wavelen).logical_not().logical_and((wavelen > low_freq_wavelen).logical_not());
  return at::where(medium, smoothed, scaled);
}

LlamaStage::LlamaStage(const ModelConfig& cfg, const ChunkSpec& spec, const TpContext& tp, int64_t seed,
                       const EpContext& ep, const CpContext& cp)
    : cfg_(cfg), spec_(spec), tp_(tp), ep_(ep), cp_(cp) {
  const int64_t t = tp.size();
  // Rules of check_config (core/config_model.cpp) and llama_rules.cpp, asserted here.
  if (cfg.hidden % cfg.heads != 0 || cfg.heads % cfg.kv() != 0 || cfg.kv() % t != 0 || cfg.ffn() % t != 0 ||
      cfg.padded_vocab(t) % t != 0 || cfg.rope_dim() % 2 != 0 || cfg.dropout > 0)
    throw std::logic_error("LlamaStage: the model config does not split over tp=" + std::to_string(t) +
                           " (check_config admits no such config)");
  if (ep.size() > 1 && (cfg.experts < 1 || cfg.experts % ep.size() != 0))
    throw std::logic_error("LlamaStage: " + std::to_string(cfg.experts) + " experts do not split over ep=" +
                           std::to_string(ep.size()) + " (check_config admits no such config)");
  const int64_t etp = ep.expert_tp ? ep.expert_tp->size() : 1;
  for (auto& planned : llama_param_plan(cfg, spec, t, tp.rank(), ep.size(), ep.rank(), etp))
    params_.push_back({init_shard(seed, planned.info, planned.local_shape), planned.info});
  auto at = [&](const std::string& name, bool tied = false) { return param_index(params_, name, "LlamaStage", tied); };
  const ModelFeatures& features = llama_features(cfg);
  if (spec_.has_embedding) word_ = at("embedding.word.weight");
  for (int64_t l = spec_.first_layer; l < spec_.first_layer + spec_.num_layers; ++l) {
    const std::string pre = "layers." + std::to_string(l);
    const std::string mlp = cfg.moe_layer(l) ? pre + ".moe.experts." : pre + ".mlp.";
    BlockParams b;
    b.attn_norm = at(pre + ".attn_norm.weight");
    b.q = at(pre + ".attn.q.weight");
    b.o = at(pre + ".attn.o.weight");
    if (cfg.mla()) {  // NOTE [MLA]
      if (cfg.q_lora_rank > 0) b.q_down = at(pre + ".attn.q_down.weight"), b.q_down_norm = at(pre + ".attn.q_down_norm.weight");
      b.kv_down = at(pre + ".attn.kv_down.weight");
      b.kv_down_norm = at(pre + ".attn.kv_down_norm.weight");
      b.kv_up = at(pre + ".attn.kv_up.weight");
    } else {
      b.k = at(pre + ".attn.k.weight");
      b.v = at(pre + ".attn.v.weight");
    }
    b.mlp_norm = at(pre + ".mlp_norm.weight");
    b.gate = at(mlp + "gate.weight");
    b.up = at(mlp + "up.weight");
    b.down = at(mlp + "down.weight");
    if (cfg.moe_layer(l)) b.router = at(pre + ".moe.router.weight");
    if (cfg.moe_layer(l) && cfg.moe_expert_bias) b.router_bias = at(pre + ".moe.router.bias");
    if (features.qkv_bias)
      b.q_bias = at(pre + ".attn.q.bias"), b.k_bias = at(pre + ".attn.k.bias"), b.v_bias = at(pre + ".attn.v.bias");
    if (features.qk_norm) b.q_norm = at(pre + ".attn.q_norm.weight"), b.k_norm = at(pre + ".attn.k_norm.weight");
    if (cfg.moe_layer(l) && cfg.moe_shared_ffn_hidden > 0) {
      b.shared_gate = at(pre + ".moe.shared.gate.weight");
      b.shared_up = at(pre + ".moe.shared.up.weight");
      b.shared_down = at(pre + ".moe.shared.down.weight");
      if (features.shared_expert_gate) b.shared_expert_gate = at(pre + ".moe.shared_gate.weight");
    }
    blocks_.push_back(b);
    moe_.push_back(cfg.moe_layer(l) ? std::make_unique<MoeLayer>(cfg) : nullptr);
  }
  if (spec_.has_head) {
    final_norm_ = at("final_norm.weight");
    head_ = cfg.tie_embeddings ? at("embedding.word.weight", true) : at("head.weight");
  }
  if (spec_.num_layers > 0) {
    // (seq / cp, d): the angles of this rank's positions (NOTE [context split]), each
    // frequency twice (the two halves of a head).
    const at::Tensor pos = at::tensor(context_positions(cfg.seq_len, cp.size(), cp.rank()), at::kLong).to(at::kFloat);
    const at::Tensor freqs = at::outer(pos, rope_inv_freq(cfg));
    const at::Tensor emb = at::cat({freqs, freqs}, -1);
    cos_ = emb.cos();
    sin_ = emb.sin();
    if (const double af = cfg.rope_attention_factor(); af != 1.0) {  // NOTE [YaRN]
      cos_ = cos_ * af;
      sin_ = sin_ * af;
    }
  }
}

std::vector<Buffer> LlamaStage::buffers() {
  if (!cos_.defined()) return {};
  return {{"rope.cos", &cos_}, {"rope.sin", &sin_}};
}

at::Tensor LlamaStage::compute_param(size_t index) const {
  return casts_.get(params_, index, compute_);  // NOTE [cast once per step]
}

// NOTE [RMSNorm] in models/common/rms_norm.h.
at::Tensor LlamaStage::rms_norm(size_t weight, const at::Tensor& x) const {
  return trident::rms_norm(x, compute_param(weight), cfg_.layernorm_eps);
}

const LlamaStage::RopeTables& LlamaStage::rope_tables(int64_t s, at::ScalarType dtype) const {
  RopeTables& r = rope_;
  const int64_t version = static_cast<int64_t>(cos_._version()) + static_cast<int64_t>(sin_._version());
  if (r.cos.defined() && r.seq == s && r.dtype == dtype && r.source == cos_.data_ptr() && r.version == version)
    return r;
  const int64_t half = sin_.size(1) / 2;
  const at::Tensor sin = sin_.narrow(0, 0, s);
  r.cos = cos_.narrow(0, 0, s).to(dtype).contiguous();
  r.sin_signed = at::cat({-sin.narrow(-1, 0, half), sin.narrow(-1, half, half)}, -1).to(dtype);
  r.seq = s;
  r.dtype = dtype;
  r.source = cos_.data_ptr();
  r.version = version;
  return r;
}

void LlamaStage::set_documents(std::shared_ptr<const Documents> docs) {
  if (docs && (cp_.size() > 1 || cfg_.mla()))
    throw std::invalid_argument("packed documents under context parallelism or with latent attention are not built");
  docs_ = std::move(docs);
}

LlamaStage::RopeTables LlamaStage::document_rope(const Documents& docs, at::ScalarType dtype) const {
  const int64_t b = docs.positions.size(0), s = docs.positions.size(1), d = cos_.size(1), half = d / 2;
  const at::Tensor at_pos = docs.positions.reshape(-1);
  const at::Tensor sin = sin_.index_select(0, at_pos).view({b, 1, s, d});
  RopeTables r;
  r.cos = cos_.index_select(0, at_pos).view({b, 1, s, d}).to(dtype);
  r.sin_signed = at::cat({-sin.narrow(-1, 0, half), sin.narrow(-1, half, half)}, -1).to(dtype);
  return r;
}

// x·cos + rotate_half(x)·sin with rotate_half(x) = (-x2, x1): the sign is
// kept in the sine table's first half (exact: (-a)·b = a·(-b)), so a rotation
// is a cat of the halves, two products and a sum. (at::roll would be one
// node but has no meta kernel, which the memory planning runs on.)
at::Tensor LlamaStage::rotate(const at::Tensor& x, const RopeTables& r) const {
  const int64_t half = x.size(3) / 2;
  return x * r.cos + at::cat({x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1) * r.sin_signed;
}

at::Tensor LlamaStage::attention(const BlockParams& b, const at::Tensor& x) const {
  if (cfg_.mla()) return latent_attention(b, x);
  const int64_t t = tp_.size(), heads = cfg_.heads / t, kv = cfg_.kv() / t, d = cfg_.head_dim();
  const at::Tensor in = enter_column_parallel(tp_, x);  // (b, s, h): one gather under SP for q, k and v
  const auto bias = [this](size_t i) { return i == kNone ? at::Tensor() : compute_param(i); };
  const at::Tensor q = linear(in, compute_param(b.q), bias(b.q_bias)), k = linear(in, compute_param(b.k), bias(b.k_bias)),
                   v = linear(in, compute_param(b.v), bias(b.v_bias));
  // The attention core: (qwen3_moe) each head's q and k RMS-normed, rotary
  // embeddings, key/value heads read by their query groups (NOTE [grouped
  // heads] in models/common/attention.cpp), SDPA; (b, s, H/tp·d) out. What
  // selective recomputation drops.
  auto core = [this, b, heads, kv, d, docs = docs_](const at::Tensor& q2, const at::Tensor& k2, const at::Tensor& v2) {
    const int64_t bs = q2.size(0), s = q2.size(1);
    const bool at_positions = docs && docs->positions.defined();
    const RopeTables own = at_positions ? document_rope(*docs, q2.scalar_type()) : RopeTables{};
    const RopeTables& rope = at_positions ? own : rope_tables(s, q2.scalar_type());
    at::Tensor q4 = q2.view({bs, s, heads, d}), k4 = k2.view({bs, s, kv, d});
    if (b.q_norm != kNone) q4 = rms_norm(b.q_norm, q4), k4 = rms_norm(b.k_norm, k4);
    const at::Tensor qh = rotate(q4.transpose(1, 2), rope);  // (b, H/tp, s, d)
    const at::Tensor kh = rotate(k4.transpose(1, 2), rope);  // (b, K/tp, s, d)
    const at::Tensor vh = v2.view({bs, s, kv, d}).transpose(1, 2);
    const at::Tensor y = docs ? document_attention(qh, kh, vh, docs->lengths, 0.0)
                         : cp_.size() > 1 ? context_attention(cp_, qh, kh, vh)
                                          : causal_attention(qh, kh, vh, 0.0);
    return y.transpose(1, 2).reshape({bs, s, heads * d});
  };
  at::Tensor y;
  if (recompute_ == Recompute::kSelective) {
    // One input for recompute(): q, k and v side by side, split again inside.
    const int64_t qw = q.size(-1), kw = k.size(-1);
    y = trident::recompute(
        [core, qw, kw](const at::Tensor& qkv) {
          return core(qkv.narrow(-1, 0, qw), qkv.narrow(-1, qw, kw), qkv.narrow(-1, qw + kw, kw));
        },
        at::cat({q, k, v}, -1));
  } else {
    y = core(q, k, v);
  }
  return row_parallel_linear(tp_, y, compute_param(b.o), at::Tensor());
}

// NOTE [MLA] in models/common/mla.h: the latents of this rank's tokens, one entry into the
// column-parallel region for all three, the up projections, the core (what selective
// recomputation drops), o.
at::Tensor LlamaStage::latent_attention(const BlockParams& b, const at::Tensor& x) const {
  const MlaDims d{cfg_.heads / tp_.size(), cfg_.qk_nope_head_dim, cfg_.qk_rope_head_dim, cfg_.v_head_dim,
                  cfg_.kv_lora_rank, cfg_.mla_softmax_scale()};
  const auto param = [this](size_t i) { return i == kNone ? at::Tensor() : compute_param(i); };
  MlaLatents l = mla_latents(x, param(b.q_down), param(b.q_down_norm), compute_param(b.kv_down),
                             compute_param(b.kv_down_norm), d);
  if (tp_.size() > 1) {
    const int64_t qw = l.q_in.size(-1);
    const at::Tensor in = enter_column_parallel(tp_, at::cat({l.q_in, l.c, l.k_rope}, -1));
    l = {in.narrow(-1, 0, qw), in.narrow(-1, qw, d.kv_rank), in.narrow(-1, qw + d.kv_rank, d.rope)};
  }
  const at::Tensor q = linear(l.q_in, compute_param(b.q), at::Tensor());    // (b, s, H/tp·(nope + rope))
  const at::Tensor kv = linear(l.c, compute_param(b.kv_up), at::Tensor());  // (b, s, H/tp·(nope + v))
  auto core = [this, d](const at::Tensor& q2, const at::Tensor& kv2, const at::Tensor& kr2) {
    const RopeTables& rope = rope_tables(q2.size(1), q2.scalar_type());
    return mla_core(q2, kv2, kr2, d, [this, &rope](const at::Tensor& t) { return rotate(t, rope); });
  };
  at::Tensor y;
  if (recompute_ == Recompute::kSelective) {
    const int64_t qw = q.size(-1), kw = kv.size(-1);
    y = trident::recompute(
        [core, qw, kw, d](const at::Tensor& all) {
          return core(all.narrow(-1, 0, qw), all.narrow(-1, qw, kw), all.narrow(-1, qw + kw, d.rope));
        },
        at::cat({q, kv, l.k_rope}, -1));
  } else {
    y = core(q, kv, l.k_rope);
  }
  return row_parallel_linear(tp_, y, compute_param(b.o), at::Tensor());
}

// NOTE [MoE block] in models/common/moe_layer.h: the micro-batch's b·s tokens through the layer's
// MoeLayer, which reads the whole micro-batch on every tp rank.
at::Tensor LlamaStage::moe(int64_t layer, const BlockParams& b, const at::Tensor& x, const Side& side) const {
  MoeWeights w;
  w.router = compute_param(b.router);
  // NOTE [expert bias]: fp32 always (it only orders scores), never a gradient.
  if (b.router_bias != kNone) w.bias = params_[b.router_bias].tensor.detach();
  w.gate = compute_param(b.gate);
  w.up = compute_param(b.up);
  w.down = compute_param(b.down);
  if (b.shared_gate != kNone) {
    w.shared_gate = compute_param(b.shared_gate);
    w.shared_up = compute_param(b.shared_up);
    w.shared_down = compute_param(b.shared_down);
    if (b.shared_expert_gate != kNone) w.shared_expert_gate = compute_param(b.shared_expert_gate);
  }
  EpContext ep = ep_;
  ep.layer = static_cast<int>(layer);  // names its all-to-alls (NOTE [all-to-all order])
  ep.tp = tp_.group;
  ep.sequence_parallel = tp_.sequence_parallel;
  return moe_.at(static_cast<size_t>(layer - spec_.first_layer))->forward(x, w, ep, cp_.group, loss_scale_, side);
}

// NOTE [pooled aux loss]: one count per expert beside every boundary tensor, on every stage of the
// model (a stage without MoE layers passes them on).
int64_t LlamaStage::side_width() const { return MoeLayer::side_width(cfg_); }

// NOTE [MoE stats] in models/common/moe_layer.cpp: one row per MoE layer this stage holds.
at::Tensor LlamaStage::take_moe_stats() {
  at::Tensor out;
  for (size_t i = 0; i < moe_.size(); ++i) {
    if (!moe_[i]) continue;
    const at::Tensor bias = blocks_[i].router_bias == kNone ? at::Tensor() : params_[blocks_[i].router_bias].tensor;
    const at::Tensor row = moe_[i]->take_stats(bias);
    if (!row.defined()) continue;
    if (!out.defined()) out = at::zeros({cfg_.layers, row.size(0)}, row.options());
    out[spec_.first_layer + static_cast<int64_t>(i)].copy_(row);
  }
  return out;
}

// NOTE [expert bias] in models/common/router.h: the loads are the world's, the same on every rank.
void LlamaStage::update_expert_bias(const at::Tensor& loads, double rate) {
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (blocks_[i].router_bias == kNone) continue;
    trident::update_expert_bias(params_[blocks_[i].router_bias].tensor,
                                loads[spec_.first_layer + static_cast<int64_t>(i)], rate);
  }
}

at::Tensor LlamaStage::mlp(int64_t layer, const BlockParams& b, const at::Tensor& x, const Side& side) const {
  if (b.router != kNone) return moe(layer, b, x, side);
  const at::Tensor in = enter_column_parallel(tp_, x);
  // silu(gate) · up, (b, s, F/tp): the largest activations of a block.
  auto gated = [this, b](const at::Tensor& xin) {
    return at::silu(linear(xin, compute_param(b.gate), at::Tensor())) *
           linear(xin, compute_param(b.up), at::Tensor());
  };
  const at::Tensor a = recompute_ == Recompute::kSelective ? trident::recompute(gated, in) : gated(in);
  return row_parallel_linear(tp_, a, compute_param(b.down), at::Tensor());
}

at::Tensor LlamaStage::block(int64_t layer, const at::Tensor& x, const Side& side) const {
  const BlockParams& b = blocks_.at(static_cast<size_t>(layer - spec_.first_layer));
  const at::Tensor h = x + attention(b, rms_norm(b.attn_norm, x));
  return h + mlp(layer, b, rms_norm(b.mlp_norm, h), side);
}

std::vector<int64_t> LlamaStage::hidden_shape(int64_t mbs) const {
  const int64_t s = cfg_.seq_len / cp_.size();
  return {mbs, tp_.sequence_parallel ? s / tp_.size() : s, cfg_.hidden};
}

at::Tensor LlamaStage::embed(const at::Tensor& ids) const {
  const at::Tensor word = compute_param(word_);
  return vocab_parallel_embedding(tp_, ids, word, tp_.rank() * word.size(0));  // (b, s[/tp], h)
}

at::Tensor LlamaStage::head_logits(const at::Tensor& x) const {
  const at::Tensor w = compute_param(head_);
  return column_parallel_linear(tp_, rms_norm(final_norm_, x), w, at::Tensor()).to(at::kFloat);
}

at::Tensor LlamaStage::run(const at::Tensor& input, const at::Tensor& targets) const {
  at::Tensor x = spec_.has_embedding ? embed(input) : input.to(compute_);  // boundaries: boundary_ (NOTE [bf16])
  const Side side = side_;  // the recomputed forward of full recomputation keeps this micro-batch's
  for (int64_t l = spec_.first_layer; l < spec_.first_layer + spec_.num_layers; ++l) {
    if (recompute_ == Recompute::kFull)
      x = trident::recompute([this, l, side](const at::Tensor& in) { return block(l, in, side); }, x);
    else
      x = block(l, x, side);
  }
  if (!spec_.has_head) return x.to(boundary_);
  const int64_t vocab_start = tp_.rank() * params_[head_].tensor.size(0);
  return micro_batch_loss(vocab_parallel_cross_entropy(tp_, head_logits(x), targets, vocab_start, cfg_.vocab_size),
                          loss_mask_.get());
}

at::Tensor LlamaStage::logits(const at::Tensor& ids) const {
  if (!spec_.has_embedding || !spec_.has_head || tp_.size() != 1)
    throw std::logic_error("LlamaStage::logits needs the whole model on one rank (embedding, head, tp = 1)");
  at::Tensor x = embed(ids);
  for (int64_t l = spec_.first_layer; l < spec_.first_layer + spec_.num_layers; ++l) x = block(l, x);
  return head_logits(x).narrow(-1, 0, cfg_.vocab_size);
}

std::unique_ptr<Stage> LlamaModel::make_stage(int stage, int num_stages, const TpContext& tp, int64_t seed,
                                             const EpContext& ep, const CpContext& cp) const {
  const auto specs = split_layers(cfg_.layers, num_stages, pipeline_layers_);
  return std::make_unique<LlamaStage>(cfg_, specs.at(static_cast<size_t>(stage)), tp, seed, ep, cp);
}

std::vector<ParamInfo> LlamaModel::unique_params(int num_stages) const {
  return unique_params_of(split_layers(cfg_.layers, num_stages, pipeline_layers_),
                          [&](const ChunkSpec& spec) { return llama_param_plan(cfg_, spec, 1, 0); });
}

std::vector<TiedGroup> LlamaModel::tied_groups(int num_stages) const {
  if (!cfg_.tie_embeddings) return {};
  return {{"embedding.word.weight", {0, num_stages - 1}}};  // the embedding and the LM head
}

// The PaLM convention, as GPT's (models/gpt/gpt.cpp): 6 x the matrix
// parameters (q, k, v, o, gate, up, down, and the head once) plus attention's
// 12 x layers x hidden x seq per token (MLA: 6 x layers x heads x (qk + v widths) x seq).
double LlamaModel::flops_per_token() const {
  const double h = static_cast<double>(cfg_.hidden), l = static_cast<double>(cfg_.layers);
  const double heads = static_cast<double>(cfg_.heads);
  // One layer's attention matrices, counted once for the resource checks, the planner and here.
  const double attn = static_cast<double>(config_rules::attention_params(cfg_));
  // Attention's products per token and layer, over the width of q·k and of the weights times v: 2 x hidden
  // (PaLM's count), and under MLA the heads' own widths (NOTE [MLA]).
  const double attn_width =
      cfg_.mla() ? heads * static_cast<double>(cfg_.qk_nope_head_dim + cfg_.qk_rope_head_dim + cfg_.v_head_dim) : 2 * h;
  // Under MoE a token passes its top-k experts, the shared expert and its gate, and the router: the
  // active parameters.
  const double moe_mlp = 3 * h * static_cast<double>(cfg_.moe_ffn() * cfg_.moe_top_k + cfg_.moe_shared_ffn_hidden) +
                         h * static_cast<double>(cfg_.experts + llama_features(cfg_).shared_expert_gate);
  const double dense_mlp = 3 * h * static_cast<double>(cfg_.ffn());
  double mlps = 0;
  for (int64_t layer = 0; layer < cfg_.layers; ++layer) mlps += cfg_.moe_layer(layer) ? moe_mlp : dense_mlp;
  const double matrices = l * attn + mlps + h * static_cast<double>(cfg_.vocab_size);
  return 6 * matrices + 6 * l * attn_width * static_cast<double>(cfg_.seq_len);
}

LayerCosts LlamaModel::profile(int64_t mbs, int reps) const {
  return profile_pieces(cfg_, mbs, reps, [this](const ChunkSpec& spec) {
    return std::make_unique<LlamaStage>(cfg_, spec, TpContext{}, 1);
  });
}

}  // namespace trident
