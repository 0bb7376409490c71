// Hugging Face GPT-2 interop: the mapping between Trident's GPT parameters
// (global names from gpt_param_plan, full tensors) and the tensors of HF's
// GPT2Model as stored in model.safetensors, plus config.json.
//
// NOTE [HF GPT-2 layout]
//   Trident                               HF (transformers GPT2Model)
//   embedding.word.weight (Vp, h)         wte.weight (V, h): vocabulary padding removed
//   embedding.position.weight (S, h)      wpe.weight (S, h), S = n_positions = seq_len
//   layers.i.ln1.{weight,bias}            h.i.ln_1.{weight,bias}
//   layers.i.attn.qkv.weight (3h, h)      h.i.attn.c_attn.weight (h, 3h): Conv1D stores (in, out);
//     rows ordered (head, {q,k,v}, hd)      columns ordered ({q,k,v}, head, hd)
//   layers.i.attn.qkv.bias (3h)           h.i.attn.c_attn.bias (3h), reordered the same way
//   layers.i.attn.proj.weight (h, h)      h.i.attn.c_proj.weight (h, h), transposed
//   layers.i.ln2.*, mlp.fc.* (f, h), mlp.proj.* (h, f)
//                                         h.i.ln_2.*, h.i.mlp.c_fc.* (h, f), h.i.mlp.c_proj.* (f, h)
//   final_ln.*                            ln_f.*
//   The LM head is tied to wte (HF's lm_head.weight, when present, must equal it).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/config.h"
#include "core/param.h"

namespace trident {

struct HfGpt2 {
  std::string dir;
  ModelConfig model;      // from config.json; seq_len = n_positions
  std::string tokenizer;  // "gpt2" | "byte": config.json's "tokenizer", else guessed from vocab_size, else ""
  std::map<std::string, at::Tensor> tensors;  // HF names (no "transformer." prefix), float32
};

// Reads DIR/config.json and DIR/model.safetensors (F32, F16 or BF16; a
// "transformer." prefix and HF's attention-mask buffers are accepted).
// Throws naming the file and the key or tensor on anything unexpected.
HfGpt2 read_hf_gpt2(const std::string& dir);
// The same from DIR/config.json alone (no tensors read).
HfGpt2 read_hf_gpt2_config(const std::string& dir);

// The full Trident tensor of parameter `info` from an HF model, with the
// vocabulary padded to info.full_shape[0] (zero rows). Throws naming the
// tensor and both shapes when the HF tensor has another shape.
at::Tensor trident_tensor_from_hf(const HfGpt2& hf, const ParamInfo& info);

// Throws naming every field of config.json that differs from `cfg`
// (n_layer, n_embd, n_head, n_inner, vocab_size, layer_norm_epsilon), and
// n_positions when it is smaller than cfg.seq_len (a larger one is cut to seq_len).
void check_hf_matches(const HfGpt2& hf, const ModelConfig& cfg);

// The `model.init_from` hook: fills every parameter (this rank's slice,
// info.shard_dim / shard_offset) from the HF GPT-2 directory `dir`, after
// check_hf_matches. Tied copies are filled like the embedding.
void init_from_hf(const std::string& dir, const ModelConfig& cfg, std::vector<Param>& params);
// The same from an HF model already read.
void init_from_hf(const HfGpt2& hf, const ModelConfig& cfg, std::vector<Param>& params);

// Writes DIR/model.safetensors and DIR/config.json in HF's GPT-2 layout.
// `full(info)` returns the full Trident tensor of each (untied) parameter of
// gpt_param_plan(cfg, whole model, tp = 1).
void write_hf_gpt2(const std::string& dir, const ModelConfig& cfg, const std::string& tokenizer,
                   const std::function<at::Tensor(const ParamInfo&)>& full);

}  // namespace trident
