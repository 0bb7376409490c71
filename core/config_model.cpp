// The [model] section: its keys, and the rules across them that every family
// shares (NOTE [size checks]: sizes that must fit int64; the shapes the
// tensor-parallel plan needs). Each family's own rules are in its table
// (models/<family>/<family>_rules.cpp, NOTE [config tables]).
#include "core/config.h"
#include "core/config_rules.h"
#include "core/config_schema.h"
#include "core/router_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"

namespace trident {

namespace config_rules {

std::string big(Big v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3Lg", v);
  return buf;
}

// The model's parameters (tp = pp = 1): per block the attention (q, o: hidden^2
// each; k, v: hidden x kv_heads x head_dim each) and the MLP (two or, gated,
// three matrices), plus the embedding, the position table where the family
// learns one, and an untied head. Biases and norms are left out: this is a
// lower bound.
Big attention_params(const ModelConfig& m) {
  const Big h = m.hidden, d = m.kv_channels > 0 ? Big(m.kv_channels) : Big(m.hidden) / Big(m.heads);
  if (!m.mla()) return 2 * h * (Big(m.heads) * d) + 2 * h * (Big(m.kv()) * d);  // q and o; k and v
  // NOTE [MLA] in models/common/mla.h: the down and up projections and o
  const Big heads = m.heads, qk = Big(m.qk_nope_head_dim) + Big(m.qk_rope_head_dim), ql = m.q_lora_rank,
            kl = m.kv_lora_rank;
  return (ql > 0 ? h * ql + ql * heads * qk : h * heads * qk) + h * (kl + Big(m.qk_rope_head_dim)) +
         kl * heads * (Big(m.qk_nope_head_dim) + Big(m.v_head_dim)) + heads * Big(m.v_head_dim) * h;
}

int64_t moe_layers(const ModelConfig& m) {
  return m.experts > 0 ? m.layers - std::min(m.moe_first_dense, m.layers) : 0;
}

Big model_params(const ModelConfig& m, const ModelFeatures& s) {
  const Big h = m.hidden;
  const Big ffn = m.ffn_hidden > 0 ? Big(m.ffn_hidden) : 4 * h;
  // An MoE layer: model.experts MLPs of the experts' width, the router (E x hidden) and a shared expert.
  const Big moe_mlp = Big(m.experts) * Big(m.moe_ffn()) + Big(m.moe_shared_ffn_hidden);
  const Big attn = attention_params(m);
  const Big mats = s.gated_mlp ? 3 : 2;
  // The first model.moe_first_dense layers (all of them without experts) keep the dense MLP.
  const Big dense_layers = Big(m.layers) - Big(moe_layers(m));
  const Big blocks = dense_layers * (attn + mats * h * ffn) +
                     (Big(m.layers) - dense_layers) * (attn + mats * h * moe_mlp + Big(m.experts) * h);
  const Big embed = Big(m.vocab_size) * h * (m.tie_embeddings ? 1 : 2) + (s.position_table ? Big(m.seq_len) * h : 0);
  return blocks + embed;
}

Big expert_params(const ModelConfig& m) {
  return Big(moe_layers(m)) * Big(m.experts) * 3 * Big(m.hidden) * Big(m.moe_ffn());
}

namespace {

// The blocks' shape, the vocabulary, the initialisation.
std::vector<Field> shape_fields() {
  return {
      TRIDENT_FIELD(model, arch, family_rule(), "model family"),
      TRIDENT_FIELD(model, layers, at_least(1), "transformer blocks"),
      TRIDENT_FIELD(model, hidden, at_least(1), "model width"),
      TRIDENT_FIELD(model, heads, at_least(1), "attention heads"),
      TRIDENT_FIELD(model, ffn_hidden, at_least(0), "MLP width; 0 means 4 * hidden (gpt only: llama needs it set)"),
      TRIDENT_FIELD(model, kv_heads, at_least(0),
                    "key/value heads, dividing heads (grouped-query attention; 1 = multi-query); 0 = heads (llama)"),
      TRIDENT_FIELD(model, seq_len, at_least(1), "tokens per sample"),
      TRIDENT_FIELD(model, vocab_size, at_least(1), "tokenizer vocabulary before padding"),
      TRIDENT_FIELD(model, vocab_pad_multiple, at_least(1),
                    "padded vocabulary is a multiple of this * tp"),
      TRIDENT_FIELD(model, dropout, unit_open(), "dropout probability (0 keeps runs exact)"),
      TRIDENT_FIELD(model, init_std, positive(), "standard deviation of the normal init"),
      TRIDENT_FIELD(model, layernorm_eps, positive(), "LayerNorm (gpt) or RMSNorm (llama) epsilon"),
      TRIDENT_FIELD(model, init_from, any(),
                    "Hugging Face directory to start from (GPT-2 or Llama, see `trident export`); empty = random init"),
      TRIDENT_FIELD(model, tie_embeddings, any(), "the LM head shares the word embedding (gpt: must be true)"),
  };
}

// The attention heads: rotary embedding and its scaling, and their width.
std::vector<Field> head_fields() {
  return {
      TRIDENT_FIELD(model, rope_theta, positive(), "rotary position embedding base (llama)"),
      TRIDENT_FIELD(model, rope_scaling, one_of({"none", "llama3", "yarn"}),
                    "rotary frequency scaling: none, Llama 3.1's or YaRN (DeepSeek-V3's; the rope_* keys below; llama)"),
      // How many times the original context is stretched: transformers' rope validation asks >= 1 of
      // both llama3 and yarn (below 1 it only warns, and the frequencies come out wrong).
      TRIDENT_FIELD(model, rope_factor, at_least(1), "llama3 or yarn rope scaling: factor"),
      TRIDENT_FIELD(model, rope_low_freq_factor, positive(), "llama3 rope scaling: low_freq_factor"),
      TRIDENT_FIELD(model, rope_high_freq_factor, positive(), "llama3 rope scaling: high_freq_factor"),
      TRIDENT_FIELD(model, rope_original_max_position, at_least(1),
                    "llama3 or yarn rope scaling: original_max_position_embeddings"),
      TRIDENT_FIELD(model, rope_beta_fast, positive(), "yarn rope scaling: beta_fast (rotations where the ramp starts)"),
      TRIDENT_FIELD(model, rope_beta_slow, positive(), "yarn rope scaling: beta_slow (rotations where it ends)"),
      TRIDENT_FIELD(model, rope_mscale, at_least(0), "yarn rope scaling: mscale; 0 = absent"),
      TRIDENT_FIELD(model, rope_mscale_all_dim, at_least(0),
                    "yarn rope scaling: mscale_all_dim; 0 = absent (deepseek_v3: also scales MLA's softmax)"),
      TRIDENT_FIELD(model, kv_channels, at_least(0),
                    "width of one attention head; 0 = hidden / heads (qwen3_moe's head_dim)"),
  };
}

// The mixture of experts: the experts, the router, the balancing losses.
std::vector<Field> expert_fields() {
  return {
      TRIDENT_FIELD(model, experts, at_least(0),
                    "routed experts per layer, each a SwiGLU MLP (the MoE families; 0 = a dense MLP)"),
      TRIDENT_FIELD(model, moe_ffn_hidden, at_least(0), "each routed expert's SwiGLU width; 0 = model.ffn_hidden (MoE)"),
      TRIDENT_FIELD(model, moe_shared_ffn_hidden, at_least(0),
                    "the shared expert's SwiGLU width, its output gated by a sigmoid (qwen2_moe); 0 = none"),
      TRIDENT_FIELD(model, moe_first_dense, at_least(0),
                    "the first layers keep a dense MLP of model.ffn_hidden (MoE; DeepSeek-V3's first_k_dense_replace)"),
      TRIDENT_FIELD(model, moe_top_k, at_least(1), "experts each token is routed to (MoE)"),
      TRIDENT_FIELD(model, moe_norm_topk_prob, any(),
                    "the chosen experts' softmax weights renormalised to sum 1 (MoE; mixtral: true)"),
      TRIDENT_FIELD(model, moe_aux_loss_coeff, at_least(0),
                    "coefficient of each MoE layer's Switch/GShard load-balancing loss (Megatron's aux_loss)"),
      TRIDENT_FIELD(model, moe_aux_loss, one_of({"aux_loss", "seq_aux_loss", "pooled_aux_loss"}),
                    "the load-balancing loss over each micro-batch's tokens, or per sequence averaged over its "
                    "sequences (DeepSeek-V3's; Megatron's moe_router_load_balancing_type), or pooled over every "
                    "MoE layer as transformers' load_balancing_loss_func (softmax routers)"),
      TRIDENT_FIELD(model, moe_z_loss_coeff, at_least(0), "coefficient of each MoE layer's router z-loss (MoE)"),
      TRIDENT_FIELD(model, moe_capacity_factor, at_least(0),
                    "> 0: each expert takes at most ceil(tokens x top_k / experts x this) of a rank's assignments "
                    "per layer and micro-batch, the rest dropped (Megatron's moe_expert_capacity_factor); 0 = none"),
      TRIDENT_FIELD(model, moe_token_drop_policy, one_of({"probs", "position"}),
                    "which assignments past an expert's capacity are dropped: the lowest weights (probs) or the "
                    "latest tokens (position) (Megatron's moe_token_drop_policy)"),
      TRIDENT_FIELD(model, moe_score_function, one_of({"softmax", "sigmoid"}),
                    "the router's scores: a softmax over the experts or each expert's sigmoid (deepseek_v3: sigmoid; "
                    "Megatron's moe_router_score_function)"),
      TRIDENT_FIELD(model, moe_router_groups, at_least(1),
                    "groups of experts for group-limited routing, dividing model.experts; 1 = no group limit "
                    "(DeepSeek-V3's n_group)"),
      TRIDENT_FIELD(model, moe_router_group_topk, at_least(1),
                    "the best groups (by their two best experts' scores) a token's experts come from "
                    "(DeepSeek-V3's topk_group)"),
      TRIDENT_FIELD(model, moe_routed_scaling_factor, positive(),
                    "the chosen experts' weights are multiplied by this (DeepSeek-V3's routed_scaling_factor)"),
      TRIDENT_FIELD(model, moe_expert_bias, any(),
                    "a per-expert score-correction bias that chooses experts and never weights them (DeepSeek-V3's "
                    "e_score_correction_bias; zeros at init, loaded with --init-from)"),
      TRIDENT_FIELD(model, moe_bias_update_rate, at_least(0),
                    "> 0: each step every correction bias moves by this times the sign of its expert's load below "
                    "the mean, over the whole step's tokens (DeepSeek-V3's auxiliary-loss-free balancing; "
                    "Megatron's moe_router_bias_update_rate); 0 = kept as it is"),
  };
}

// Multi-head latent attention (deepseek_v3).
std::vector<Field> latent_attention_fields() {
  return {
      TRIDENT_FIELD(model, q_lora_rank, at_least(0),
                    "multi-head latent attention: the queries' low-rank width; 0 = q from the hidden state "
                    "directly (deepseek_v3)"),
      TRIDENT_FIELD(model, kv_lora_rank, at_least(0),
                    "multi-head latent attention: the keys' and values' shared latent width (deepseek_v3, required)"),
      TRIDENT_FIELD(model, qk_nope_head_dim, at_least(0),
                    "multi-head latent attention: each q/k head's width without rotary embedding (deepseek_v3)"),
      TRIDENT_FIELD(model, qk_rope_head_dim, at_least(0),
                    "multi-head latent attention: each q/k head's rotary width, the key's shared by every head "
                    "(deepseek_v3)"),
      TRIDENT_FIELD(model, v_head_dim, at_least(0), "multi-head latent attention: each value head's width (deepseek_v3)"),
  };
}

}  // namespace

std::vector<Field> model_fields() {
  std::vector<Field> out;
  for (auto part : {shape_fields, head_fields, expert_fields, latent_attention_fields})
    for (Field& f : part()) out.push_back(std::move(f));
  return out;
}

}  // namespace config_rules

namespace {

using namespace config_rules;
using json::quote;

void check_sizes(const Config& c) {
  const ModelConfig& m = c.model;
  const TrainingConfig& t = c.training;
  // The family is not known yet (its table comes later): the widest shape,
  // so that no family's count can overflow.
  const Big params = model_params(m, ModelFeatures{.gated_mlp = true, .position_table = true});
  if (params * 4 > kMaxBytes) {
    fail(c, "model.layers (" + n(m.layers) + ") x model.hidden (" + n(m.hidden) + ")^2 (and model.ffn_hidden, "
            "model.vocab_size): about " + big(params) + " parameters, " + big(params * 4) +
            " bytes, overflow int64 (NOTE [size checks]): expected a model under 2.3e18 parameters");
  }
  const Big logits = Big(t.micro_batch_size) * Big(m.seq_len) * Big(m.vocab_size);
  if (logits * 4 > kMaxBytes) {
    fail(c, "training.micro_batch_size (" + n(t.micro_batch_size) + ") x model.seq_len (" + n(m.seq_len) +
            ") x model.vocab_size (" + n(m.vocab_size) + ") = " + big(logits) +
            " logits of one micro-batch overflow int64 bytes (NOTE [size checks])");
  }
  const Big step_tokens = Big(t.global_batch_size) * Big(m.seq_len + 1);
  if (step_tokens * 8 > kMaxBytes) {
    fail(c, "training.global_batch_size (" + n(t.global_batch_size) + ") x model.seq_len (" + n(m.seq_len) +
            ") = " + big(step_tokens) + " tokens per step overflow int64 bytes (NOTE [size checks])");
  }
  if (Big(c.data.synthetic_tokens) * 2 * 4 > kMaxBytes) {  // training and validation tokens, uint32 each
    fail(c, "data.synthetic_tokens (" + n(c.data.synthetic_tokens) + ") overflows int64 bytes (NOTE [size checks])");
  }
  const int64_t max_int = std::numeric_limits<int>::max();
  if (t.global_batch_size / t.micro_batch_size > max_int) {
    fail(c, "training.global_batch_size (" + n(t.global_batch_size) + ") / training.micro_batch_size (" +
            n(t.micro_batch_size) + ") = " + n(t.global_batch_size / t.micro_batch_size) +
            " micro-batches: expected at most " + n(max_int) + " (a schedule counts them in int)");
  }
  for (const auto& [value, key] : {std::pair{m.layers, "model.layers"}, std::pair{m.heads, "model.heads"},
                                   std::pair{c.parallel.tp, "parallel.tp"}, std::pair{c.parallel.pp, "parallel.pp"},
                                   std::pair{c.parallel.dp, "parallel.dp"}, std::pair{c.schedule.chunks, "schedule.chunks"}}) {
    if (value > max_int) fail(c, std::string(key) + " = " + n(value) + ": expected at most " + n(max_int));
  }
}

// Shapes every family needs for its TP plan (models/gpt/gpt.cpp, models/llama/llama.cpp
// assert them); each family's own rules are in its table (NOTE [config tables]).
void check_model_shape(const Config& c) {
  const ModelConfig& m = c.model;
  const ParallelConfig& p = c.parallel;
  if (m.kv_channels == 0 && m.hidden % m.heads != 0)
    fail(c, "model.hidden (" + n(m.hidden) + ") must be divisible by model.heads (" + n(m.heads) + ")");
  if (m.heads % p.tp != 0)
    fail(c, "parallel.tp (" + n(p.tp) + ") must divide model.heads (" + n(m.heads) + ")");
  if (m.ffn() % p.tp != 0) {
    fail(c, "parallel.tp (" + n(p.tp) + ") must divide the MLP width (" + n(m.ffn()) +
                (m.ffn_hidden > 0 ? ", model.ffn_hidden)" : ", 4 x model.hidden)"));
  }
  if (m.padded_vocab(p.tp) % p.tp != 0)
    fail(c, "parallel.tp (" + n(p.tp) + ") must divide the padded vocabulary (" + n(m.padded_vocab(p.tp)) + ")");
  if (p.sequence_parallel && m.seq_len % p.tp != 0) {
    fail(c, "parallel.sequence_parallel needs model.seq_len (" + n(m.seq_len) +
                ") divisible by parallel.tp (" + n(p.tp) + ")");
  }
  // NOTE [context split] in core/context_split.h: 2 x cp chunks of equal length.
  if (p.cp == 1 && p.cp_comm != "p2p")
    fail(c, "parallel.cp_comm = " + quote(p.cp_comm) + " with parallel.cp = 1: no sequence is split (it would be "
            "ignored)");
  if (p.cp > 1) {
    if (m.seq_len % (2 * p.cp) != 0)
      fail(c, "parallel.cp = " + n(p.cp) + " needs model.seq_len (" + n(m.seq_len) + ") divisible by 2 x cp = " +
                  n(2 * p.cp) + " (each rank keeps two of 2 x cp equal chunks)");
    if (p.sequence_parallel && (m.seq_len / p.cp) % p.tp != 0)
      fail(c, "parallel.sequence_parallel with parallel.cp = " + n(p.cp) + " needs model.seq_len / cp (" +
                  n(m.seq_len / p.cp) + ") divisible by parallel.tp (" + n(p.tp) + ")");
    if (p.cp_comm == "a2a" && ((m.heads / p.tp) % p.cp != 0 || (m.kv() / p.tp) % p.cp != 0))
      fail(c, "parallel.cp_comm = \"a2a\" scatters each rank's heads over cp: model.heads / tp (" + n(m.heads / p.tp) +
                  ") and the key/value heads / tp (" + n(m.kv() / p.tp) + ") must be divisible by parallel.cp (" +
                  n(p.cp) + ")");
    if (m.dropout > 0)
      fail(c, "parallel.cp = " + n(p.cp) + " with model.dropout = " + format_double(m.dropout) +
                  ": dropout under context parallelism is not supported yet; expected model.dropout = 0");
  }
  if (m.dropout > 0 && p.tp > 1) {
    fail(c, "model.dropout = " + format_double(m.dropout) + " with parallel.tp = " + n(p.tp) +
                ": expected model.dropout = 0 when parallel.tp > 1 (dropout under tensor parallelism is not "
                "supported yet)");
  }
  const std::string& rc = c.training.recompute;
  if (rc != "none" && m.dropout > 0) {
    // Recomputation replays the CPU generator's state, but a test found the
    // losses of a dropout run still differ from not recomputing.
    fail(c, "training.recompute = " + quote(rc) + " with model.dropout = " + format_double(m.dropout) +
                ": expected training.recompute = \"none\" or model.dropout = 0 (recomputation with dropout is "
                "not supported yet)");
  }
}

}  // namespace

namespace config_rules {

void check_model_relations(const Config& c) {
  check_sizes(c);  // before any product below is formed in int64
  check_model_shape(c);
}

namespace {

// NOTE [MoE keys] for a dense family: no MoE key, given (NOTE [given keys]) or changed, and no
// expert grid.
void check_dense_moe_keys(const Config& c) {
  const ModelConfig& m = c.model;
  const ModelConfig d;
  // Given at any value (NOTE [given keys]), or changed by code that built the config.
  const auto refuse = [&](bool differs, const std::string& key) {
    if (differs || c.gave(key))
      fail(c, key + " is a mixture-of-experts key: model.arch = " + quote(m.arch) +
                  " is a dense family and does not read it (the MoE families: mixtral, qwen2_moe, qwen3_moe, deepseek_v3)");
  };
  refuse(m.experts != d.experts, "model.experts");
  refuse(m.moe_ffn_hidden != d.moe_ffn_hidden, "model.moe_ffn_hidden");
  refuse(m.moe_shared_ffn_hidden != d.moe_shared_ffn_hidden, "model.moe_shared_ffn_hidden");
  refuse(m.moe_first_dense != d.moe_first_dense, "model.moe_first_dense");
  refuse(m.moe_top_k != d.moe_top_k, "model.moe_top_k");
  refuse(m.moe_norm_topk_prob != d.moe_norm_topk_prob, "model.moe_norm_topk_prob");
  refuse(m.moe_aux_loss_coeff != d.moe_aux_loss_coeff, "model.moe_aux_loss_coeff");
  refuse(m.moe_z_loss_coeff != d.moe_z_loss_coeff, "model.moe_z_loss_coeff");
  refuse(m.moe_aux_loss != d.moe_aux_loss, "model.moe_aux_loss");
  refuse(m.moe_capacity_factor != d.moe_capacity_factor, "model.moe_capacity_factor");
  refuse(m.moe_token_drop_policy != d.moe_token_drop_policy, "model.moe_token_drop_policy");
  refuse(m.moe_score_function != d.moe_score_function, "model.moe_score_function");
  refuse(m.moe_router_groups != d.moe_router_groups, "model.moe_router_groups");
  refuse(m.moe_router_group_topk != d.moe_router_group_topk, "model.moe_router_group_topk");
  refuse(m.moe_routed_scaling_factor != d.moe_routed_scaling_factor, "model.moe_routed_scaling_factor");
  refuse(m.moe_expert_bias != d.moe_expert_bias, "model.moe_expert_bias");
  refuse(m.moe_bias_update_rate != d.moe_bias_update_rate, "model.moe_bias_update_rate");
  if (c.parallel.ep != 1)
    fail(c, "parallel.ep = " + n(c.parallel.ep) + " with model.arch = " + quote(m.arch) +
                ": a dense family has no experts to split (the MoE families: mixtral, qwen2_moe, qwen3_moe, deepseek_v3)");
  if (c.parallel.etp != 0)
    fail(c, "parallel.etp = " + n(c.parallel.etp) + " with model.arch = " + quote(m.arch) +
                ": a dense family has no experts to split (the MoE families: mixtral, qwen2_moe, qwen3_moe, deepseek_v3)");
}

}  // namespace

// NOTE [MoE keys]
// model.experts and the model.moe_* keys are read by the MoE families only
// (ModelFeatures::moe): set for a dense family they would do nothing, so they are
// refused; an MoE family needs experts and top-k that can route.
void check_moe_keys(const Config& c, const ModelFeatures& shape) {
  const ModelConfig& m = c.model;
  const ModelConfig d;
  if (c.parallel.moe_dispatcher != "alltoall" && c.parallel.ep == 1)
    fail(c, "parallel.moe_dispatcher = " + quote(c.parallel.moe_dispatcher) +
                " with parallel.ep = 1: every expert is on every rank, nothing is dispatched (it would be ignored)");
  if (!shape.moe) {
    check_dense_moe_keys(c);
    return;
  }
  // NOTE [experts under tensor parallelism] in parallel/token_dispatcher.h: at etp < tp each of the tp / etp
  // token slices takes an equal part of the micro-batch's tokens.
  const int64_t slices = c.parallel.etp > 0 && c.parallel.tp % c.parallel.etp == 0 ? c.parallel.tp / c.parallel.etp : 1;
  if (slices > 1 && (c.training.micro_batch_size * (m.seq_len / c.parallel.cp)) % slices != 0)
    fail(c, "parallel.etp = " + n(c.parallel.etp) + " with parallel.tp = " + n(c.parallel.tp) + ": each of the tp / etp = " +
                n(slices) + " token slices routes an equal part of a micro-batch's training.micro_batch_size x "
                "model.seq_len / parallel.cp = " + n(c.training.micro_batch_size * (m.seq_len / c.parallel.cp)) +
                " tokens; expected a multiple of " + n(slices));
  if (m.moe_token_drop_policy != d.moe_token_drop_policy && m.moe_capacity_factor == 0)
    fail(c, "model.moe_token_drop_policy = " + quote(m.moe_token_drop_policy) +
                " with model.moe_capacity_factor = 0: no token is dropped; set the capacity factor");
  if (m.moe_aux_loss != d.moe_aux_loss && m.moe_aux_loss_coeff == 0)
    fail(c, "model.moe_aux_loss = " + quote(m.moe_aux_loss) +
                " with model.moe_aux_loss_coeff = 0: no balancing loss is computed; set the coefficient");
  // NOTE [pooled aux loss] in models/common/moe_losses.h.
  if (m.moe_aux_loss == "pooled_aux_loss" && m.moe_score_function != "softmax")
    fail(c, "model.moe_aux_loss = \"pooled_aux_loss\" with model.moe_score_function = " + quote(m.moe_score_function) +
                ": the pooled loss is transformers' load_balancing_loss_func, a softmax over the router logits; "
                "use \"aux_loss\" or \"seq_aux_loss\"");
  if (m.moe_aux_loss == "pooled_aux_loss" && c.parallel.cp > 1)
    fail(c, "model.moe_aux_loss = \"pooled_aux_loss\" with parallel.cp = " + n(c.parallel.cp) +
                ": pooling the counts over a context-parallel group is not built; use \"aux_loss\" or parallel.cp = 1");
  if (m.experts < 1)
    fail(c, "model.experts = " + n(m.experts) + ": model.arch = " + quote(m.arch) +
                " is a mixture of experts and needs at least 1 (Mixtral 8x7B has 8)");
  if (m.experts % c.parallel.ep != 0)
    fail(c, "parallel.ep (" + n(c.parallel.ep) + ") must divide model.experts (" + n(m.experts) +
                "): each expert-parallel rank holds the same number of experts");
  // NOTE [MoE router] in models/common/router.h: what can route, the router's own rules.
  const std::string router = router_options_error(router_options(m));
  if (!router.empty()) fail(c, router);
  if (m.moe_bias_update_rate > 0 && !m.moe_expert_bias)
    fail(c, "model.moe_bias_update_rate = " + format_double(m.moe_bias_update_rate) +
                " with model.moe_expert_bias = false: there is no correction bias to update");
  if (m.moe_first_dense >= m.layers)
    fail(c, "model.moe_first_dense (" + n(m.moe_first_dense) + ") must be below model.layers (" + n(m.layers) +
                "): at least one layer must hold the experts");
}

}  // namespace config_rules

const std::vector<RopeScalingKey>& rope_scaling_keys() {
  using M = const ModelConfig&;
  static const std::vector<RopeScalingKey> keys = {
      {"model.rope_factor", "\"llama3\" or \"yarn\"", true, true, [](M m) { return m.rope_factor; }},
      {"model.rope_original_max_position", "\"llama3\" or \"yarn\"", true, true,
       [](M m) { return static_cast<double>(m.rope_original_max_position); }},
      {"model.rope_low_freq_factor", "\"llama3\"", true, false, [](M m) { return m.rope_low_freq_factor; }},
      {"model.rope_high_freq_factor", "\"llama3\"", true, false, [](M m) { return m.rope_high_freq_factor; }},
      {"model.rope_beta_fast", "\"yarn\"", false, true, [](M m) { return m.rope_beta_fast; }},
      {"model.rope_beta_slow", "\"yarn\"", false, true, [](M m) { return m.rope_beta_slow; }},
      {"model.rope_mscale", "\"yarn\"", false, true, [](M m) { return m.rope_mscale; }},
      {"model.rope_mscale_all_dim", "\"yarn\"", false, true, [](M m) { return m.rope_mscale_all_dim; }},
  };
  return keys;
}

bool model_key_unread(const Config& c, const std::string& key) {
  // Without experts no MoE key is read: a dense family (NOTE [MoE keys]), or an MoE family its
  // own rules refuse. model.experts itself is one of them.
  if (c.model.experts == 0 && (key == "model.experts" || key.rfind("model.moe_", 0) == 0)) return true;
  for (const RopeScalingKey& r : rope_scaling_keys())
    if (key == r.key) return !((r.llama3 && c.model.rope_scaling == "llama3") || (r.yarn && c.model.rope_scaling == "yarn"));
  return false;
}

// NOTE [YaRN]
// YaRN (Peng et al. 2023, arXiv 2309.00071) as transformers 5.24 computes it
// (_compute_yarn_parameters; DeepSeek-V3's published checkpoints use it with
// factor 40 over 4096 positions): each rotary frequency f_i blends f_i
// (extrapolation) and f_i / factor (interpolation) by a ramp over the
// dimensions between those turning beta_fast and beta_slow times over the
// original length (models/llama/llama.cpp's rope_inv_freq), and the cos and
// sin tables are multiplied by an attention factor: mscale(factor, mscale) /
// mscale(factor, mscale_all_dim) when both are given (non-zero), else
// mscale(factor, 1), with mscale(s, m) = 0.1 m ln s + 1 for s > 1, else 1.
// DeepSeek-V3's attention (transformers' yarn_apply_mscale) also multiplies
// MLA's softmax scale 1/sqrt(nope + rope) by mscale(factor, mscale_all_dim)^2
// when mscale_all_dim is given.
namespace {
double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }
}  // namespace

double ModelConfig::rope_attention_factor() const {
  if (rope_scaling != "yarn") return 1.0;
  if (rope_mscale != 0 && rope_mscale_all_dim != 0)
    return yarn_mscale(rope_factor, rope_mscale) / yarn_mscale(rope_factor, rope_mscale_all_dim);
  return yarn_mscale(rope_factor, 1.0);
}

double ModelConfig::mla_softmax_scale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_nope_head_dim + qk_rope_head_dim));
  if (rope_scaling == "yarn" && rope_mscale_all_dim != 0) {
    const double m = yarn_mscale(rope_factor, rope_mscale_all_dim);
    scale = scale * m * m;
  }
  return scale;
}

}  // namespace trident
