"""Context-parallel attention's merge on a device's own kernels (benchmarks/gpu/run.sh, step 6).

The zigzag ring of models/common/context_attention.cpp (NOTE [ring steps], NOTE [ring
attention]) played for every rank of a cp group in one process: each step's partial attention
from the device's fused kernel that returns the log-sum-exp (CUDA: flash attention in bf16, the
memory-efficient kernel in fp32, whose log-sum-exp rows are padded to a multiple of 32; CPU:
flash attention), the partials merged by log-sum-exp in fp32, and the rows of every rank put
back in sequence order, against causal SDPA over the whole sequence in fp64 on the CPU.
Prints one line per case and exits 1 when one misses its tolerance (fp32: 1e-5 of the largest
value; bf16: 2e-2).

usage: python3 cp_attention.py DEVICE   (cuda or cpu)
"""
import math
import sys

import torch
import torch.nn.functional as F


def positions(s, cp, r):
    c = s // (2 * cp)
    return list(range(r * c, (r + 1) * c)) + list(range((2 * cp - 1 - r) * c, (2 * cp - r) * c))


def step_kernel(q, k, v, causal, scale):
    """(out fp32, lse fp32) of one step from the device's fused kernel."""
    if q.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
    elif q.dtype == torch.float32:
        out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal, scale=scale)[:2]
        lse = lse[..., : q.shape[-2]]  # padded rows
    else:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)[:2]
    return out.float(), lse.float()


def ring(q, k, v, cp):
    """Every rank's output rows of the zigzag ring, put back in sequence order."""
    s, scale = q.shape[-2], 1 / math.sqrt(q.shape[-1])
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    whole = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for r in range(cp):
        pr = torch.tensor(positions(s, cp, r), device=q.device)
        qr, l = q[:, :, pr], 2 * (s // (2 * cp))
        out = torch.zeros(qr.shape, dtype=torch.float32, device=q.device)
        lse = torch.full(qr.shape[:-1], -math.inf, device=q.device)
        for i in range(cp):
            j = (r - i) % cp
            pj = torch.tensor(positions(s, cp, j), device=q.device)
            kj, vj = k[:, :, pj], v[:, :, pj]
            if j == r:
                rows, cols, causal = slice(0, l), l, True
            elif j < r:
                rows, cols, causal = slice(0, l), l // 2, False
            else:
                rows, cols, causal = slice(l // 2, l), l, False
            o, e = step_kernel(qr[:, :, rows].contiguous(), kj[:, :, :cols].contiguous(), vj[:, :, :cols].contiguous(),
                               causal, scale)
            m = torch.logaddexp(lse[:, :, rows], e)
            out[:, :, rows] = out[:, :, rows] * torch.exp(lse[:, :, rows] - m)[..., None] + o * torch.exp(e - m)[..., None]
            lse[:, :, rows] = m
        whole[:, :, pr] = out
    return whole


def main():
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    torch.manual_seed(5)
    bad = 0
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        for cp in (2, 4):
            q = torch.randn(1, 8, 1024, 64)
            k, v = torch.randn(1, 4, 1024, 64), torch.randn(1, 4, 1024, 64)
            ref = F.scaled_dot_product_attention(q.double(), k.double().repeat_interleave(2, 1),
                                                 v.double().repeat_interleave(2, 1), is_causal=True)
            try:
                got = ring(q.to(device, dtype), k.to(device, dtype), v.to(device, dtype), cp).double().cpu()
                err = ((got - ref).abs().max() / ref.abs().max()).item()
                ok = err <= tol
                line = f"{'PASS' if ok else 'FAIL'} {str(dtype).split('.')[-1]} cp {cp}: relative max difference {err:.2e} (tolerance {tol:g})"
            except Exception as e:  # a kernel this device lacks: say which
                ok, line = False, f"FAIL {str(dtype).split('.')[-1]} cp {cp}: {type(e).__name__}: {str(e).splitlines()[0]}"
            bad += not ok
            print(f"ring attention on {device}'s kernels with log-sum-exp, 1024 tokens, 8 heads over 4 kv heads: {line}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
