#include "planner/compute_cost.h"

#include "planner/model_cost.h"

#include <algorithm>
#include <cmath>

namespace trident::plan {

namespace {

// NOTE [element-wise bytes] Device-memory traffic of a layer's memory-bound operators per token, in
// elements of the compute precision (e bytes) plus 1-byte dropout masks, counted as each operator reads
// its inputs and writes its outputs once (the fusions Megatron runs: bias+GELU, bias+dropout+residual).
// GPT forward: two LayerNorms read and write h (4h), two bias-dropout-adds read the branch and the
// residual and write h (6h, masks 2h bytes), bias+GELU reads and writes the f/tp-wide fc1 output (2f/tp).
// Backward: each LayerNorm reads dy and x and writes dx (6h), each dropout-add reads the gradient and
// mask and writes two (4h, masks 2h), plus the residual gradient's sum (2h): 12h; the GELU reads the
// gradient and its input and writes one (3f/tp). Llama: RMSNorms and residual adds as GPT's without
// masks; SwiGLU reads gate and up and writes their product (3f/tp), backward 5f/tp. What SP shards
// (the h-wide part) divides by tp.
struct ElementBytes {
  double forward = 0, backward = 0;  // per token
};
ElementBytes element_bytes(const ModelConfig& m, const ModelFeatures& features, double t, bool sp, int e) {
  const double h = static_cast<double>(m.hidden), rep = sp ? t : 1.0;
  // Under MoE (NOTE [planned experts]) the SwiGLU runs on k expert rows and the shared expert per token,
  // and the rows are gathered into expert order and combined back: 2 k h read and written each way.
  const MlpShape ms = mlp_shape(m, features);
  const double f = (1 - ms.moe_share) * ms.dense_width + ms.moe_share * (ms.top_k * ms.expert_width + ms.shared_width);
  const double permute = ms.moe_share * 4 * ms.top_k * h * e;
  const bool gated = features.gated_mlp, dropout = m.dropout > 0 && !gated;
  const double masks = dropout ? 2 * h : 0.0;
  ElementBytes b;
  b.forward = (10 * h * e + masks) / rep + (gated ? 3 : 2) * f * e / t + permute;
  b.backward = (12 * h * e + masks) / rep + (gated ? 5 : 3) * f * e / t + permute;
  return b;
}

}  // namespace

double gemm_seconds(double m, double n, double k, const Device& d, double batch) {
  const double flops = 2 * m * n * k / (d.peak_flops * d.gemm_efficiency);
  const double bytes = (m * k + k * n + m * n) * d.elem_bytes / d.memory_bytes_per_s;
  return batch * std::max(flops, bytes) + d.gemm_fixed_s;
}

LayerTimes layer_times(const ModelConfig& m, const ModelFeatures& features, int64_t micro_batch, int64_t tp,
                       bool sequence_parallel, AttentionKernel kernel, const Device& d) {
  const double T = static_cast<double>(micro_batch * m.seq_len), s = static_cast<double>(m.seq_len);
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(m.ffn()), t = static_cast<double>(tp);
  LayerTimes lt;
  // The weight GEMMs of one rank (column-parallel outputs and row-parallel inputs divided by tp). The
  // input- and weight-gradient GEMMs of each have its FLOPs and move the same three matrices.
  const double qkv_out = features.gated_mlp ? h + 2.0 * static_cast<double>(m.kv() * m.head_dim()) : 3 * h;
  lt.gemm_qkv = gemm_seconds(T, qkv_out / t, h, d);
  lt.gemm_proj = gemm_seconds(T, h, h / t, d);
  if (m.mla()) {  // NOTE [MLA]: the down projections (replicated), the up projections and o (by heads)
    const double heads = static_cast<double>(m.heads), dn = static_cast<double>(m.qk_nope_head_dim),
                 dr = static_cast<double>(m.qk_rope_head_dim), dv = static_cast<double>(m.v_head_dim),
                 ql = static_cast<double>(m.q_lora_rank), kl = static_cast<double>(m.kv_lora_rank);
    lt.gemm_qkv = gemm_seconds(T, kl + dr, h, d) + gemm_seconds(T, heads * (dn + dv) / t, kl, d) +
                  (ql > 0 ? gemm_seconds(T, ql, h, d) + gemm_seconds(T, heads * (dn + dr) / t, ql, d)
                          : gemm_seconds(T, heads * (dn + dr) / t, h, d));
    lt.gemm_proj = gemm_seconds(T, h, heads * dv / t, d);
  }
  lt.gemm_fc1 = gemm_seconds(T, (features.gated_mlp ? 2 : 1) * f / t, h, d);
  lt.gemm_fc2 = gemm_seconds(T, h, f / t, d);
  if (const MlpShape ms = mlp_shape(m, features); ms.moe_share > 0) {
    // NOTE [planned experts]: a mean layer. An MoE layer's router (T x E), its experts as one grouped
    // GEMM per projection over T k rows (E groups of T k / E rows, the fixed cost paid once) and the
    // shared expert; the dense first layers' MLP as above.
    const double rows = T * ms.top_k / ms.experts, share = ms.moe_share;
    const double fc1 = gemm_seconds(rows, 2 * ms.expert_width / t, h, d, ms.experts) +
                       gemm_seconds(T, ms.router_rows, h, d) +
                       (ms.shared_width > 0 ? gemm_seconds(T, 2 * ms.shared_width / t, h, d) : 0.0);
    const double fc2 = gemm_seconds(rows, h, ms.expert_width / t, d, ms.experts) +
                       (ms.shared_width > 0 ? gemm_seconds(T, h, ms.shared_width / t, d) : 0.0);
    lt.gemm_fc1 = (1 - share) * lt.gemm_fc1 + share * fc1;
    lt.gemm_fc2 = (1 - share) * lt.gemm_fc2 + share * fc2;
  }
  lt.gemm_f = lt.gemm_qkv + lt.gemm_proj + lt.gemm_fc1 + lt.gemm_fc2;
  lt.gemm_i = lt.gemm_w = lt.gemm_f;

  const double square = attention_width(m) * T * s / t;  // forward FLOPs of Q K^T and P V over the full square
  const int e = d.elem_bytes;
  if (kernel == AttentionKernel::Gemm) {
    lt.attn_f = square / (d.peak_flops * d.gemm_efficiency);
    lt.attn_b = 2 * lt.attn_f;
    return lt;  // element-wise work: the cluster's per-layer host time
  }
  if (kernel == AttentionKernel::Unfused) {
    // Per head and sequence: Q K^T (s x d by d x s) and P V (s x s by s x d); the backward takes both
    // operands' gradients of each. The scores go through the scale-mask-softmax (read, write) and
    // dropout (read, write, mask); backward: dropout's (gradient and mask in, gradient out) and the
    // softmax's (gradient and probabilities in, gradient out).
    const double heads = static_cast<double>(micro_batch) * static_cast<double>(m.heads) / t;
    const double dh = static_cast<double>(m.head_dim());
    const double bmm = gemm_seconds(s, s, dh, d, heads) + gemm_seconds(s, dh, s, d, heads);
    const bool dropout = m.dropout > 0;
    const double scores = heads * s * s;
    lt.attn_f = bmm + scores * (2.0 * e + (dropout ? 2.0 * e + 1 : 0.0)) / d.memory_bytes_per_s;
    lt.attn_b = 2 * bmm + scores * (3.0 * e + (dropout ? 2.0 * e + 1 : 0.0)) / d.memory_bytes_per_s;
  } else {
    // A causal kernel executes half the square; its backward recomputes the scores: 2.5x the forward's
    // FLOPs (Dao 2023, arXiv 2307.08691, Sec. 4). Dropout, if any, happens inside the kernel.
    lt.attn_f = square / 2 / (d.peak_flops * d.attention_efficiency);
    lt.attn_b = 2.5 * lt.attn_f;
  }
  const ElementBytes eb = element_bytes(m, features, t, sequence_parallel, e);
  lt.elem_f = T * eb.forward / d.memory_bytes_per_s;
  lt.elem_b = T * eb.backward / d.memory_bytes_per_s;
  return lt;
}

HeadTimes head_times(const ModelConfig& m, int64_t micro_batch, int64_t tp, AttentionKernel kernel, const Device& d) {
  const double T = static_cast<double>(micro_batch * m.seq_len), t = static_cast<double>(tp);
  const double v = static_cast<double>(m.padded_vocab(tp));
  HeadTimes ht;
  ht.gemm = gemm_seconds(T, v / t, static_cast<double>(m.hidden), d);
  if (kernel == AttentionKernel::Gemm) return ht;
  // Megatron's vocabulary-parallel cross entropy (megatron/core/tensor_parallel/cross_entropy.py), each
  // pass over the logits through memory in fp32: the cast (e in, 4 out), the max (4), the in-place
  // subtraction (4 + 4), exp (4 + 4), the sum (4), the in-place division into the softmax (4 + 4):
  // e + 36 bytes per logit; backward the in-place scaling by the loss gradient (4 + 4) and the cast
  // back for the head's GEMMs (4 + e): 12 + e.
  const double logits = T * v / t;
  ht.loss_f = logits * (d.elem_bytes + 36.0) / d.memory_bytes_per_s;
  ht.loss_b = logits * (12.0 + d.elem_bytes) / d.memory_bytes_per_s;
  return ht;
}

double exposed_after_window(double per_bucket, int64_t buckets, double window) {
  if (per_bucket <= 0 || buckets < 1) return 0.0;
  const double n = static_cast<double>(buckets);
  return std::max(per_bucket, n * per_bucket - (n - 1) * std::max(0.0, window) / n);
}

double exposed_chunked(double comm, double gemm, int chunks) {
  if (comm <= 0) return 0.0;
  const double k = std::max(1, chunks);
  return std::max(comm / k, comm - gemm * (k - 1) / k);
}

}  // namespace trident::plan
