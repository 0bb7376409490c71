#!/usr/bin/env python3
"""transformers' MoE blocks on random weights, for Trident's MoE layer to match.

  moe_reference.py OUT.safetensors

Builds, with odd sizes (not any preset's), transformers 5.24's
MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock (softmax top-k without
renormalisation, a shared expert gated by a sigmoid) and DeepseekV3MoE (sigmoid
scores, group-limited top-k, the score-correction bias, routed scaling, a shared
expert), runs each on random tokens and writes, per case, the inputs, the
weights split into Trident's layout (gate and up from the fused gate_up_proj
[E, 2I, H]: rows [0, I) are the gate, [I, 2I) the up projection), the block's
output, its router's chosen experts and weights (sorted by expert per token) and
router logits; megatron-core's balancing loss on the DeepSeek-V3 router's logits; and
load_balancing_loss_func over three layers' logits. Every
tensor F32 (expert ids are small integers, exact in F32).
"""
import sys

import torch
from safetensors.torch import save_file
from transformers import DeepseekV3Config, MixtralConfig, Qwen2MoeConfig
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock, load_balancing_loss_func
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

BATCH, SEQ, HIDDEN = 2, 7, 12


def randomize(module, generator):
    for p in module.parameters():
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.5)


def experts_of(experts, out, name):
    inter = experts.down_proj.shape[-1]
    out[f"{name}.gate"] = experts.gate_up_proj[:, :inter, :].contiguous()
    out[f"{name}.up"] = experts.gate_up_proj[:, inter:, :].contiguous()
    out[f"{name}.down"] = experts.down_proj.contiguous()


def mlp_of(mlp, out, name):
    out[f"{name}.shared_gate"] = mlp.gate_proj.weight
    out[f"{name}.shared_up"] = mlp.up_proj.weight
    out[f"{name}.shared_down"] = mlp.down_proj.weight


def run(block, router, name, out, generator):
    x = torch.randn(BATCH, SEQ, HIDDEN, generator=generator)
    with torch.no_grad():
        y = block(x)
        logits, weights, experts = router(x.view(-1, HIDDEN))
    experts, order = experts.sort(dim=-1)
    out[f"{name}.x"] = x.view(-1, HIDDEN)
    out[f"{name}.y"] = y.view(-1, HIDDEN)
    out[f"{name}.router"] = router.weight
    out[f"{name}.logits"] = logits.float()
    out[f"{name}.experts"] = experts.float()
    out[f"{name}.weights"] = weights.float().gather(1, order)


def main(path):
    generator = torch.Generator().manual_seed(1234)
    out = {}
    torch.set_default_dtype(torch.float32)

    mixtral = MixtralSparseMoeBlock(MixtralConfig(hidden_size=HIDDEN, intermediate_size=7, num_local_experts=5,
                                                  num_experts_per_tok=2)).eval()
    randomize(mixtral, generator)
    experts_of(mixtral.experts, out, "mixtral")
    run(mixtral, mixtral.gate, "mixtral", out, generator)

    qwen = Qwen2MoeSparseMoeBlock(Qwen2MoeConfig(hidden_size=HIDDEN, moe_intermediate_size=5, num_experts=6,
                                                 num_experts_per_tok=3, norm_topk_prob=False,
                                                 shared_expert_intermediate_size=9)).eval()
    randomize(qwen, generator)
    experts_of(qwen.experts, out, "qwen2_moe")
    mlp_of(qwen.shared_expert, out, "qwen2_moe")
    out["qwen2_moe.shared_expert_gate"] = qwen.shared_expert_gate.weight
    run(qwen, qwen.gate, "qwen2_moe", out, generator)

    ds_config = DeepseekV3Config(hidden_size=HIDDEN, moe_intermediate_size=5, n_routed_experts=8,
                                 num_experts_per_tok=3, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                                 norm_topk_prob=True, n_shared_experts=1)
    deepseek = DeepseekV3MoE(ds_config).eval()
    randomize(deepseek, generator)
    with torch.no_grad():
        deepseek.gate.e_score_correction_bias.copy_(torch.randn(8, generator=generator) * 0.3)
    experts_of(deepseek.experts, out, "deepseek_v3")
    mlp_of(deepseek.shared_experts, out, "deepseek_v3")
    out["deepseek_v3.bias"] = deepseek.gate.e_score_correction_bias.clone()
    run(deepseek, deepseek.gate, "deepseek_v3", out, generator)

    # megatron-core's balancing loss on the DeepSeek-V3 router's logits: its sigmoid scores normalised per
    # token and their own top-k (compute_routing_scores_for_aux_loss), not the biased, group-limited choice.
    import warnings
    warnings.filterwarnings("ignore")  # megatron-core warns that Transformer Engine and Apex are absent
    from megatron.core.transformer.moe.moe_utils import (compute_routing_scores_for_aux_loss,
                                                         switch_load_balancing_loss_func)
    logits = out["deepseek_v3.logits"]
    routing_map, scores = compute_routing_scores_for_aux_loss(logits, 3, "sigmoid")
    out["deepseek_v3.aux_loss"] = switch_load_balancing_loss_func(
        scores, routing_map.sum(0), logits.size(0), 3, 8, 1.0).reshape(1).float()

    layers = tuple(torch.randn(BATCH * SEQ, 6, generator=generator) for _ in range(3))
    for i, logits in enumerate(layers):
        out[f"pooled.logits{i}"] = logits
    out["pooled.loss"] = load_balancing_loss_func(layers, num_experts=6, top_k=2).reshape(1).float()

    save_file({k: v.detach().contiguous().float() for k, v in out.items()}, path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
