// GPT-2: token + learned position embeddings, pre-LayerNorm blocks of causal
// self-attention (fused qkv) and a tanh-GELU MLP, final LayerNorm, LM head
// tied to the word embedding. The TP plan (which parameter is split along
// which dimension) is written once, in gpt_param_plan(); the pipeline split
// once, in split_layers().
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "core/config.h"
#include "core/param.h"
#include "models/common/cast_cache.h"
#include "parallel/tensor_parallel.h"
#include "models/common/model.h"
#include "models/common/plan.h"

namespace trident {

// The TP plan: every parameter of a chunk with its global name, full shape,
// split dimension and init, for TP rank `tp_rank` of `tp_size`.
std::vector<PlannedParam> gpt_param_plan(const ModelConfig& cfg, const ChunkSpec& spec, int64_t tp_size,
                                         int64_t tp_rank);

// NOTE [bf16]
// training.precision = "bf16" follows Megatron's scheme with fp32 master
// weights: the parameters (the data-parallel buckets' fp32 views) stay fp32
// and are what AdamW updates; each forward casts a weight to bf16 through
// autograd, so its bf16 weight gradient is cast back and accumulated into the
// fp32 gradient bucket across micro-batches, and reduced over DP in fp32.
// Matmuls, GELU and the residual stream run in bf16; LayerNorm, softmax and
// the cross-entropy in fp32. Boundary tensors between pipeline stages travel
// in parallel.pipeline_dtype, by default the compute dtype (bf16: the
// residual stream as it is, no cast); "fp32" sends them as fp32 (bf16 ->
// fp32 -> bf16 is exact either way, so pp-only layouts stay bit-identical to
// pp = 1; fp32 costs twice the bytes).
class GptStage : public Stage {
 public:
  GptStage(const ModelConfig& cfg, const ChunkSpec& spec, const TpContext& tp, int64_t seed,
           const CpContext& cp = CpContext{});

  // First stage: input is token ids (batch, seq) int64; otherwise the hidden
  // state (batch, seq, hidden), or (batch, seq/tp, hidden) under sequence
  // parallelism. Last stage: returns the mean token loss of the micro-batch
  // (a scalar) given targets (batch, seq); otherwise the hidden state.
  at::Tensor forward(const at::Tensor& input, const at::Tensor& targets) override { return run(input, targets); }
  at::Tensor forward(const at::Tensor& input, const at::Tensor& targets) const { return run(input, targets); }
  // (mbs, seq, hidden), or (mbs, seq/tp, hidden) under sequence parallelism.
  std::vector<int64_t> input_shape(int64_t micro_batch_size) const override { return hidden_shape(micro_batch_size); }
  std::vector<int64_t> output_shape(int64_t micro_batch_size) const override { return hidden_shape(micro_batch_size); }
  // The whole model on one rank (embedding and head, tp = 1): next-token
  // logits (batch, seq, vocab_size) of token ids (batch, seq), padding columns
  // dropped. For eval/generate and export checks; training uses forward().
  at::Tensor logits(const at::Tensor& ids) const override;

  std::vector<Param>& params() override { return params_; }
  // full: each block keeps only its input; selective: the attention core and
  // the MLP's up projection + GELU keep only their inputs (see NOTE [recomputation]).
  void set_recompute(Recompute mode) override;
  void set_documents(std::shared_ptr<const Documents> docs) override;
  void set_loss_mask(std::shared_ptr<const LossMask> mask) override { loss_mask_ = std::move(mask); }
  void set_compute_dtype(at::ScalarType dtype) override { compute_ = dtype; }
  void set_read_gate(std::function<void(size_t)> gate) override { casts_.set_read_gate(std::move(gate)); }
  void set_boundary_dtype(at::ScalarType dtype) override { boundary_ = dtype; }
  at::ScalarType boundary_dtype() const override { return boundary_; }
  void set_training(bool training) override { training_ = training; }
  // Under context parallelism, this rank's positions (NOTE [context split]), "cp.positions".
  std::vector<Buffer> buffers() override;
  const std::vector<Param>& params() const { return params_; }
  const ChunkSpec& spec() const { return spec_; }

 private:
  at::Tensor run(const at::Tensor& input, const at::Tensor& targets) const;
  std::vector<int64_t> hidden_shape(int64_t mbs) const;
  // Positions in params_ of a LayerNorm's and a block's parameters, found by
  // name once when the stage is built (a forward reads params_ by position:
  // the trainer may have replaced a Param's tensor by a view since).
  struct NormParams {
    size_t weight, bias;
  };
  struct BlockParams {
    NormParams ln1, ln2;
    size_t qkv_weight, qkv_bias, attn_proj_weight, attn_proj_bias;
    size_t fc_weight, fc_bias, mlp_proj_weight, mlp_proj_bias;
  };
  void index_params();
  // A parameter in the compute dtype (an autograd cast of the fp32 master
  // under bf16, so its gradient lands in fp32); master(): the fp32 tensor.
  at::Tensor compute_param(size_t index) const;
  const at::Tensor& master(size_t index) const { return casts_.master(params_, index); }
  // LayerNorm computed in fp32, returned in x's dtype.
  at::Tensor norm(const NormParams& n, const at::Tensor& x) const;
  at::Tensor block(int64_t layer, const at::Tensor& x) const;
  at::Tensor attention(const BlockParams& b, const at::Tensor& x) const;

  ModelConfig cfg_;
  ChunkSpec spec_;
  TpContext tp_;
  CpContext cp_;         // this rank's share of each sequence (NOTE [context split])
  at::Tensor positions_;  // cp > 1, first stage: (seq_len / cp) int64, the positions of its tokens
  std::shared_ptr<const Documents> docs_;  // the next forward's documents, or none (NOTE [packed documents])
  std::shared_ptr<const LossMask> loss_mask_;  // the next forward's, or none (NOTE [token-weighted loss])
  std::vector<Param> params_;
  CastCache casts_;  // compute_param()'s compute-dtype copies (NOTE [cast once per step])
  Recompute recompute_ = Recompute::kNone;
  at::ScalarType compute_ = at::kFloat;
  at::ScalarType boundary_ = at::kFloat;  // what the hidden state crosses a pipeline boundary in
  bool training_ = true;  // dropout only while training (set_training)
  double dropout() const { return training_ ? cfg_.dropout : 0.0; }
  size_t word_ = 0, position_ = 0, head_ = 0;  // embedding.word, embedding.position, the head's tied copy
  NormParams final_ln_{0, 0};
  std::vector<BlockParams> blocks_;  // blocks_[l - spec_.first_layer]
};

// The GPT model for the trainer: stages split by split_layers, parameters
// from gpt_param_plan, FLOPs by the PaLM convention.
class GptModel : public Model {
 public:
  GptModel(const ModelConfig& cfg, std::vector<int64_t> pipeline_layers)
      : cfg_(cfg), pipeline_layers_(std::move(pipeline_layers)) {}
  std::unique_ptr<Stage> make_stage(int stage, int num_stages, const TpContext& tp, int64_t seed,
                                    const EpContext& ep = EpContext{},
                                    const CpContext& cp = CpContext{}) const override;
  std::vector<ParamInfo> unique_params(int num_stages) const override;
  std::vector<TiedGroup> tied_groups(int num_stages) const override {
    return {{"embedding.word.weight", {0, num_stages - 1}}};  // the embedding and the LM head
  }
  double flops_per_token() const override;
  LayerCosts profile(int64_t micro_batch_size, int reps) const override;

 private:
  ModelConfig cfg_;
  std::vector<int64_t> pipeline_layers_;
};

}  // namespace trident
