#!/usr/bin/env python3
"""A reference trainer for Trident's single-process run that shares nothing
with Trident but its inputs.

Inputs, all written by Trident:
  --config   a run's effective config.toml (RUN_DIR/config.toml): sizes, data path, seed, optimizer
  --hf-dir   the step-0 weights: `trident checkpoint init` of the same config, then
             `trident export --format hf-gpt2` or `hf-llama` (config.json + model.safetensors)
What it uses instead of Trident's code:
  model      transformers' GPT2LMHeadModel (model.arch = "gpt") or LlamaForCausalLM ("llama"),
             eager attention, loaded with from_pretrained
  data       the token file read by trident_data.py, or a Megatron dataset read and cut
             by megatron-core, and the sample order of datasets/README.md (a blend:
             NOTE [blended sample order]) written again there; with data.order "megatron"
             (or "auto" on Megatron data) megatron-core's own GPTDataset / BlendedDataset
             built by its BlendedMegatronDatasetBuilder, ranks served as Megatron's
             pretraining sampler serves them (trident_data.MegatronSampler); with
             data.reset_attention_mask / reset_position_ids each sample cut into its documents by
             megatron-core's rule, each document run on its own (NOTE [reference documents])
  precision  --dtype float64 (the truth), float32, or bfloat16 under torch.autocast (NOTE [bf16 reference]);
             --dp / --accumulate sum the micro-batch gradients in another order (NOTE [accumulation orders])
  optimizer  torch.optim.AdamW; the LR schedule written out again (lr_at below); torch's
             clipping (clip_grad_norm_, or clip_grads_with_norm_ on a norm summed in float64:
             NOTE [fp32 norms on CPU]); gradient accumulation over micro-batches

It writes OUT/metrics.jsonl, one {"step", "loss", "lr", "grad_norm", "clipped"} object per
step in the schema of Trident's metrics.jsonl, so `trident compare RUN_DIR OUT` reads it.

NOTE [padded vocabulary rows]
Trident pads the word embedding / LM head to model.vocab_size rounded up to
vocab_pad_multiple * tp rows. Its loss (vocab_parallel_cross_entropy) leaves the
padded columns out of the max and sets their exp() to zero, so they get
probability 0 and a zero gradient; the padded rows start at zero and no token id
reaches them through the embedding lookup either, so their gradient is exactly 0
on every step, AdamW moves them by exactly 0 (m = v = 0; decay of 0 is 0) and they
add exactly 0 to the gradient norm. `trident export` drops them, so an HF model
with vocab_size = V rows and a plain softmax over V columns is the same function,
the same gradients and the same norm: nothing else is needed here.
"""

import argparse
import copy
import json
import math
import os
import sys
import time
import tomllib

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trident_data import (Blend, MegatronSampler, TokenFile, megatron_core_train_samples,  # noqa: E402
                         read_loss_mask)


def lr_at(step, total_steps, warmup, peak, floor):
    """Linear warm-up to the peak (step counts from 0: the first step uses 1/warmup), then
    cosine decay to the floor reached at the last step."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    decay_steps = total_steps - warmup
    if decay_steps <= 1:
        return peak
    progress = (step - warmup) / (decay_steps - 1)
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * min(1.0, progress)))


def no_decay(name):
    """Trident's AdamW decays the matrices and both embeddings, never biases or norms."""
    return (name.endswith(".bias") or ".ln_" in name  # GPT-2: transformer.h.i.ln_{1,2}.*, transformer.ln_f.*
            or name.endswith("norm.weight"))  # Llama: input_layernorm, post_attention_layernorm, model.norm


