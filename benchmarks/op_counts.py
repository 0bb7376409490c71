#!/usr/bin/env python3
"""The PyTorch-eager side of benchmarks/op_counts.sh: the top-level ATen
operations of one training step (the second), by phase, counted with
torch.profiler, for the same model and batch shapes as a Trident preset.
GPT is benchmarks/eager_gpt.py's model (the PyTorch-eager contender of the
throughput benchmark); Llama is transformers' LlamaForCausalLM at the preset's
sizes (the model tests/reference trains against Trident). The optimizer is
torch.optim.AdamW with foreach=True and clip_grad_norm_ with foreach=True
(on the CPU both default to per-parameter loops), or --optimizer loop for
those defaults. Counting rule (NOTE [operation counts] in core/op_count.h):
an aten:: event without an aten:: ancestor; its phase is the record_function
range around it. Prints one JSON object."""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eager_gpt import Gpt  # noqa: E402

PHASES = ("forward", "backward", "grad_sync", "optimizer", "other")


def build(a):
    if a.arch == "gpt":
        return Gpt(a), lambda model, ids, tgt: model(ids, tgt)
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=a.seq,
                      rope_theta=a.rope_theta, tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg)

    def loss_of(m, ids, tgt):
        logits = m(input_ids=ids, use_cache=False).logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.reshape(-1))
    return model, loss_of


def count(prof):
    out = dict.fromkeys(PHASES, 0)
    for e in prof.events():
        if not e.name.startswith("aten::"):
            continue
        phase, top, p = "other", True, e.cpu_parent
        while p is not None:
            if p.name.startswith("aten::"):
                top = False
            if p.name.startswith("phase:") and phase == "other":
                phase = p.name[len("phase:"):]
            p = p.cpu_parent
        if top:
            out[phase] += 1
    out["total"] = sum(out[k] for k in PHASES)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", choices=["gpt", "llama"], required=True)
    for name, default in [("layers", 8), ("hidden", 64), ("heads", 8), ("kv-heads", 8), ("ffn", 256), ("seq", 32),
                          ("vocab", 256), ("micro-batch", 2), ("global-batch", 16)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--optimizer", choices=["foreach", "loop"], default="foreach")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    model, loss_of = build(a)
    foreach = a.optimizer == "foreach"
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8, foreach=foreach)
    m = a.global_batch // a.micro_batch
    batches = torch.randint(0, a.vocab, (m, a.micro_batch, a.seq + 1))

    def step():
        opt.zero_grad(set_to_none=False)
        for mb in range(m):
            with torch.profiler.record_function("phase:forward"):
                loss = loss_of(model, batches[mb, :, :-1], batches[mb, :, 1:]) / m
            with torch.profiler.record_function("phase:backward"):
                loss.backward()
        with torch.profiler.record_function("phase:optimizer"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=foreach)
            opt.step()

    step()  # the first step creates the optimizer state
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    print(json.dumps({"arch": a.arch, "adamw": a.optimizer, "torch": torch.__version__, **count(prof)}))


if __name__ == "__main__":
    main()
