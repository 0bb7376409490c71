#!/usr/bin/env python3
"""The transformers contender of benchmarks/moe_vs_transformers.sh: transformers'
MixtralForCausalLM at configs/mixtral-tiny.toml's sizes (4 layers, hidden 64, 8
heads over 4 key/value heads, 8 SwiGLU experts of width 48, top-2, untied head,
byte vocabulary), trained by PyTorch eager as a user of transformers writes it:
the model's own loss with its router auxiliary loss (output_router_logits,
router_aux_loss_coef 0.01), torch.optim.AdamW (decay on matrices only),
clip_grad_norm_, gradient accumulation. --experts picks transformers' experts
implementation: "eager" (its loop over the experts that received tokens) or
"grouped_mm" (its default: torch._grouped_mm, or on the CPU its per-expert
fallback op). Reads the same token file and batches as benchmarks/eager_gpt.py
and prints one line
  eager: steps N warmup W tokens_per_s T step_time_s S threads K torch V
for the script to read. Shares no code with Trident."""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eager_gpt import read_tokens, train_steps  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="token file prefix (PREFIX.train.bin)")
    for name, default in [("layers", 4), ("hidden", 64), ("heads", 8), ("kv-heads", 4), ("ffn", 48),
                          ("experts", 8), ("top-k", 2), ("seq", 32), ("vocab", 256), ("micro-batch", 2),
                          ("global-batch", 16), ("steps", 60), ("warmup", 10), ("threads", 1), ("seed", 1234)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--experts-impl", choices=["eager", "grouped_mm"], default="eager")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    a = p.parse_args()
    if a.global_batch % a.micro_batch or a.steps <= a.warmup:
        sys.exit("eager_mixtral.py: --global-batch must be a multiple of --micro-batch and --steps > --warmup")
    from transformers import MixtralConfig, MixtralForCausalLM
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    config = MixtralConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn,
                           num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                           num_local_experts=a.experts, num_experts_per_tok=a.top_k, max_position_embeddings=a.seq,
                           rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                           output_router_logits=True, router_aux_loss_coef=0.01, initializer_range=0.02)
    model = MixtralForCausalLM._from_config(config, attn_implementation="sdpa", experts_implementation=a.experts_impl)
    if model.config._experts_implementation != a.experts_impl:
        sys.exit(f"eager_mixtral.py: transformers runs experts as {model.config._experts_implementation!r}, "
                 f"not {a.experts_impl!r}")
    model.train()
    tokens = read_tokens(a.data)
    samples = (len(tokens) - 1) // a.seq
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    # transformers shifts the labels itself: the window's first a.seq tokens are inputs and labels.
    times, loss = train_steps(a, tokens, samples,
                              lambda x, y: model(input_ids=x, labels=x.clone(), use_cache=False).loss,
                              model.parameters(), opt)
    print(f"eager: steps {a.steps} warmup {a.warmup} tokens_per_s {len(times) * a.global_batch * a.seq / sum(times):.2f} "
          f"step_time_s {sum(times) / len(times):.4f} threads {torch.get_num_threads()} torch {torch.__version__} "
          f"experts {model.config._experts_implementation} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
