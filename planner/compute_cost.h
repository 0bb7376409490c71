// Seconds of one transformer layer's work on one device (pure): its GEMMs
// by shape on a roofline, its attention core as the runtime's kernel runs it,
// and the memory-bound element-wise work between them; and the closed forms
// of communication overlapped with compute (bucketed gradient reduction,
// parameter gathers, tensor-parallel collectives split into chunks).
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"

namespace trident::plan {

// NOTE [GEMM roofline] A GEMM of (M x K) by (K x N) takes the longer of its
// FLOPs at `efficiency` of the peak (the fraction the best-shaped large GEMMs
// reach on the device: a published matmul measurement, cited in
// configs/clusters/*.toml) and its operands and result moved once through
// device memory. Below the ridge (thin or small GEMMs) the bandwidth term
// rules; above it every GEMM runs at the measured plateau. Every GEMM call
// also takes `gemm_fixed_s` beyond that (launch, prologue and epilogue, the
// last partial wave of tiles): what makes mid-sized GEMMs fall short of the
// plateau in per-shape measurements (the preset cites them).
struct Device {
  double peak_flops = 0;       // FLOP/s, dense, the run's precision
  double gemm_efficiency = 1;  // of the peak, large GEMMs
  double attention_efficiency = 1;  // of the peak, a fused (flash) attention kernel on the FLOPs it executes
  double memory_bytes_per_s = 0;
  double gemm_fixed_s = 0;  // per GEMM call
  int elem_bytes = 2;
};
// One call; `batch` GEMMs of the shape in one batched call (a bmm over heads) pay gemm_fixed_s once.
double gemm_seconds(double m, double n, double k, const Device& d, double batch = 1);

// How a runtime runs the attention core and the element-wise work of a layer.
enum class AttentionKernel {
  Gemm,     // its FLOPs (the full square) at the GEMM rate; element-wise work left to the cluster's
            // per-layer host time (Trident: the calibrated per-layer time covers it)
  Unfused,  // two batched GEMMs per head on the roofline and the scores' softmax and dropout through
            // memory (Megatron 2021: fused scale-mask-softmax between two bmm's), plus the layer's
            // element-wise traffic
  Flash,    // one fused causal kernel (FlashAttention/cuDNN): half the square executed, the backward
            // 2.5x the forward's FLOPs (Dao 2023), at attention_efficiency; plus element-wise traffic
};

// One micro-batch through one layer on one of tp ranks, seconds.
struct LayerTimes {
  double gemm_f = 0, gemm_i = 0, gemm_w = 0;  // weight GEMMs: forward, input gradient, weight gradient
  double attn_f = 0, attn_b = 0;              // attention core (with its softmax/dropout traffic)
  double elem_f = 0, elem_b = 0;              // norms, activation, bias-dropout-residual
  // The GEMM each tensor-parallel collective of the forward sits next to (QKV, out-projection, fc1, fc2):
  // what a chunked all-gather or reduce-scatter can hide behind.
  double gemm_qkv = 0, gemm_proj = 0, gemm_fc1 = 0, gemm_fc2 = 0;
};
LayerTimes layer_times(const ModelConfig& m, const ModelFeatures& f, int64_t micro_batch, int64_t tp,
                       bool sequence_parallel, AttentionKernel kernel, const Device& d);
// The LM head of one micro-batch on one of tp ranks: forward GEMM (backward: I and W as much) and, with
// element-wise traffic modelled, the cross entropy over the logits.
struct HeadTimes {
  double gemm = 0, loss_f = 0, loss_b = 0;
};
HeadTimes head_times(const ModelConfig& m, int64_t micro_batch, int64_t tp, AttentionKernel kernel, const Device& d);

// NOTE [bucketed overlap] `buckets` equal buckets, each taking `per_bucket` seconds on one
// communication stream, become ready evenly through a compute window of `window` seconds (bucket k at
// k W / N) and are sent in order. The last finishes at max_k (k W/N + (N - k + 1) c), so what extends
// past the window is max(c, N c - (N - 1) W / N): only the last bucket when the link keeps up, else
// the backlog. With buckets = 1 it is c (nothing hidden).
double exposed_after_window(double per_bucket, int64_t buckets, double window);

// A collective of `comm` seconds split into `chunks` pieces pipelined against a GEMM of `gemm` seconds
// (Megatron's --tp-comm-overlap: the first piece cannot hide, the rest hide while the GEMM lasts).
double exposed_chunked(double comm, double gemm, int chunks);

}  // namespace trident::plan
