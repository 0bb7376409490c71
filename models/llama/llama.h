// Llama: token embedding, pre-RMSNorm blocks of causal self-attention with
// rotary position embeddings and grouped-query attention (kv_heads key/value
// heads shared by heads/kv_heads query heads each; multi-query at 1), a
// SwiGLU MLP (down(silu(gate(x)) * up(x))), final RMSNorm and an LM head that
// is its own matrix or the word embedding (model.tie_embeddings). No biases,
// no dropout. The TP plan is written once, in llama_param_plan().
//
// NOTE [Llama TP plan]
//   parameter                      shape          split over tp
//   embedding.word.weight          (Vp, h)        rows (vocab-parallel)
//   layers.i.attn_norm.weight      (h)            replicated (sequence-parallel gradient)
//   layers.i.attn.q.weight         (H·d, h)       rows: whole query heads
//   layers.i.attn.{k,v}.weight     (K·d, h)       rows: whole key/value heads (tp divides K)
//   layers.i.attn.o.weight         (h, H·d)       columns (row-parallel)
//   layers.i.mlp_norm.weight, final_norm.weight  (h)  replicated
//   layers.i.mlp.{gate,up}.weight  (F, h)         rows
//   layers.i.mlp.down.weight       (h, F)         columns (row-parallel)
//   head.weight                    (Vp, h)        rows; with tied embeddings a copy of embedding.word.weight
// TP rank r holds query heads [r·H/t, (r+1)·H/t) and key/value heads [r·K/t, (r+1)·K/t):
// query head j reads key/value head j / (H/K), and that head is on the same rank. Rotary
// embeddings use Hugging Face's layout (the two halves of each head rotated together,
// "rotate_half"), so weights map to and from transformers' LlamaForCausalLM without a permutation.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "core/config.h"
#include "core/param.h"
#include "models/common/cast_cache.h"
#include "models/common/model.h"
#include "models/common/moe_layer.h"
#include "models/common/plan.h"
#include "parallel/tensor_parallel.h"

namespace trident {

// ep_size > 1: the routed experts split over EP, rank ep_rank's (NOTE [expert grid]); each
// expert split along its width over etp of the tp ranks (0: all tp_size of them; 1: whole), this
// rank's part tp_rank mod etp.
std::vector<PlannedParam> llama_param_plan(const ModelConfig& cfg, const ChunkSpec& spec, int64_t tp_size,
                                           int64_t tp_rank, int64_t ep_size = 1, int64_t ep_rank = 0,
                                           int64_t etp = 0);

// Rotary frequencies (head_dim / 2 of them, fp32), with Llama 3.1's scaling
// when cfg.rope_scaling = "llama3": Hugging Face's computation, step by step.
at::Tensor rope_inv_freq(const ModelConfig& cfg);

class LlamaStage : public Stage {
 public:
  LlamaStage(const ModelConfig& cfg, const ChunkSpec& spec, const TpContext& tp, int64_t seed,
             const EpContext& ep = EpContext{}, const CpContext& cp = CpContext{});