def load_model(hf_dir, model_cfg, dtype, experts="eager"):
    if model_cfg["arch"] in ("llama", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3"):
        return load_llama(hf_dir, model_cfg, dtype, experts)
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    c = model.config
    want = {"n_layer": model_cfg["layers"], "n_embd": model_cfg["hidden"], "n_head": model_cfg["heads"],
            "vocab_size": model_cfg["vocab_size"]}
    got = {k: getattr(c, k) for k in want}
    if c.n_positions < model_cfg["seq_len"]:
        raise SystemExit(f"{hf_dir}: n_positions {c.n_positions} < model.seq_len {model_cfg['seq_len']}")
    inner = c.n_inner if c.n_inner is not None else 4 * c.n_embd
    ffn = model_cfg["ffn_hidden"] or 4 * model_cfg["hidden"]
    if got != want or inner != ffn or abs(c.layer_norm_epsilon - model_cfg["layernorm_eps"]) > 0:
        raise SystemExit(f"{hf_dir}/config.json {got} (n_inner {inner}) does not match the run's config {want} "
                         f"(MLP {ffn})")
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        raise SystemExit("the LM head is not tied to wte")
    if max(c.resid_pdrop, c.embd_pdrop, c.attn_pdrop) != 0 or model_cfg["dropout"] != 0:
        raise SystemExit("the reference needs dropout 0 (model.dropout = 0)")
    return model.to(dtype)


def load_llama(hf_dir, model_cfg, dtype, experts="eager"):
    import transformers

    arch = model_cfg["arch"]
    moe = arch != "llama"
    cls = {"llama": "LlamaForCausalLM", "mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
           "qwen3_moe": "Qwen3MoeForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM"}[arch]
    model = getattr(transformers, cls).from_pretrained(
        hf_dir, dtype=torch.float32, attn_implementation="eager", **({"experts_implementation": experts} if moe else {}))
    if moe and model.config._experts_implementation != experts:
        raise SystemExit(f"transformers runs the experts as {model.config._experts_implementation!r}, not {experts!r}")
    c = model.config
    kv = model_cfg.get("kv_heads", 0) or model_cfg["heads"]
    want = {"num_hidden_layers": model_cfg["layers"], "hidden_size": model_cfg["hidden"],
            "num_attention_heads": model_cfg["heads"], "num_key_value_heads": kv,
            "intermediate_size": model_cfg["ffn_hidden"], "vocab_size": model_cfg["vocab_size"],
            "rms_norm_eps": model_cfg["layernorm_eps"], "tie_word_embeddings": model_cfg["tie_embeddings"]}
    if arch == "mixtral":
        want.update(num_local_experts=model_cfg["experts"], num_experts_per_tok=model_cfg["moe_top_k"])
        if not model_cfg["moe_norm_topk_prob"]:
            raise SystemExit("Mixtral renormalises its top-k weights: the run needs model.moe_norm_topk_prob = true")
    if arch in ("qwen2_moe", "qwen3_moe"):
        want.update(num_experts=model_cfg["experts"], num_experts_per_tok=model_cfg["moe_top_k"],
                    moe_intermediate_size=model_cfg["moe_ffn_hidden"] or model_cfg["ffn_hidden"],
                    norm_topk_prob=model_cfg["moe_norm_topk_prob"])
        if arch == "qwen2_moe":
            want.update(shared_expert_intermediate_size=model_cfg["moe_shared_ffn_hidden"])
        else:
            want.update(head_dim=model_cfg["kv_channels"] or model_cfg["hidden"] // model_cfg["heads"])
    if arch == "deepseek_v3":
        want.update(n_routed_experts=model_cfg["experts"], num_experts_per_tok=model_cfg["moe_top_k"],
                    moe_intermediate_size=model_cfg["moe_ffn_hidden"], first_k_dense_replace=model_cfg["moe_first_dense"],
                    n_group=model_cfg["moe_router_groups"], topk_group=model_cfg["moe_router_group_topk"],
                    routed_scaling_factor=model_cfg["moe_routed_scaling_factor"],
                    norm_topk_prob=model_cfg["moe_norm_topk_prob"], q_lora_rank=model_cfg["q_lora_rank"] or None,
                    kv_lora_rank=model_cfg["kv_lora_rank"], qk_nope_head_dim=model_cfg["qk_nope_head_dim"],
                    qk_rope_head_dim=model_cfg["qk_rope_head_dim"], v_head_dim=model_cfg["v_head_dim"])
        if model_cfg["moe_score_function"] != "sigmoid":
            raise SystemExit("DeepSeek-V3's router scores by sigmoid: the run needs model.moe_score_function = sigmoid")
    got = {k: getattr(c, k, getattr(c, "num_local_experts", None) if k == "num_experts" else None) for k in want}
    if got != want:
        raise SystemExit(f"{hf_dir}/config.json {got} does not match the run's config {want}")
    if c.rope_parameters["rope_theta"] != model_cfg["rope_theta"]:
        raise SystemExit(f"{hf_dir}: rope_theta {c.rope_parameters['rope_theta']} != {model_cfg['rope_theta']}")
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if tied != model_cfg["tie_embeddings"]:
        raise SystemExit(f"the LM head is {'' if tied else 'not '}tied to the embedding, but model.tie_embeddings = "
                         f"{model_cfg['tie_embeddings']}")
    return model.to(dtype)


# NOTE [reference documents]
# With data.reset_attention_mask or data.reset_position_ids the reference cuts each sample as
# megatron-core does: its own _get_ltor_masks_and_position_ids (gpt_dataset.py) on the inputs
# gives the attention mask and the position ids (NOTE [sample documents] in datasets/documents.h
# states the same rule for Trident). A document starts at j > 0 where that mask bars j from j - 1.
# --documents split (the reference): each document of the micro-batch is a row of its own, with
# megatron-core's position ids for its tokens (from 0 with reset_position_ids, else its offset in
# the sample), padded at its end to the longest (causal attention: no token sees the padding, which
# a padding mask also bars); the real tokens' logits and router logits are put back in sample
# order, and the loss is the undivided run's, the mean over the micro-batch's tokens. --documents mask:
# the whole sample with those position ids and megatron-core's mask as a 4D additive mask.
# reset_position_ids alone runs the whole sample with the restarting positions and an all-ones
# 2D mask: without a mask transformers would infer packed sequences from positions that restart
# (masking_utils.find_packed_sequence_indices) and keep attention inside them.
def sample_documents(x, d_cfg, eod):
    """Per row of x (mbs, seq): (its documents' [start, end) spans, its position ids, megatron-core's
    (seq, seq) attention mask with True = barred); None when the run has no document keys."""
    if not (d_cfg.get("reset_attention_mask") or d_cfg.get("reset_position_ids")):
        return None
    from megatron.core.datasets.gpt_dataset import _get_ltor_masks_and_position_ids
    out = []
    for row in x:
        mask, _, pos = _get_ltor_masks_and_position_ids(row, eod, d_cfg["reset_position_ids"],
                                                        d_cfg["reset_attention_mask"], False, True)
        starts = [0] + [j for j in range(1, row.numel()) if bool(mask[0, j, j - 1])]
        out.append((list(zip(starts, starts[1:] + [row.numel()])), pos, mask[0]))
    return out


def document_forward(model, moe, **inputs):
    """(logits, router logits, None) of one call with explicit positions and mask. An MoE family runs
    its decoder and head apart: its ForCausalLM's pooled aux_loss reads a 4D mask as a padding mask."""
    if not moe:
        return model(**inputs).logits, None, None
    o = model.model(**inputs, output_router_logits=True)
    return model.lm_head(o.last_hidden_state), o.router_logits, None


def forward(model, x, moe, docs, how):
    """The micro-batch's logits (mbs, seq, V), each MoE layer's router logits (mbs * seq, E) in
    batch-major order (None for a dense model) and the model's aux_loss (NOTE [reference documents]).
    how: None (the whole sample, positions restarting if docs say so), "split" or "mask"."""
    kw = {"output_router_logits": True} if moe else {}
    if docs is None:
        o = model(input_ids=x, **kw)
        return o.logits, (o.router_logits if moe else None), getattr(o, "aux_loss", None)
    pos = torch.stack([p for _, p, _ in docs])
    if how != "split":
        mask = torch.ones(x.shape, dtype=torch.long)  # reset_position_ids alone: attention across documents
        if how == "mask":
            dtype = model.get_input_embeddings().weight.dtype
            barred = torch.stack([m for _, _, m in docs]).unsqueeze(1)  # (mbs, 1, seq, seq)
            mask = torch.zeros(barred.shape, dtype=dtype).masked_fill(barred, torch.finfo(dtype).min)
        return document_forward(model, moe, input_ids=x, position_ids=pos, attention_mask=mask)
    spans = [(r, s, e) for r, (row, _, _) in enumerate(docs) for s, e in row]
    n = max(e - s for _, s, e in spans)
    ids, p, real = (torch.zeros(len(spans), n, dtype=torch.long) for _ in range(3))
    for i, (r, s, e) in enumerate(spans):
        ids[i, :e - s], p[i, :e - s], real[i, :e - s] = x[r, s:e], pos[r, s:e], 1
    out, router_logits, _ = document_forward(model, moe, input_ids=ids, position_ids=p, attention_mask=real)
    rows = [[i for i, (r_, _, _) in enumerate(spans) if r_ == r] for r in range(len(docs))]
    logits = torch.stack([torch.cat([out[i, :spans[i][2] - spans[i][1]] for i in row]) for row in rows])
    if not moe:
        return logits, None, None
    layers = [layer.reshape(len(spans), n, -1) for layer in router_logits]
    return logits, tuple(torch.cat([t[i, :e - s] for i, (_, s, e) in enumerate(spans)]) for t in layers), None


def document_eod(d_cfg, m_cfg, weighted):
    """The end-of-document id the run's document keys look for (NOTE [reference documents]); None
    without them. data.eod_token = -1 is the token file's own end-of-text id."""
    keys = ("reset_attention_mask", "reset_position_ids", "eod_mask_loss", "completion_only_loss")
    if not any(d_cfg.get(k) for k in keys):
        return None
    if m_cfg["arch"] == "deepseek_v3" or m_cfg.get("moe_aux_loss") == "pooled_aux_loss":
        raise SystemExit("documents: the reference has no per-document routing record (DeepSeek-V3) or pooled aux loss")
    if (d_cfg.get("eod_mask_loss") or d_cfg.get("completion_only_loss")) and m_cfg["arch"] not in ("gpt", "llama"):
        raise SystemExit("loss masks: the reference weighs no balancing loss by them (a dense model only)")
    eod = d_cfg.get("eod_token", -1)
    if eod < 0 and d_cfg.get("format", "trident") != "megatron":
        eod = TokenFile(weighted[0][1] + ".train.bin").end_of_text
    if any(d_cfg.get(k) for k in keys[:3]) and not 0 <= eod < m_cfg["vocab_size"]:
        raise SystemExit(f"data.eod_token = {eod}: the documents need an end-of-document id below model.vocab_size")
    return eod


def step_batches(samples, step, gbs, dp, local, mbs, seq, d_cfg, eod, windows):
    """The step's micro-batches in rank-major order, each (inputs, labels, loss mask or None), and the
    counted labels of the global batch (None without loss masks: NOTE [reference loss masks])."""
    out = []
    for r in range(dp):
        for k in range(local):
            idx = samples.micro_batch(step, gbs, r, dp, k, mbs)
            win = torch.from_numpy(np.stack([samples.window(i) for i in idx]))  # (mbs, seq + 1) int64
            x, y = win[:, :seq], win[:, 1:]
            out.append((x, y, label_mask(x, windows, idx, d_cfg, eod)))
    return out, (None if out[0][2] is None else int(sum(int(m.sum()) for _, _, m in out)))


# NOTE [reference loss masks]
# With data.eod_mask_loss or data.completion_only_loss a label counts where megatron-core's
# loss_mask (_get_ltor_masks_and_position_ids with eod_mask_loss: 0 for the prediction made from
# an eod) and the loss-mask file's byte of the label (completion_only_loss) are both 1; the others
# become -100, and each micro-batch's loss is transformers' own (fixed_cross_entropy, which its
# causal-LM loss calls on the shifted labels) with num_items_in_batch = N, the counted labels of
# the whole global batch: sum / N, so the micro-batches' losses and gradients add up to the mean
# over the global batch's counted labels (backward unscaled), the step's loss their sum. The mask
# bytes of a sample come from megatron-core's own sample walk (trident_data.MegatronSampler's
# mask_window) or, in the stream order, from the same windows of the mask laid out as the tokens.
def loss_mask_windows(d_cfg, samples, weighted, seq, seed):
    """i -> the loss-mask bytes of window i (seq + 1), or None without completion_only_loss."""
    if not d_cfg.get("completion_only_loss"):
        return None
    if d_cfg.get("format") != "megatron":
        raise SystemExit("data.completion_only_loss: the loss-mask file goes with Megatron data (data.format)")
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    masks = []
    for _, prefix in weighted:
        ds = IndexedDataset(prefix)
        masks.append(read_loss_mask(prefix, int(np.sum(ds.sequence_lengths, dtype=np.int64))))
        del ds  # its arrays are views of its mapping
    if isinstance(samples, MegatronSampler):
        return lambda i: samples.mask_window(i, masks)
    if d_cfg.get("split"):
        raise SystemExit("data.completion_only_loss with data.split: the reference reads the mask in Megatron's order only")
    return Blend([(w, m) for (w, _), m in zip(weighted, masks)], seq, seed).window


def label_mask(x, windows, idx, d_cfg, eod):
    """The micro-batch's (mbs, seq) loss mask, 1 = the label counts (NOTE [reference loss masks]);
    None without loss-mask keys."""
    if not (d_cfg.get("eod_mask_loss") or windows):
        return None
    mask = torch.ones(x.shape, dtype=torch.long)
    if d_cfg.get("eod_mask_loss"):
        from megatron.core.datasets.gpt_dataset import _get_ltor_masks_and_position_ids
        mask *= torch.stack([_get_ltor_masks_and_position_ids(row, eod, False, False, True, False)[1]
                             for row in x]).long()
    if windows:
        mask *= torch.from_numpy(np.stack([windows(i)[1:] for i in idx]))
    return mask


def masked_loss(logits, y, mask, counted):
    """transformers' causal-LM loss of the labels y where mask is 1 (-100 elsewhere), summed and
    divided by `counted`, the global batch's counted labels (NOTE [reference loss masks])."""
    if counted == 0:
        return logits.sum() * 0.0
    from transformers.loss.loss_utils import fixed_cross_entropy  # ForCausalLMLoss's, without its cast to fp32
    labels = y.masked_fill(mask == 0, -100)
    return fixed_cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), counted, -100)


