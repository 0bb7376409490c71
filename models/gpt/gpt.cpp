// GPT stage: parameters from the TP plan, forward through embedding, blocks
// and head. Shapes in comments are per TP rank.
#include "models/gpt/gpt.h"

#include "core/context_split.h"
#include "models/common/attention.h"
#include "models/common/context_attention.h"
#include "models/common/document_attention.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>


namespace trident {

std::vector<PlannedParam> gpt_param_plan(const ModelConfig& cfg, const ChunkSpec& spec, int64_t tp_size,
                                         int64_t tp_rank) {
  const int64_t h = cfg.hidden, f = cfg.ffn(), vp = cfg.padded_vocab(tp_size);
  const double proj_std = cfg.init_std / std::sqrt(2.0 * static_cast<double>(cfg.layers));
  ParamPlan plan(tp_size, tp_rank);
  // A bias: zeros, no weight decay. A row-parallel layer's bias is replicated and added after the
  // reduce, to a sequence shard under SP; a column-parallel layer's is split with its outputs.
  auto bias = [&plan](const std::string& name, std::vector<int64_t> shape, int shard_dim) {
    ParamDecl decl;
    decl.name = name;
    decl.shape = std::move(shape);
    decl.shard_dim = shard_dim;
    decl.init = "zeros";
    decl.no_decay = true;
    decl.sequence_parallel_grad = shard_dim == kReplicated;
    plan.add(decl);
  };
  // A LayerNorm: weight ones, bias zeros; replicated, fed a sequence shard under SP, no weight decay.
  auto norm = [&plan, h](const std::string& pre) {
    ParamDecl decl;
    decl.shape = {h};
    decl.no_decay = true;
    decl.sequence_parallel_grad = true;
    decl.name = pre + ".weight", decl.init = "ones";
    plan.add(decl);
    decl.name = pre + ".bias", decl.init = "zeros";
    plan.add(decl);
  };
  // The word embedding, split over TP by vocabulary rows; padding rows are zero at init. The LM head's
  // copy has the same name, so the same init.
  auto word_embedding = [&](bool tied_copy) {
    ParamDecl decl;
    decl.name = "embedding.word.weight";
    decl.shape = {vp, h};
    decl.shard_dim = kColumnParallel;
    decl.std_dev = cfg.init_std;
    decl.init_valid_rows = cfg.vocab_size;
    decl.tied_copy = tied_copy;
    plan.add(decl);
  };
  if (spec.has_embedding) {
    word_embedding(/*tied_copy=*/false);
    ParamDecl position;
    position.name = "embedding.position.weight";
    position.shape = {cfg.seq_len, h};
    position.std_dev = cfg.init_std;
    position.sequence_parallel_grad = true;
    plan.add(position);
  }
  for (int64_t l = spec.first_layer; l < spec.first_layer + spec.num_layers; ++l) {
    const std::string pre = "layers." + std::to_string(l);
    norm(pre + ".ln1");
    // qkv rows are ordered (head, {q,k,v}, head_dim) so a split over TP keeps whole heads.
    plan.add_weight(pre + ".attn.qkv.weight", {3 * h, h}, kColumnParallel, cfg.init_std);
    bias(pre + ".attn.qkv.bias", {3 * h}, kColumnParallel);
    plan.add_weight(pre + ".attn.proj.weight", {h, h}, kRowParallel, proj_std);
    bias(pre + ".attn.proj.bias", {h}, kReplicated);
    norm(pre + ".ln2");
    plan.add_weight(pre + ".mlp.fc.weight", {f, h}, kColumnParallel, cfg.init_std);
    bias(pre + ".mlp.fc.bias", {f}, kColumnParallel);
    plan.add_weight(pre + ".mlp.proj.weight", {h, f}, kRowParallel, proj_std);
    bias(pre + ".mlp.proj.bias", {h}, kReplicated);
  }
  if (spec.has_head) {
    norm("final_ln");
    word_embedding(/*tied_copy=*/true);
  }
  return std::move(plan.params());
}

GptStage::GptStage(const ModelConfig& cfg, const ChunkSpec& spec, const TpContext& tp, int64_t seed,
                   const CpContext& cp)
    : cfg_(cfg), spec_(spec), tp_(tp), cp_(cp) {
  const int64_t t = tp.size();
  // Rules of check_config (core/config_model.cpp) and gpt_rules.cpp, asserted here.
  if (cfg.hidden % cfg.heads != 0 || cfg.heads % t != 0 || cfg.ffn() % t != 0 || cfg.padded_vocab(t) % t != 0 ||
      (cfg.dropout > 0 && t > 1))
    throw std::logic_error("GptStage: the model config does not split over tp=" + std::to_string(t) +
                           " (check_config admits no such config)");
  for (auto& planned : gpt_param_plan(cfg, spec, t, tp.rank()))
    params_.push_back({init_shard(seed, planned.info, planned.local_shape), planned.info});
  index_params();
  if (cp.size() > 1 && spec.has_embedding)
    positions_ = at::tensor(context_positions(cfg.seq_len, cp.size(), cp.rank()), at::kLong);
}

std::vector<Buffer> GptStage::buffers() {
  if (!positions_.defined()) return {};
  return {{"cp.positions", &positions_}};
}

void GptStage::index_params() {
  auto at = [&](const std::string& name, bool tied_copy = false) {
    return param_index(params_, name, "GptStage", tied_copy);
  };
  auto norm_at = [&](const std::string& pre) { return NormParams{at(pre + ".weight"), at(pre + ".bias")}; };
  if (spec_.has_embedding) word_ = at("embedding.word.weight"), position_ = at("embedding.position.weight");
  for (int64_t l = spec_.first_layer; l < spec_.first_layer + spec_.num_layers; ++l) {
    const std::string pre = "layers." + std::to_string(l);
    blocks_.push_back({norm_at(pre + ".ln1"), norm_at(pre + ".ln2"), at(pre + ".attn.qkv.weight"),
                       at(pre + ".attn.qkv.bias"), at(pre + ".attn.proj.weight"), at(pre + ".attn.proj.bias"),
                       at(pre + ".mlp.fc.weight"), at(pre + ".mlp.fc.bias"), at(pre + ".mlp.proj.weight"),
                       at(pre + ".mlp.proj.bias")});
  }
  if (spec_.has_head) final_ln_ = norm_at("final_ln"), head_ = at("embedding.word.weight", true);
}

void GptStage::set_recompute(Recompute mode) {
  // Recomputation replays the CPU generator's state, but a test found the
  // losses of a dropout run still differ from not recomputing: check_config
  // refuses training.recompute with model.dropout > 0 until that is understood.
  if (mode != Recompute::kNone && cfg_.dropout > 0)
    throw std::logic_error("GptStage::set_recompute with dropout > 0 (check_config admits no such config)");
  recompute_ = mode;
}

void GptStage::set_documents(std::shared_ptr<const Documents> docs) {
  if (docs && cp_.size() > 1)
    throw std::invalid_argument("GPT over packed documents under context parallelism is not built");
  docs_ = std::move(docs);
}

at::Tensor GptStage::compute_param(size_t index) const {
  return casts_.get(params_, index, compute_);  // NOTE [cast once per step]
}

at::Tensor GptStage::norm(const NormParams& n, const at::Tensor& x) const {
  return at::layer_norm(x.to(at::kFloat), {cfg_.hidden}, master(n.weight), master(n.bias), cfg_.layernorm_eps)
      .to(x.scalar_type());
}

at::Tensor GptStage::attention(const BlockParams& b, const at::Tensor& x) const {
  const int64_t heads = cfg_.heads / tp_.size(), hd = cfg_.hidden / cfg_.heads;
  at::Tensor qkv = column_parallel_linear(tp_, x, compute_param(b.qkv_weight), compute_param(b.qkv_bias));
  const double dropout = this->dropout();
  // The attention core: (b, s, 3 hidden/tp) -> (b, s, hidden/tp), holding
  // (b, heads/tp, s, s) scores; what selective recomputation drops.
  auto core = [heads, hd, dropout, cp = cp_, docs = docs_](const at::Tensor& qkv_flat) {
    const int64_t batch = qkv_flat.size(0), s = qkv_flat.size(1);  // full sequence, also under SP
    // One unbind, whose backward stacks the three gradients into one tensor
    // (three selects would each scatter theirs into a zero-filled copy of it).
    const std::vector<at::Tensor> parts = qkv_flat.view({batch, s, heads, 3, hd}).unbind(3);
    const at::Tensor q = parts[0].transpose(1, 2);  // (b, heads/tp, s, hd)
    const at::Tensor k = parts[1].transpose(1, 2);
    const at::Tensor v = parts[2].transpose(1, 2);
    const at::Tensor y = docs ? document_attention(q, k, v, docs->lengths, dropout)
                         : cp.size() > 1 ? context_attention(cp, q, k, v)
                                         : causal_attention(q, k, v, dropout);
    return y.transpose(1, 2).reshape({batch, s, heads * hd});  // (b, s, hidden/tp)
  };
  at::Tensor y = recompute_ == Recompute::kSelective ? trident::recompute(core, qkv) : core(qkv);
  return row_parallel_linear(tp_, y, compute_param(b.attn_proj_weight), compute_param(b.attn_proj_bias));
}

at::Tensor GptStage::block(int64_t layer, const at::Tensor& x) const {
  const BlockParams& b = blocks_.at(static_cast<size_t>(layer - spec_.first_layer));
  auto resid_dropout = [&](at::Tensor t) { return dropout() > 0 ? at::dropout(t, dropout(), true) : t; };
  at::Tensor h = norm(b.ln1, x);
  at::Tensor out = x + resid_dropout(attention(b, h));
  h = norm(b.ln2, out);
  // (b, s, ffn/tp): the up projection's output, which GELU's backward keeps, is the
  // largest activation of a block; selective recomputation keeps its input instead.
  auto up = [this, b](const at::Tensor& in) {  // by value: the backward replays it
    return at::gelu(column_parallel_linear(tp_, in, compute_param(b.fc_weight), compute_param(b.fc_bias)), "tanh");
  };
  h = recompute_ == Recompute::kSelective ? trident::recompute(up, h) : up(h);
  h = row_parallel_linear(tp_, h, compute_param(b.mlp_proj_weight), compute_param(b.mlp_proj_bias));
  return out + resid_dropout(h);
}

std::vector<int64_t> GptStage::hidden_shape(int64_t mbs) const {
  const int64_t s = cfg_.seq_len / cp_.size();
  return {mbs, tp_.sequence_parallel ? s / tp_.size() : s, cfg_.hidden};
}

at::Tensor GptStage::run(const at::Tensor& input, const at::Tensor& targets) const {
  at::Tensor x = spec_.has_embedding ? input : input.to(compute_);  // boundaries: boundary_ (NOTE [bf16])
  if (spec_.has_embedding) {
    const at::Tensor word = compute_param(word_);
    x = vocab_parallel_embedding(tp_, input, word, tp_.rank() * word.size(0));  // (b, s[/tp], hidden)
    at::Tensor pos = docs_ && docs_->positions.defined() ? compute_param(position_).index_select(0, docs_->positions.reshape(-1))
                                               .view({input.size(0), input.size(1), -1})  // NOTE [packed documents]
                     : positions_.defined() ? compute_param(position_).index_select(0, positions_)  // NOTE [context split]
                                            : compute_param(position_).narrow(0, 0, input.size(1));
    if (tp_.sequence_parallel) {
      const int64_t part = input.size(1) / tp_.size();
      pos = pos.narrow(-2, tp_.rank() * part, part);
    }
    x = x + pos;
    if (dropout() > 0) x = at::dropout(x, dropout(), true);
  }
  for (int64_t l = spec_.first_layer; l < spec_.first_layer + spec_.num_layers; ++l) {
    if (recompute_ == Recompute::kFull)
      x = trident::recompute([this, l](const at::Tensor& in) { return block(l, in); }, x);
    else
      x = block(l, x);
  }
  if (!spec_.has_head) return x.to(boundary_);
  x = norm(final_ln_, x);
  const at::Tensor word = compute_param(head_);
  at::Tensor logits = column_parallel_linear(tp_, x, word, at::Tensor()).to(at::kFloat);  // (b, s, vocab/tp)
  return micro_batch_loss(vocab_parallel_cross_entropy(tp_, logits, targets, tp_.rank() * word.size(0), cfg_.vocab_size),
                          loss_mask_.get());
}

std::unique_ptr<Stage> GptModel::make_stage(int stage, int num_stages, const TpContext& tp, int64_t seed,
                                           const EpContext& ep, const CpContext& cp) const {
  if (ep.size() > 1) throw std::logic_error("GptModel: a dense model has no experts to split over ep");
  const auto specs = split_layers(cfg_.layers, num_stages, pipeline_layers_);
  return std::make_unique<GptStage>(cfg_, specs.at(static_cast<size_t>(stage)), tp, seed, cp);
}

std::vector<ParamInfo> GptModel::unique_params(int num_stages) const {
  return unique_params_of(split_layers(cfg_.layers, num_stages, pipeline_layers_),
                          [&](const ChunkSpec& spec) { return gpt_param_plan(cfg_, spec, 1, 0); });
}

// 6 x the matrix parameters (the tied head counted once, position table
// excluded) plus attention's 12 x layers x hidden x seq per token: the
// convention of PaLM's MFU (Chowdhery et al. 2022, appendix B); Kaplan et al.
// 2020 count half that.
double GptModel::flops_per_token() const {
  const double h = static_cast<double>(cfg_.hidden), l = static_cast<double>(cfg_.layers);
  const double matrices = l * (4 * h * h + 2 * h * static_cast<double>(cfg_.ffn())) +
                          h * static_cast<double>(cfg_.vocab_size);
  return 6 * matrices + 12 * l * h * static_cast<double>(cfg_.seq_len);
}

LayerCosts GptModel::profile(int64_t mbs, int reps) const {
  return profile_pieces(cfg_, mbs, reps, [this](const ChunkSpec& spec) {
    return std::make_unique<GptStage>(cfg_, spec, TpContext{}, 1);
  });
}

at::Tensor GptStage::logits(const at::Tensor& ids) const {
  if (!spec_.has_embedding || !spec_.has_head || tp_.size() != 1)
    throw std::logic_error("GptStage::logits needs the whole model on one rank (embedding, head, tp = 1)");
  // Same ops as forward() at tp = 1, where every TP mapping is the identity.
  const at::Tensor word = compute_param(word_);
  at::Tensor x = vocab_parallel_embedding(tp_, ids, word, 0) + compute_param(position_).narrow(0, 0, ids.size(1));
  for (int64_t l = spec_.first_layer; l < spec_.first_layer + spec_.num_layers; ++l) x = block(l, x);
  x = norm(final_ln_, x);
  return column_parallel_linear(tp_, x, compute_param(head_), at::Tensor())
      .narrow(-1, 0, cfg_.vocab_size)
      .to(at::kFloat);
}

}  // namespace trident
