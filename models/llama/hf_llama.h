// Hugging Face interop of the Llama-decoder families: Trident's parameters
// (llama_param_plan's names, full tensors) to and from transformers'
// directories (config.json, and model.safetensors or shards listed in
// model.safetensors.index.json, written by checkpoint/safetensors_shards.h).
// What differs between the families (tensor names, their own config.json
// keys, the router transformers' class holds) is one table per family in
// hf_llama_families.cpp; the notes below describe each.
//
// NOTE [HF Llama layout]
//   Trident                          HF (LlamaForCausalLM)
//   embedding.word.weight (Vp, h)    model.embed_tokens.weight (V, h): vocabulary padding removed
//   layers.i.attn_norm.weight        model.layers.i.input_layernorm.weight
//   layers.i.attn.{q,k,v,o}.weight   model.layers.i.self_attn.{q,k,v,o}_proj.weight (same layout:
//                                    Trident's rotary embeddings use HF's rotate_half convention)
//   layers.i.mlp_norm.weight         model.layers.i.post_attention_layernorm.weight
//   layers.i.mlp.{gate,up,down}      model.layers.i.mlp.{gate,up,down}_proj.weight
//   final_norm.weight                model.norm.weight
//   head.weight (Vp, h)              lm_head.weight (V, h); absent or equal to embed_tokens when tied
// config.json: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, vocab_size, rms_norm_eps, max_position_embeddings (>= model.seq_len),
// tie_word_embeddings, and the rotary base and scaling either as transformers 5 writes them
// (rope_parameters {rope_type, rope_theta, ...}) or as older files do (rope_theta, rope_scaling {rope_type|type, ...}).

// NOTE [HF Mixtral layout]
// model_type "mixtral" (MixtralForCausalLM) is the same but for the MLP: Trident's
//   layers.i.moe.router.weight (E, h)         model.layers.i.block_sparse_moe.gate.weight
//   layers.i.moe.experts.gate.weight (E, F, h) model.layers.i.block_sparse_moe.experts.{e}.w1.weight (F, h) each
//   layers.i.moe.experts.up.weight (E, F, h)   ... experts.{e}.w3.weight (F, h)
//   layers.i.moe.experts.down.weight (E, h, F) ... experts.{e}.w2.weight (h, F)
// Trident keeps each projection of every expert as one tensor, experts on dim 0 (what a
// grouped GEMM reads, and what expert parallelism splits); a file holds one tensor per
// expert, as the published Mixtral checkpoints do and as transformers 5.24's save_pretrained
// writes them (it fuses gate and up into gate_up_proj (E, 2F, h) in memory only). config.json:
// num_local_experts, num_experts_per_tok, intermediate_size (each expert's width);
// sliding_window must be null and router_jitter_noise 0. router_aux_loss_coef is not read: it
// weighs transformers' loss pooled over all layers (load_balancing_loss_func), a training
// choice of the run (model.moe_aux_loss = "pooled_aux_loss" with that coefficient, NOTE
// [pooled aux loss]), not the model's.

// NOTE [HF Qwen MoE layout]
// model_type "qwen2_moe" (Qwen2MoeForCausalLM) and "qwen3_moe" (Qwen3MoeForCausalLM):
//   layers.i.moe.router.weight                  model.layers.i.mlp.gate.weight
//   layers.i.moe.experts.{gate,up,down}.weight  model.layers.i.mlp.experts.{e}.{gate,up,down}_proj.weight each
//   layers.i.moe.shared.{gate,up,down}.weight   model.layers.i.mlp.shared_expert.{gate,up,down}_proj.weight (qwen2_moe)
//   layers.i.moe.shared_gate.weight (1, h)      model.layers.i.mlp.shared_expert_gate.weight (qwen2_moe)
//   layers.i.attn.{q,k,v}.bias                  model.layers.i.self_attn.{q,k,v}_proj.bias (qwen2_moe)
//   layers.i.attn.{q,k}_norm.weight (head_dim)  model.layers.i.self_attn.{q,k}_norm.weight (qwen3_moe)
// config.json: num_experts (qwen3_moe also num_local_experts, which transformers 5.24 writes where
// the Hub's files say num_experts; Trident writes num_experts), num_experts_per_tok,
// moe_intermediate_size (model.moe_ffn_hidden), norm_topk_prob, shared_expert_intermediate_size
// (qwen2_moe), head_dim (qwen3_moe: model.kv_channels, which need not be hidden / heads);
// intermediate_size (the dense MLP width) is model.ffn_hidden; mlp_only_layers = [0, ..., k-1] is
// model.moe_first_dense = k (dense layers first, as DeepSeek-V3's first_k_dense_replace). Another
// mlp_only_layers pattern and decoder_sparse_step other than 1 are refused, as is a sliding window.