  at::Tensor forward(const at::Tensor& input, const at::Tensor& targets) override { return run(input, targets); }
  std::vector<int64_t> input_shape(int64_t micro_batch_size) const override { return hidden_shape(micro_batch_size); }
  std::vector<int64_t> output_shape(int64_t micro_batch_size) const override { return hidden_shape(micro_batch_size); }
  std::vector<Param>& params() override { return params_; }
  // The rotary tables, "rope.cos" and "rope.sin" (none in a stage without blocks).
  std::vector<Buffer> buffers() override;
  // full: each block keeps only its input; selective: the attention core and
  // the MLP's gate/up products keep only their inputs (NOTE [recomputation]).
  void set_recompute(Recompute mode) override { recompute_ = mode; }
  void set_documents(std::shared_ptr<const Documents> docs) override;
  void set_loss_mask(std::shared_ptr<const LossMask> mask) override { loss_mask_ = std::move(mask); }
  void set_compute_dtype(at::ScalarType dtype) override { compute_ = dtype; }
  void set_read_gate(std::function<void(size_t)> gate) override { casts_.set_read_gate(std::move(gate)); }
  void set_boundary_dtype(at::ScalarType dtype) override { boundary_ = dtype; }
  at::ScalarType boundary_dtype() const override { return boundary_; }
  at::Tensor logits(const at::Tensor& ids) const override;
  void set_loss_scale(double scale) override { loss_scale_ = scale; }
  // NOTE [pooled aux loss]: the experts' counts travel between stages under model.moe_aux_loss = "pooled_aux_loss".
  int64_t side_width() const override;
  void set_side(std::shared_ptr<SideValues> side) override { side_ = std::move(side); }
  at::Tensor take_moe_stats() override;  // NOTE [MoE stats]
  void update_expert_bias(const at::Tensor& loads, double rate) override;  // NOTE [expert bias]

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  struct BlockParams {
    size_t attn_norm = kNone, q = kNone, k = kNone, v = kNone, o = kNone, mlp_norm = kNone;
    size_t gate = kNone, up = kNone, down = kNone;  // the experts' under MoE
    // kNone where the family's features (NOTE [model features] in core/config.h) have no such parameter.
    size_t router = kNone, router_bias = kNone;  // an MoE layer's; the bias under model.moe_expert_bias
    size_t q_down = kNone, q_down_norm = kNone, kv_down = kNone, kv_down_norm = kNone, kv_up = kNone;  // latent attention (NOTE [MLA])
    size_t q_bias = kNone, k_bias = kNone, v_bias = kNone;  // features.qkv_bias
    size_t q_norm = kNone, k_norm = kNone;                   // features.qk_norm
    size_t shared_gate = kNone, shared_up = kNone, shared_down = kNone;  // the shared experts (model.moe_shared_ffn_hidden)
    size_t shared_expert_gate = kNone;                                    // features.shared_expert_gate
  };
  at::Tensor run(const at::Tensor& input, const at::Tensor& targets) const;
  std::vector<int64_t> hidden_shape(int64_t mbs) const;
  at::Tensor compute_param(size_t index) const;  // in the compute dtype (an autograd cast under bf16)
  at::Tensor rms_norm(size_t weight, const at::Tensor& x) const;
  // cos_ and sin_ for s positions in one dtype, sin's first half negated; kept
  // while the buffers and the request are unchanged.
  struct RopeTables {
    at::Tensor cos, sin_signed;  // (s, d)
    int64_t seq = -1, version = -1;
    at::ScalarType dtype = at::kFloat;
    const void* source = nullptr;
  };
  const RopeTables& rope_tables(int64_t s, at::ScalarType dtype) const;
  at::Tensor rotate(const at::Tensor& x, const RopeTables& r) const;  // (b, heads, s, d) -> rotary embedding applied
  // The tables at each token's own position in its document, (b, 1, s, d): NOTE [packed documents].
  RopeTables document_rope(const Documents& docs, at::ScalarType dtype) const;
  at::Tensor attention(const BlockParams& b, const at::Tensor& x) const;
  at::Tensor latent_attention(const BlockParams& b, const at::Tensor& x) const;  // NOTE [MLA]
  // `side`: the micro-batch's pooled counts in a training forward under the pooled aux loss, else null.
  using Side = std::shared_ptr<SideValues>;
  at::Tensor mlp(int64_t layer, const BlockParams& b, const at::Tensor& x, const Side& side) const;
  at::Tensor moe(int64_t layer, const BlockParams& b, const at::Tensor& x, const Side& side) const;  // NOTE [MoE block]
  at::Tensor block(int64_t layer, const at::Tensor& x, const Side& side = nullptr) const;
  at::Tensor embed(const at::Tensor& ids) const;
  at::Tensor head_logits(const at::Tensor& x) const;  // final norm + head: (b, s, vocab/tp) fp32

  ModelConfig cfg_;
  ChunkSpec spec_;
  TpContext tp_;
  EpContext ep_;  // the routed experts' group (NOTE [expert dispatch])
  CpContext cp_;  // this rank's share of each sequence (NOTE [context split])
  std::vector<Param> params_;
  CastCache casts_;  // compute_param()'s compute-dtype copies (NOTE [cast once per step])
  Recompute recompute_ = Recompute::kNone;
  at::ScalarType compute_ = at::kFloat;
  at::ScalarType boundary_ = at::kFloat;  // what the hidden state crosses a pipeline boundary in
  double loss_scale_ = 1.0;                // the aux losses' backward scale (set_loss_scale)
  Side side_;                              // set_side(): the next forward's (NOTE [pipeline side values])
  at::Tensor cos_, sin_;  // (seq_len / cp, head_dim) fp32 at this rank's positions, on the stage's device (buffers())
  mutable RopeTables rope_;
  std::shared_ptr<const Documents> docs_;  // the next forward's documents, or none (NOTE [packed documents])
  std::shared_ptr<const LossMask> loss_mask_;  // the next forward's, or none (NOTE [token-weighted loss])
  size_t word_ = 0, final_norm_ = 0, head_ = 0;
  std::vector<BlockParams> blocks_;  // blocks_[l - spec_.first_layer]
  std::vector<std::unique_ptr<MoeLayer>> moe_;  // likewise; null for a dense layer
};

class LlamaModel : public Model {
 public:
  LlamaModel(const ModelConfig& cfg, std::vector<int64_t> pipeline_layers)
      : cfg_(cfg), pipeline_layers_(std::move(pipeline_layers)) {}
  std::unique_ptr<Stage> make_stage(int stage, int num_stages, const TpContext& tp, int64_t seed,
                                    const EpContext& ep = EpContext{},
                                    const CpContext& cp = CpContext{}) const override;
  std::vector<ParamInfo> unique_params(int num_stages) const override;
  std::vector<TiedGroup> tied_groups(int num_stages) const override;
  double flops_per_token() const override;
  LayerCosts profile(int64_t micro_batch_size, int reps) const override;

 private:
  ModelConfig cfg_;
  std::vector<int64_t> pipeline_layers_;
};

}  // namespace trident