def balancing_losses(router_logits, m_cfg, sequences, routed=None, pooled=None):
    """Each MoE layer's balancing losses with their coefficients, summed over the layers, by
    megatron-core's own functions (megatron.core.transformer.moe.moe_utils): the Switch/GShard
    load-balancing loss (switch_load_balancing_loss_func, the token counts of each token's top-K
    experts, as its router's aux_loss) over the micro-batch, or per sequence averaged over the
    sequences as its router's seq_aux_loss reshapes the tokens (model.moe_aux_loss =
    "seq_aux_loss"), and the router z-loss (z_loss_func). The softmax is taken here in the run's
    dtype (megatron's compute_routing_scores_for_aux_loss would take it in fp32 and cut the fp64
    truth short). transformers' own loss for Mixtral (load_balancing_loss_func) pools every layer
    into one product, a different objective. A sigmoid router's (DeepSeek-V3's) scores and routing map
    are megatron-core's compute_routing_scores_for_aux_loss (the sigmoid scores normalised per token,
    their own top-K); the tokens each expert received then come from `routed`, each layer's chosen
    experts as the model's router returned them (its bias and group limit choose otherwise).
    model.moe_aux_loss = "pooled_aux_loss" trains with transformers' own objective: `pooled`, the
    model's aux_loss (load_balancing_loss_func over every MoE layer's router logits, what its
    ForCausalLM adds times router_aux_loss_coef); each layer's statistic is that function over the
    layer alone."""
    from megatron.core.transformer.moe.moe_utils import (compute_routing_scores_for_aux_loss,
                                                         switch_load_balancing_loss_func, z_loss_func)

    k, e = m_cfg["moe_top_k"], m_cfg["experts"]
    aux_c, z_c = m_cfg.get("moe_aux_loss_coeff", 0.0), m_cfg.get("moe_z_loss_coeff", 0.0)
    per_sequence = m_cfg.get("moe_aux_loss", "aux_loss") == "seq_aux_loss"
    if (pooled is not None) != (m_cfg.get("moe_aux_loss", "aux_loss") == "pooled_aux_loss"):
        raise SystemExit("the pooled aux loss needs the model's aux_loss, and only it")
    total, layers = 0.0, []
    for i, logits in enumerate(router_logits):
        logits = logits.reshape(-1, e)
        if m_cfg.get("moe_score_function", "softmax") == "sigmoid":
            routing_map, p = compute_routing_scores_for_aux_loss(logits, k, "sigmoid")
            chosen = routing_map.to(p.dtype)
        else:
            p = logits.softmax(-1)
            chosen = torch.zeros_like(p).scatter(1, p.topk(k, dim=-1).indices, 1.0)  # the routing map
        counts = chosen.sum(0)
        if routed is not None:
            counts = torch.bincount(routed[i].reshape(-1), minlength=e).to(p.dtype)
        if pooled is not None:
            from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func
            aux = load_balancing_loss_func((logits,), e, k)
        elif per_sequence:  # (b*s, E) in batch-major order -> one row per position, a column per (sequence, expert)
            s_len = p.size(0) // sequences
            ps = p.reshape(sequences, s_len, e).transpose(0, 1).reshape(s_len, sequences * e)
            cs = chosen.reshape(sequences, s_len, e).transpose(0, 1).reshape(s_len, sequences * e)
            aux = switch_load_balancing_loss_func(ps, cs.sum(0), s_len, k, e, 1.0) / sequences
        else:
            aux = switch_load_balancing_loss_func(p, counts, p.size(0), k, e, 1.0)
        z = z_loss_func(logits, 1.0)
        total = total + (0.0 if pooled is not None else aux_c * aux) + z_c * z
        layers.append((counts.detach(), float(aux), float(z)))
    if pooled is not None:
        total = total + aux_c * pooled
    return total, layers


