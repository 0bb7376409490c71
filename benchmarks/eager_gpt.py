#!/usr/bin/env python3
"""The Python contender of benchmarks/run_train_bench.sh and benchmarks/tiny_vs_eager.sh.
--arch gpt: the same GPT-2 as benchmarks/libtorch_gpt.h (token + position
embeddings, pre-LN blocks with fused qkv and causal scaled_dot_product_attention,
tanh-GELU MLP, final LayerNorm, head tied to the token embedding, padded
vocabulary). --arch llama: a Llama as models/llama/llama.cpp shapes it (token
embedding, pre-norm blocks with RMSNorm, rotary q and k, grouped-query causal
attention, SwiGLU MLP, no biases, final RMSNorm, untied head). Trained by PyTorch
eager as a user of torch 2.11 writes it: torch.optim.AdamW (decay on matrices
only; --adamw picks its CPU default loop, foreach or fused), clip_grad_norm_,
gradient accumulation. Initialised as GPT-2 and the libtorch loop are
(gpt2_init): PyTorch's default init (N(0, 1) embeddings) starts the tied
head's logits so spread that their softmax is mostly subnormal floats, and the
first steps' backward ran over 10x slower on them (38 s for 2 steps). It reads the same token file (NOTE [token file format] in
datasets/token_file.h) and prints one line
  eager: steps N warmup W tokens_per_s T step_time_s S threads K torch V
for the script to read. Shares no code with Trident."""
import argparse
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_tokens(prefix):
    path = prefix + ".train.bin"
    with open(path, "rb") as f:
        header = f.read(128)
    if header[:8] != b"TRIDTOK\0":
        sys.exit(f"eager_gpt.py: {path} is not a Trident token file")
    width = int.from_bytes(header[12:16], "little")
    count = int.from_bytes(header[16:24], "little")
    dtype = {2: np.uint16, 4: np.uint32}[width]
    return np.memmap(path, dtype=dtype, mode="r", offset=128, shape=(count,))