// NOTE [HF DeepSeek-V3 layout]
// model_type "deepseek_v3" (DeepseekV3ForCausalLM): Llama's names for the norms, embedding, head,
// o_proj and the dense first layers' MLPs, Qwen's for the experts, and
//   layers.i.attn.q_down.weight (q_lora_rank, h)       model.layers.i.self_attn.q_a_proj.weight
//   layers.i.attn.q_down_norm.weight                   ... self_attn.q_a_layernorm.weight
//   layers.i.attn.q.weight (H·(nope+rope), q_lora_rank) ... self_attn.q_b_proj.weight (q_proj without a q latent)
//   layers.i.attn.kv_down.weight (kv_lora_rank+rope, h) ... self_attn.kv_a_proj_with_mqa.weight
//   layers.i.attn.kv_down_norm.weight                  ... self_attn.kv_a_layernorm.weight
//   layers.i.attn.kv_up.weight (H·(nope+v), kv_lora_rank) ... self_attn.kv_b_proj.weight
//   layers.i.moe.router.bias (E)                       ... mlp.gate.e_score_correction_bias
//   layers.i.moe.shared.{gate,up,down}.weight          ... mlp.shared_experts.{gate,up,down}_proj.weight
// The rotary rows (each head's last qk_rope_head_dim rows of q and of kv_down) are kept in rotate_half's
// order (NOTE [MLA]); with rope_interleave = true (DeepseekV3Config's default, the published checkpoints')
// a file keeps them in interleaved pairs, and the import permutes them (x0 x1 x2 x3 ... -> x0 x2 ... |
// x1 x3 ...), the same for q and k, so every q·k product is the file's; the export writes rope_interleave = false.
// NOTE [HF DeepSeek-V3 config]
// config.json: n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts
// (model.moe_shared_ffn_hidden = their count x moe_intermediate_size; the shared experts are not
// gated), first_k_dense_replace (model.moe_first_dense), n_group, topk_group,
// routed_scaling_factor, norm_topk_prob, q_lora_rank (null: none), kv_lora_rank,
// qk_nope_head_dim, qk_rope_head_dim, v_head_dim; head_dim is the rotary width here and must
// equal qk_rope_head_dim; num_key_value_heads must equal num_attention_heads. The router is the
// sigmoid over groups with the correction bias (scoring_func and topk_method, where the Hub's
// files say them, must say so; moe_layer_freq 1). The multi-token prediction layers
// (num_nextn_predict_layers of them, after the model's layers, as the published checkpoints
// hold them) are not read.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/config.h"
#include "core/param.h"

namespace trident {

struct HfLlama {
  std::string dir;
  ModelConfig model;      // from config.json; seq_len = max_position_embeddings
  std::string tokenizer;  // config.json's "tokenizer" (written by trident export), else "hf" when
                          // DIR/tokenizer.json exists, else ""
  std::map<std::string, at::Tensor> tensors;  // HF names, float32
  // config.json's key of the routed expert count ("num_local_experts", "num_experts",
  // "n_routed_experts"; "" for llama): an error about the count names the file's key.
  std::string experts_key;
  // deepseek_v3 (NOTE [HF DeepSeek-V3 layout]): rotary rows kept in interleaved pairs (rope_interleave),
  // and the multi-token prediction layers after the model's (num_nextn_predict_layers), not read.
  bool rope_interleaved = false;
  int64_t mtp_layers = 0;
};

// Reads DIR/config.json and the weights (F32, F16 or BF16). Throws naming the
// file and the key or tensor on anything unexpected or unsupported (biases,
// another activation, a head_dim other than hidden/heads, another rope type).
HfLlama read_hf_llama(const std::string& dir);
// The same from DIR/config.json alone (no tensors read).
HfLlama read_hf_llama_config(const std::string& dir);

// Throws naming every config.json field that differs from `cfg`.
void check_hf_llama_matches(const HfLlama& hf, const ModelConfig& cfg);

// Fills every parameter (this rank's slice) from `hf`, after the check.
void init_from_hf_llama(const HfLlama& hf, const ModelConfig& cfg, std::vector<Param>& params);

// Writes DIR/config.json and the weights: one model.safetensors, or, when
// `shard_bytes` > 0, model-0000K-of-0000N.safetensors files of at most about
// that many bytes each plus model.safetensors.index.json. `full(info)` returns
// the full tensor of each untied parameter of the whole model at tp = 1.
// Returns the number of tensors written.
int write_hf_llama(const std::string& dir, const ModelConfig& cfg, const std::string& tokenizer,
                   const std::function<at::Tensor(const ParamInfo&)>& full, int64_t shard_bytes = 0);

}  // namespace trident