def update_expert_biases(model, layer_stats, rate):
    """DeepSeek-V3's auxiliary-loss-free balancing by megatron-core's get_updated_expert_bias, once per
    step from the tokens each expert received over the step's micro-batches (each MoE layer's router
    in layer order). Its all-reduce over the data-parallel group is stubbed: this one process holds
    every token of the step."""
    import megatron.core.transformer.moe.moe_utils as mu
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    routers = [m for m in model.modules() if isinstance(m, DeepseekV3TopkRouter)]
    real = torch.distributed.all_reduce, mu.parallel_state.get_tensor_and_data_parallel_group
    torch.distributed.all_reduce = lambda *a, **k: None
    mu.parallel_state.get_tensor_and_data_parallel_group = lambda *a, **k: None
    try:
        for i, router in enumerate(routers):
            counts = sum(mb[i][0] for mb in layer_stats).float()
            bias = router.e_score_correction_bias
            bias.copy_(mu.get_updated_expert_bias(counts, bias, rate))
    finally:
        torch.distributed.all_reduce, mu.parallel_state.get_tensor_and_data_parallel_group = real


def expert_biases(model):
    """Each MoE layer's score-correction bias as the step's forwards use it (DeepSeek-V3's routers, in
    layer order); none for the other families."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
    return [m.e_score_correction_bias.detach().clone() for m in model.modules() if isinstance(m, DeepseekV3TopkRouter)]


def dropped_assignments(logits, k, capacity_factor, drop_policy):
    """(dropped, routed) assignments of one layer and micro-batch of a softmax top-K router past
    capacity, by megatron-core's own apply_router_token_dropping (its get_capacity: ceil(T K / E x c)
    per expert)."""
    from megatron.core.transformer.moe.moe_utils import apply_router_token_dropping
    p = logits.reshape(-1, logits.size(-1)).double().softmax(-1)
    top = p.topk(k, dim=-1)
    probs = torch.zeros_like(p).scatter(1, top.indices, top.values)
    chosen = torch.zeros_like(p, dtype=torch.bool).scatter(1, top.indices, True)
    _, kept = apply_router_token_dropping(probs, chosen, k, capacity_factor, drop_policy)
    routed = p.size(0) * k
    return routed - int(kept.sum()), routed


def moe_row(layer_stats, first_dense):
    """metrics.jsonl's MoE keys (NOTE [MoE stats]) from each micro-batch's per-layer (counts, aux, z):
    the most tokens an expert got over the mean per expert, and the mean balancing and z-losses."""
    row, worst = {}, 0.0
    for i in range(len(layer_stats[0])):
        counts = sum(mb[i][0] for mb in layer_stats)
        load = float(counts.max() / counts.mean())
        l = i + first_dense
        row[f"moe_load_l{l}"] = load
        row[f"moe_aux_loss_l{l}"] = sum(mb[i][1] for mb in layer_stats) / len(layer_stats)
        row[f"moe_z_loss_l{l}"] = sum(mb[i][2] for mb in layer_stats) / len(layer_stats)
        worst = max(worst, load)
    row["moe_load_max"] = worst
    return row


def tree_sum(ts):
    """Pairwise (balanced tree) sum: ((t0 + t1) + (t2 + t3)) + ..."""
    while len(ts) > 1:
        ts = [ts[i] + ts[i + 1] if i + 1 < len(ts) else ts[i] for i in range(0, len(ts), 2)]
    return ts[0]


def accumulate(params, captured, dp, how):
    """Sets each parameter's .grad from the per-micro-batch gradients, in rank-major order.

    NOTE [accumulation orders]
    Trident's dp ranks each backpropagate loss * (1/m_r) over their m_r = m/dp micro-batches,
    accumulating in the gradient tensor in fp32 (micro-batch 0, then 1, ...); the all-reduce
    then adds the dp partial sums and finish_grad_sync divides by dp. For dp = 2 the partial
    sums have two addends (commutative: any all-reduce algorithm gives the same bits), and the
    scalings are powers of two (exact), so what differs from the single-process run is only the
    summation tree: (g0 + .. + g3) + (g4 + .. + g7) instead of g0 + .. + g7 left to right.
      sequential  each rank's micro-batches left to right, then the ranks' sums left to right,
                  then / dp: with --dp 1 bit-identical to autograd's accumulation
      pairwise    one balanced tree over all m micro-batch gradients (then / dp)
      float64     the m gradients summed in float64, rounded to the model dtype once (then / dp)
    """
    per_rank = len(captured) // dp
    for j, p in enumerate(params):
        gs = [c[j] for c in captured]
        if how == "sequential":
            parts = []
            for r in range(dp):
                acc = gs[r * per_rank].clone()
                for g in gs[r * per_rank + 1:(r + 1) * per_rank]:
                    acc += g
                parts.append(acc)
            total = parts[0]
            for part in parts[1:]:
                total = total + part
        elif how == "pairwise":
            total = tree_sum(gs)
        else:
            total = torch.stack(gs).to(torch.float64).sum(0).to(gs[0].dtype)
        p.grad = total / dp if dp > 1 else total


def clip_gradients(params, clip, how):
    """The gradient norm before clipping, over every parameter once (the tied head is wte); the
    gradients are then scaled by clip / (norm + 1e-6) when that is < 1 (clip 0: never)."""
    # NOTE [fp32 norms on CPU]: torch's CPU L2-norm kernel sums a float32 tensor's squares in
    # one float32 vector accumulator (pytorch/pytorch#169237), so clip_grad_norm_ on fp32
    # gradients is off by 4e-4 relative on gpt-small-brown's 6.4M-element embedding gradient
    # (the exact norm of the very same fp32 gradients is 1.5e-5 away from what it returns).
    # --norm float64 (the default) keeps torch's clipping but sums each gradient's squares in
    # float64 (vector_norm's dtype argument casts first), as Trident does;
    # --norm native calls clip_grad_norm_ as it is.
    max_norm = clip if clip > 0 else float("inf")
    if how == "native":
        return torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm).item()
    per_param = [torch.linalg.vector_norm(p.grad, 2, dtype=torch.float64) for p in params]
    norm_t = torch.linalg.vector_norm(torch.stack(per_param), 2)
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm_t)
    return norm_t.item()


def train_tokens(d_cfg, prefix, vocab_size):
    """The training stream of one dataset: a Trident token file's PREFIX.train.bin, or the
    train share of a Megatron dataset read and cut by megatron-core itself (its
    IndexedDataset, its split parser and matrix, and its int(round(share * sequences))
    book-ends, blended_megatron_dataset_builder.py), the sequences concatenated in order."""
    if d_cfg.get("format", "trident") != "megatron":
        data = TokenFile(prefix + ".train.bin")
        if data.vocab_size != vocab_size:
            raise SystemExit(f"{data.path} has vocab {data.vocab_size} but model.vocab_size = {vocab_size}")
        return data.tokens
    import warnings
    warnings.filterwarnings("ignore")  # megatron-core warns that Transformer Engine and Apex are absent
    from megatron.core.datasets.blended_megatron_dataset_config import (convert_split_vector_to_split_matrix,
                                                                        parse_and_normalize_split)
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    ds = IndexedDataset(prefix)
    n = len(ds)
    begin, end = 0, n
    if d_cfg.get("split"):
        lo, hi = convert_split_vector_to_split_matrix(parse_and_normalize_split(d_cfg["split"]))[0]
        begin, end = int(round(lo * float(n))), int(round(hi * float(n)))
    return np.concatenate([ds[i].astype(np.int64) for i in range(begin, end)])


def reference(*argv):
    """`reference_train.py ARGV...` run in this process, for a test that has torch and transformers
    loaded already: the same runs without a second start-up. The thread count it sets is put back."""
    print("+ reference_train.py " + " ".join(argv), flush=True)
    threads = torch.get_num_threads()
    try:
        main(list(argv))
    finally:
        torch.set_num_threads(threads)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="Trident's effective config.toml of the run to reproduce")
    ap.add_argument("--hf-dir", required=True, help="step-0 weights (trident checkpoint init + trident export)")
    ap.add_argument("--out", required=True, help="directory for metrics.jsonl")
    ap.add_argument("--dtype", choices=["float32", "float64", "bfloat16"], default="float32",
                    help="bfloat16: fp32 weights, optimizer and gradients, the forward under torch.autocast "
                         "(NOTE [bf16 reference])")
    ap.add_argument("--norm", choices=["float64", "native"], default="float64",
                    help="gradient norm for clipping: squares summed in float64, or clip_grad_norm_ as it is "
                         "(NOTE [fp32 norms on CPU])")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: training.steps)")
    ap.add_argument("--experts", choices=["eager", "grouped_mm"], default="eager",
                    help="transformers' experts implementation (MoE families): its loop over the experts, or "
                         "its grouped one (on the CPU a per-expert op with its own backward): two correct fp32 "
                         "computations of one model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--documents", choices=["split", "mask"], default="split",
                    help="with data.reset_attention_mask: each document through the model on its own (the "
                         "reference), or the whole sample under megatron-core's mask as a 4D mask (NOTE "
                         "[reference documents])")
    ap.add_argument("--capacity-factor", type=float, default=0.0,
                    help="> 0: also write the first MoE layer's share of assignments dropped past that capacity "
                         "(megatron-core's rule; model.moe_token_drop_policy) as moe_dropped_lL, the reference "
                         "training without dropping: only step 1's is Trident's")
    ap.add_argument("--dp", type=int, default=1,
                    help="sum the micro-batch gradients in data parallelism's order (NOTE [accumulation orders])")
    ap.add_argument("--accumulate", choices=["autograd", "sequential", "pairwise", "float64"], default="autograd",
                    help="how the micro-batch gradients are summed (NOTE [accumulation orders])")
    ap.add_argument("--also", action="append", default=[], metavar="DTYPE:EXPERTS[,dp=N]:OUT",
                    help="after the run of --dtype / --experts / --out, train again from the same --hf-dir with "
                         "this dtype and experts (and --dp N, summing in data parallelism's order) into OUT "
                         "(repeatable): one Python start-up for several runs")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    runs = [(args.dtype, args.experts, args.dp, args.out)]
    for spec in args.also:
        dtype_name, experts, out = (spec.split(":", 2) + ["", ""])[:3]
        experts, _, dp = experts.partition(",dp=")
        if (dtype_name not in ("float32", "float64", "bfloat16") or experts not in ("eager", "grouped_mm") or not out
                or not (dp == "" or (dp.isdigit() and int(dp) >= 1))):
            raise SystemExit(f"--also {spec!r}: expected DTYPE:EXPERTS[,dp=N]:OUT with DTYPE float32, float64 or "
                             "bfloat16, EXPERTS eager or grouped_mm and N >= 1")
        runs.append((dtype_name, experts, int(dp) if dp else args.dp, out))
    for dtype_name, experts, dp, out in runs:
        # Each run starts from a copy of the arguments: nothing one run sets (--accumulate's
        # default at dp > 1) or builds (model, optimizer, data) reaches the next.
        one = copy.copy(args)
        one.dtype, one.experts, one.dp, one.out = dtype_name, experts, dp, out
        train(one)


def train(args):
    """One reference run: --config's model, data and optimizer from --hf-dir's weights, in args.dtype."""
    with open(args.config, "rb") as f:
        cfg = tomllib.load(f)
    m_cfg, t_cfg, d_cfg = cfg["model"], cfg["training"], cfg["data"]
    par = cfg["parallel"]
    if d_cfg["source"] != "file":
        raise SystemExit("the reference reads a token file: the run needs data.source = \"file\"")
    if t_cfg["precision"] not in ("fp32", "bf16"):
        raise SystemExit(f"training.precision = {t_cfg['precision']!r}: the reference knows fp32 and bf16")
    # The arithmetic is --dtype's whatever the run's precision: a bf16 run is held to the fp64 truth too.
    dtype = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.float32}[args.dtype]
    # NOTE [bf16 reference]
    # PyTorch's own mixed-precision recipe, not Trident's scheme written again: the parameters,
    # their gradients and AdamW stay fp32, and each micro-batch's forward runs under
    # torch.autocast("cpu", bfloat16), which casts a weight to bf16 through autograd where an op
    # of its lower-precision list (addmm, matmul, linear, bmm, ...) uses it, so the bf16 weight
    # gradients are cast back and accumulated in the fp32 .grad, as in Trident. Both run the
    # matmuls and GELU in bf16, and softmax, LayerNorm and the cross-entropy in fp32 (checked with
    # forward hooks: Conv1D, the LM head and GELU give bf16; LayerNorm and the attention softmax
    # fp32). What differs: autocast leaves the embeddings and the residual stream in fp32 (a bf16
    # block output added to the fp32 residual promotes), where Trident (Megatron) keeps the
    # residual stream in bf16. Autocast is what a PyTorch user of bf16 runs, and it needs no
    # second model: that independence is what the comparison is for.
    autocast = args.dtype == "bfloat16"

    seq = m_cfg["seq_len"]
    weighted = d_cfg.get("paths") or [[1.0, d_cfg["path"]]]
    eod = document_eod(d_cfg, m_cfg, weighted)
    gbs, mbs = t_cfg["global_batch_size"], t_cfg["micro_batch_size"]
    order = d_cfg.get("order", "auto")
    if order == "megatron" or (order == "auto" and d_cfg.get("format") == "megatron"):
        # --data-path PREFIX (one dataset) or --data-path W1 PREFIX1 ... (a blend); the train split
        # holds what Megatron's trainer asks for: training.steps x global batch.
        prefixes = [p for _, p in weighted]
        weights = [float(w) for w, _ in d_cfg["paths"]] if d_cfg.get("paths") else None
        samples = MegatronSampler(megatron_core_train_samples(prefixes, weights, d_cfg.get("split") or "1,0,0", seq,
                                                              t_cfg["seed"], t_cfg["steps"] * gbs, m_cfg["vocab_size"]))
    else:
        samples = Blend([(w, train_tokens(d_cfg, prefix, m_cfg["vocab_size"])) for w, prefix in weighted], seq,
                        t_cfg["seed"])
    windows = loss_mask_windows(d_cfg, samples, weighted, seq, t_cfg["seed"])
    dp = args.dp  # 1: the single-process run, one data-parallel rank holds the whole global batch
    if dp < 1 or gbs % (mbs * dp):
        raise SystemExit(f"--dp {dp} does not divide global_batch_size {gbs} into micro-batches of {mbs}")
    if dp > 1 and args.accumulate == "autograd":
        args.accumulate = "sequential"
    micro = gbs // mbs  # micro-batches per step, over all data-parallel ranks
    local = micro // dp  # per rank

    model = load_model(args.hf_dir, m_cfg, dtype, args.experts)
    # DeepSeek-V3's routers return (logits, weights, chosen experts): the chosen, for the expert loads.
    routed = []
    if m_cfg["arch"] == "deepseek_v3":
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
        for mod in model.modules():
            if isinstance(mod, DeepseekV3TopkRouter):
                mod.register_forward_hook(lambda _m, _i, out: routed.append(out[2].detach()))
    model.train()  # dropout is 0, so train() and eval() compute the same; train() as a trainer would
    decay, plain = [], []
    for name, p in model.named_parameters():  # the tied lm_head.weight appears once, as transformer.wte.weight
        (plain if no_decay(name) else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": t_cfg["weight_decay"]},
                             {"params": plain, "weight_decay": 0.0}],
                            lr=t_cfg["lr"], betas=(t_cfg["beta1"], t_cfg["beta2"]), eps=t_cfg["eps"],
                            foreach=False)
    params = decay + plain
    clip = t_cfg["grad_clip"]
    steps = args.steps or t_cfg["steps"]
    os.makedirs(args.out, exist_ok=True)
    out = open(os.path.join(args.out, "metrics.jsonl"), "w")
    start = time.time()
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0  # Python float (double), like Trident's double accumulator
        moe_stats = []  # per micro-batch: each MoE layer's (token counts, balancing loss, z-loss)
        biases = expert_biases(model)  # as this step's forwards use them
        dropped = [0, 0]  # the first MoE layer's (dropped, routed) assignments (--capacity-factor)
        captured = []  # (rank, micro-batch gradients) for --accumulate other than autograd
        batches, counted = step_batches(samples, step, gbs, dp, local, mbs, seq, d_cfg, eod, windows)
        for x, y, mask in batches:
            moe = m_cfg["arch"] != "llama" and m_cfg["arch"] != "gpt"
            routed.clear()
            docs = sample_documents(x, d_cfg, eod)
            how = args.documents if d_cfg.get("reset_attention_mask") else None
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits, router_logits, aux = forward(model, x, moe, docs, how)  # logits (mbs, seq, V)
            logits = logits.float() if autocast else logits  # cross-entropy in fp32
            if mask is None:
                loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))  # mean over tokens
            else:  # NOTE [reference loss masks]
                loss = masked_loss(logits, y, mask, counted)
            # The MoE layers' balancing losses feed the gradients (scaled as the loss is) but not the
            # reported loss, as in Trident and Megatron.
            extra = 0.0
            if moe:
                # Dense first layers (model.moe_first_dense) have no router: transformers returns
                # the MoE layers' logits only.
                pooled = aux if m_cfg.get("moe_aux_loss", "aux_loss") == "pooled_aux_loss" else None
                extra, per_layer = balancing_losses(router_logits, m_cfg, x.size(0), routed or None, pooled)
                moe_stats.append(per_layer)
                if args.capacity_factor > 0:
                    d, n = dropped_assignments(router_logits[0], m_cfg["moe_top_k"], args.capacity_factor,
                                               m_cfg.get("moe_token_drop_policy", "probs"))
                    dropped[0] += d
                    dropped[1] += n
            # Trident's executor backpropagates loss * (1/m) for each of a rank's m micro-batches; a
            # masked loss is the global batch's share already, times dp as the dp ranks' mean divides.
            ((loss + extra) * (1.0 / local if mask is None else float(dp))).backward()
            loss_sum += loss.item()
            if args.accumulate != "autograd":
                captured.append([p.grad for p in params])
                opt.zero_grad(set_to_none=True)
        if args.accumulate != "autograd":
            accumulate(params, captured, dp, args.accumulate)
        if m_cfg.get("moe_bias_update_rate", 0.0) > 0:
            update_expert_biases(model, moe_stats, m_cfg["moe_bias_update_rate"])
        norm = clip_gradients(params, clip, args.norm)
        if not math.isfinite(norm):
            raise SystemExit(f"step {step + 1}: gradient norm {norm}")
        lr = lr_at(step, t_cfg["steps"], t_cfg["warmup_steps"], t_cfg["lr"], t_cfg["min_lr"])
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        row = {"step": step + 1, "loss": loss_sum / micro if counted is None else loss_sum, "lr": lr, "grad_norm": norm,
               "clipped": 1 if clip > 0 and norm > clip else 0}
        if counted is not None:  # the labels the loss counted, and each data-parallel rank's share of them
            row["loss_tokens"] = counted
            row["loss_tokens_per_rank"] = [int(sum(int(m.sum()) for _, _, m in batches[r * local:(r + 1) * local]))
                                           for r in range(dp)]
        if moe_stats:
            first = m_cfg.get("moe_first_dense", 0)
            row.update(moe_row(moe_stats, first))
            for i, b in enumerate(biases):  # NOTE [MoE stats]: the correction bias's range, max - min
                row[f"moe_bias_range_l{i + first}"] = float(b.max() - b.min())
            if biases:
                row["moe_bias_range_max"] = max(float(b.max() - b.min()) for b in biases)
            if args.capacity_factor > 0:
                row[f"moe_dropped_l{first}"] = dropped[0] / dropped[1]
        out.write(json.dumps(row) + "\n")
        out.flush()
    out.close()
    print(f"reference ({args.dtype}, norm {args.norm}, {par['tp']}x{par['pp']}x{par['dp']} run reproduced on 1 process): {steps} steps "
          f"in {time.time() - start:.1f} s, wrote {args.out}/metrics.jsonl")


if __name__ == "__main__":
    main()