class Block(nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc, self.out = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
        r = x + self.proj(y)
        return r + self.out(F.gelu(self.fc(self.ln2(r)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(a.vocab, a.hidden), nn.Embedding(a.seq, a.hidden)
        self.blocks = nn.ModuleList(Block(a.hidden, a.heads, a.ffn) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.hidden)

    def forward(self, ids, targets):
        x = self.wte(ids) + self.wpe.weight[: ids.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # padded rows unmasked, as in the libtorch loop
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def rotary(x, cos, sin):  # x: (b, heads, s, d); rotate the two halves of each head (Llama's convention)
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-b, a), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads, self.kv, self.d = a.heads, a.kv_heads, a.hidden // a.heads
        self.attn_norm, self.mlp_norm = nn.RMSNorm(a.hidden, eps=1e-5), nn.RMSNorm(a.hidden, eps=1e-5)
        self.qkv = nn.Linear(a.hidden, (a.heads + 2 * a.kv_heads) * self.d, bias=False)
        self.o = nn.Linear(a.hidden, a.hidden, bias=False)
        self.gate_up = nn.Linear(a.hidden, 2 * a.ffn, bias=False)
        self.down = nn.Linear(a.ffn, a.hidden, bias=False)

    def forward(self, x, cos, sin):
        b, s, h = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, s, -1, self.d).transpose(1, 2).split(
            [self.heads, self.kv, self.kv], dim=1)
        y = F.scaled_dot_product_attention(rotary(q, cos, sin), rotary(k, cos, sin), v, is_causal=True,
                                           enable_gqa=True)
        r = x + self.o(y.transpose(1, 2).reshape(b, s, h))
        gate, up = self.gate_up(self.mlp_norm(r)).chunk(2, dim=-1)
        return r + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.hidden)
        self.blocks = nn.ModuleList(LlamaBlock(a) for _ in range(a.layers))
        self.norm = nn.RMSNorm(a.hidden, eps=1e-5)
        self.head = nn.Linear(a.hidden, a.vocab, bias=False)
        d = a.hidden // a.heads
        freq = a.rope_theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
        angle = torch.outer(torch.arange(a.seq, dtype=torch.float32), freq).repeat(1, 2)
        self.register_buffer("cos", angle.cos(), persistent=False)
        self.register_buffer("sin", angle.sin(), persistent=False)

    def forward(self, ids, targets):
        x = self.embed(ids)
        cos, sin = self.cos[: ids.shape[1]], self.sin[: ids.shape[1]]
        for blk in self.blocks:
            x = blk(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def gpt2_init(model, layers):
    """GPT-2's init, as benchmarks/libtorch_gpt.h gives the loop's model: matrices N(0, 0.02), the
    projections back into the residual stream N(0, 0.02 / sqrt(2 layers)), biases 0, norms as built."""
    with torch.no_grad():
        for name, q in model.named_parameters():
            if q.dim() < 2:
                if name.endswith("bias"):
                    q.zero_()
                continue
            out_proj = name.endswith(("proj.weight", "out.weight", "o.weight", "down.weight"))
            q.normal_(0.0, 0.02 / (2 * layers) ** 0.5 if out_proj else 0.02)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="token file prefix (PREFIX.train.bin)")
    for name, default in [("layers", 4), ("hidden", 128), ("heads", 4), ("ffn", 512), ("seq", 128),
                          ("vocab", 50304), ("micro-batch", 4), ("global-batch", 16), ("steps", 24),
                          ("warmup", 4), ("threads", 1), ("seed", 1234)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--arch", choices=["gpt", "llama"], default="gpt")
    p.add_argument("--kv-heads", type=int, default=0, help="llama: key/value heads (default --heads)")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--adamw", choices=["default", "foreach", "fused"], default="default",
                   help="torch.optim.AdamW's implementation: its CPU default (a loop), foreach=True or fused=True")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    a = p.parse_args()
    a.kv_heads = a.kv_heads or a.heads
    if a.global_batch % a.micro_batch or a.steps <= a.warmup:
        sys.exit("eager_gpt.py: --global-batch must be a multiple of --micro-batch and --steps > --warmup")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tokens = read_tokens(a.data)
    samples = (len(tokens) - 1) // a.seq
    model = Gpt(a) if a.arch == "gpt" else Llama(a)
    gpt2_init(model, a.layers)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            **({"foreach": True} if a.adamw == "foreach" else {"fused": True} if a.adamw == "fused" else {}))
    times, loss = train_steps(a, tokens, samples, lambda x, y: model(x, y), model.parameters(), opt,
                              foreach=a.adamw != "default" or None)
    print(f"eager: steps {a.steps} warmup {a.warmup} tokens_per_s {len(times) * a.global_batch * a.seq / sum(times):.2f} "
          f"step_time_s {sum(times) / len(times):.4f} threads {torch.get_num_threads()} torch {torch.__version__} "
          f"loss {loss.item():.4f}")


def train_steps(a, tokens, samples, loss_of, params, opt, foreach=None):
    """a.steps steps of a.global_batch random windows of a.seq + 1 tokens in micro-batches of
    a.micro_batch, each loss_of(inputs, targets) backpropagated over the micro-batch count, the
    gradients clipped to a.grad_clip, one optimizer step: the seconds of each step after a.warmup,
    and the last micro-batch's loss. Shared by eager_gpt.py and eager_mixtral.py."""
    params = list(params)
    gen = np.random.default_rng(a.seed)
    m = a.global_batch // a.micro_batch
    times, loss = [], None
    for step in range(a.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        order = gen.permutation(samples)[: a.global_batch]
        for mb in range(m):
            rows = [tokens[i * a.seq: i * a.seq + a.seq + 1] for i in order[mb * a.micro_batch:(mb + 1) * a.micro_batch]]
            batch = torch.from_numpy(np.stack(rows).astype(np.int64))
            loss = loss_of(batch[:, :-1], batch[:, 1:])
            (loss / m).backward()
        torch.nn.utils.clip_grad_norm_(params, a.grad_clip, foreach=foreach)
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - start)
    return times, loss


if __name__ == "__main__":
    main()
