#!/usr/bin/env python3
"""PyTorch's torch.distributed.pipelining as a peer of Trident's pipeline.

The same GPT stages (configs/gpt-tiny.toml; transformers' GPT2Block layers loaded from
Trident's step-0 export, `trident checkpoint init` + `trident export --format hf-gpt2`, as
tests/reference/reference_train.py does), the same micro-batches (tests/reference/trident_data.py,
the pinned README text's byte tokens as in ReferenceTrainingTiny), the same optimizer, LR schedule and
clipping (reference_train.py's), driven by PyTorch's PipelineStage and schedule classes on CPU
Gloo, one thread per rank, beside `trident launch -- trident train` on the same layout.

  peer_pipelining.py run    --trident build/trident --stages 2 [--schedules ...] --out FILE
  peer_pipelining.py orders --trident build/trident [--cases 2,4,1 2,4,2 4,8,2] [--out FILE]
  peer_pipelining.py worker ...   (internal: one PyTorch run, mp.spawn of p ranks)

`run`, for each schedule, alternates the two sides ROUNDS times (Trident, PyTorch, Trident,
PyTorch, ...), checks every step's loss agrees within a relative 1e-5 and reports the median
over rounds of the per-round ratio of median tokens/s (steps after the first), Trident / PyTorch.
`orders` prints PyTorch's schedule IR (`pipeline_order`, built from stand-in stages: it needs
no process group) beside `trident schedule --format csv --compute-only` for the same (p, m, v).
"""

import argparse
import datetime
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import types

HERE = os.path.dirname(os.path.realpath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRC, "tests", "reference"))

RTOL = 1e-5

# (name, PyTorch class, v, Trident schedule.kind, Trident chunks, placement)
SCHEDULES = [
    ("gpipe", "ScheduleGPipe", 1, "gpipe", 1, "loop"),
    ("1f1b", "Schedule1F1B", 1, "1f1b", 1, "loop"),
    ("interleaved", "ScheduleInterleaved1F1B", 2, "interleaved", 2, "loop"),
    # Trident has no interleaved zero-bubble generator: its ZB-H1 (v = 1) is the counterpart of
    # PyTorch's ScheduleInterleavedZeroBubble with one stage per rank.
    ("interleaved-zb", "ScheduleInterleavedZeroBubble", 1, "zb-h1", 1, "loop"),
    ("zb-v", "ScheduleZBVZeroBubble", 2, "zb-v", 2, "v"),
    ("dualpipev", "ScheduleDualPipeV", 2, "dualpipev", 2, "v"),
]


def sh(cmd, env=None, check=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if check and r.returncode != 0:
        raise RuntimeError(f"exit {r.returncode}: {' '.join(cmd)}\n{r.stdout[-4000:]}")
    return r


def metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def loadavg():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------------------------------------
# the PyTorch side


def stage_of(placement, p, r, c):
    """Virtual stage of (rank r, chunk c): loop = c*p + r; v zig-zags (schedules/README.md)."""
    if placement == "loop" or c % 2 == 0:
        return c * p + r
    return c * p + (p - 1 - r)


def build_stage_module(hf, s, n_stages, seq):
    """Virtual stage s of n_stages: its share of transformers' GPT2Block layers (uniform split,
    as Trident's without parallel.pipeline_layers), the embeddings on stage 0, ln_f and the LM
    head (a copy of the tied wte, its gradient summed with the embedding's) on the last."""
    import copy

    import torch
    import torch.nn as nn

    layers = len(hf.transformer.h)
    per = layers // n_stages
    first, last = s == 0, s == n_stages - 1

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            if first:
                self.wte = copy.deepcopy(hf.transformer.wte)
                self.wpe = copy.deepcopy(hf.transformer.wpe)
            self.h = nn.ModuleList(copy.deepcopy(hf.transformer.h[i]) for i in range(s * per, (s + 1) * per))
            if last:
                self.ln_f = copy.deepcopy(hf.transformer.ln_f)
                self.lm_head = nn.Linear(hf.config.n_embd, hf.config.vocab_size, bias=False)
                self.lm_head.weight = nn.Parameter(hf.transformer.wte.weight.detach().clone())
            # transformers' additive causal mask for eager attention (finfo.min above the diagonal)
            mask = torch.full((seq, seq), torch.finfo(torch.float32).min).triu(1)
            self.register_buffer("mask", mask[None, None], persistent=False)

        def forward(self, x):
            if first:  # x: (mbs, seq) token ids
                x = self.wte(x) + self.wpe(torch.arange(x.size(1)))[None]
            for blk in self.h:  # (mbs, seq, hidden)
                x = blk(x, attention_mask=self.mask)
            if last:
                x = self.lm_head(self.ln_f(x))  # (mbs, seq, vocab)
            return x

    return Stage()


def worker_main(rank, args):
    os.environ["OMP_NUM_THREADS"] = "1"
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import tomllib
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as S

    from reference_train import load_model, lr_at
    from trident_data import Samples, TokenFile

    torch.set_num_threads(1)
    p = args.p
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=p,
                            timeout=datetime.timedelta(seconds=300))
    with open(args.config, "rb") as f:
        cfg = tomllib.load(f)
    m_cfg, t_cfg, d_cfg = cfg["model"], cfg["training"], cfg["data"]
    seq, gbs, mbs = m_cfg["seq_len"], t_cfg["global_batch_size"], t_cfg["micro_batch_size"]
    m = gbs // mbs
    samples = Samples(TokenFile(d_cfg["path"] + ".train.bin").tokens, seq, t_cfg["seed"])
    hf = load_model(args.hf_dir, m_cfg, torch.float32)
    v, placement = args.v, args.placement
    n_stages = p * v
    mine = [stage_of(placement, p, rank, c) for c in range(v)]
    mods = {s: build_stage_module(hf, s, n_stages, seq) for s in mine}
    del hf
    dev = torch.device("cpu")
    stages = [PipelineStage(mods[s], s, n_stages, dev) for s in mine]
    if args.patch_self_p2p:
        # NOTE [self p2p on Gloo]: on the first step every stage sends a dummy tensor to the ranks of
        # stages s-1 and s+1 (stage.py's _get_init_p2p_neighbors_ops, pytorch/pytorch#160210). Under
        # the V placement stages p-1 and p live on one rank, so rank p-1 sends to itself, which Gloo
        # cannot ("Pair is not connected"); NCCL can. Dropping those self-addressed warm-up ops is
        # the only change: the schedules hand that boundary over locally anyway.
        base_cls = type(stages[0])
        init_ops = base_cls._get_init_p2p_neighbors_ops

        def no_self_ops(self):
            me = dist.get_rank(self.group)
            return [op for op in init_ops(self) if op.group_peer != me]

        base_cls._get_init_p2p_neighbors_ops = no_self_ops

    ce_log = []

    def loss_fn(out, target):  # Trident backpropagates loss * (1/m) per micro-batch: scale_grads=False
        ce = F.cross_entropy(out.reshape(-1, out.size(-1)), target.reshape(-1))
        ce_log.append(ce.detach())
        return ce * (1.0 / m)

    cls = getattr(S, args.cls)
    sched = cls(stages[0] if v == 1 and issubclass(cls, S.PipelineScheduleSingle) else stages, m,
                loss_fn=loss_fn, scale_grads=False)

    # The compute order actually run: every forward / backward / weight call of a stage.
    trace = []
    base = type(stages[0])
    orig = {k: getattr(base, k) for k in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk")}

    def fwd(self, mb, *a, **k):
        trace.append(f"{self.stage_index}F{mb}")
        return orig["forward_one_chunk"](self, mb, *a, **k)

    def bwd(self, mb, loss=None, full_backward=True, last_backward=False):
        trace.append(f"{self.stage_index}{'B' if full_backward else 'I'}{mb}")
        return orig["backward_one_chunk"](self, mb, loss=loss, full_backward=full_backward,
                                          last_backward=last_backward)

    def bww(self, mb, last_backward=False):
        trace.append(f"{self.stage_index}W{mb}")
        return orig["backward_weight_one_chunk"](self, mb, last_backward=last_backward)

    base.forward_one_chunk, base.backward_one_chunk, base.backward_weight_one_chunk = fwd, bwd, bww

    # Parameters, AdamW groups as reference_train.py (decay on matrices and embeddings).
    named = [(n, q) for s in mine for n, q in mods[s].named_parameters()]
    params = [q for _, q in named]
    decay = [q for n, q in named if not (n.endswith(".bias") or "ln_" in n)]
    plain = [q for n, q in named if n.endswith(".bias") or "ln_" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": t_cfg["weight_decay"]},
                             {"params": plain, "weight_decay": 0.0}],
                            lr=t_cfg["lr"], betas=(t_cfg["beta1"], t_cfg["beta2"]), eps=t_cfg["eps"], foreach=False)
    first_rank = 0
    last_rank = [r for r in range(p) if stage_of(placement, p, r, v - 1) == n_stages - 1][0]
    tie_group = dist.new_group([first_rank, last_rank]) if last_rank != first_rank else None
    emb = mods[0].wte.weight if 0 in mods else None
    head = mods[n_stages - 1].lm_head.weight if n_stages - 1 in mods else None
    # the tied weight counts once in the norm: the head's copy is left out
    norm_params = [q for n, q in named if not n.startswith("lm_head")]
    clip = t_cfg["grad_clip"]
    rows = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        ce_log.clear()
        idx = samples.global_batch(step, gbs)  # micro-batch k = rows k*mbs .. k*mbs+mbs-1
        win = torch.from_numpy(np.stack([samples.window(i) for i in idx]))
        x, y = win[:, :seq].contiguous(), win[:, 1:].contiguous()
        if step == 0:
            trace.clear()
        # the first stage's rank feeds the inputs, the last stage's the targets; the schedule
        # cuts them into m micro-batches along dim 0 (micro-batch k = rows k*mbs .. k*mbs+mbs-1)
        sched.step(*((x,) if 0 in mods else ()), **({"target": y} if n_stages - 1 in mods else {}))
        if step == 0:
            trace0 = list(trace)
        # tied embedding: sum the two copies' gradients (Trident's tied group)
        if emb is not None and head is not None:
            g = emb.grad + head.grad
            emb.grad.copy_(g)
            head.grad.copy_(g)
        elif tie_group is not None and (emb is not None or head is not None):
            w = emb if emb is not None else head
            dist.all_reduce(w.grad, group=tie_group)
        sq = torch.zeros((), dtype=torch.float64)
        for q in norm_params:
            if q.grad is not None:
                sq += torch.linalg.vector_norm(q.grad, 2, dtype=torch.float64) ** 2
        dist.all_reduce(sq)
        norm_t = sq.sqrt()
        torch.nn.utils.clip_grads_with_norm_(params, clip if clip > 0 else float("inf"), norm_t)
        lr = lr_at(step, t_cfg["steps"], t_cfg["warmup_steps"], t_cfg["lr"], t_cfg["min_lr"])
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        loss = torch.tensor([sum(c.item() for c in ce_log), float(len(ce_log))], dtype=torch.float64)
        dist.all_reduce(loss)
        dt = time.perf_counter() - t0
        rows.append({"step": step + 1, "loss": loss[0].item() / m, "grad_norm": norm_t.item(), "lr": lr,
                     "step_s": dt, "tokens_per_s": gbs * seq / dt, "losses_counted": loss[1].item()})
    traces = [None] * p
    dist.all_gather_object(traces, trace0)
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        with open(os.path.join(args.out, "trace.json"), "w") as f:
            json.dump(traces, f)
    dist.destroy_process_group()


def worker(args):
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch.multiprocessing as mp

    mp.spawn(worker_main, args=(args,), nprocs=args.p, join=True)


# ---------------------------------------------------------------------------------------------
# the orchestrator


def m_of(run_dir):
    import tomllib

    with open(os.path.join(run_dir, "config.toml"), "rb") as f:
        c = tomllib.load(f)["training"]
    return c["global_batch_size"] // c["micro_batch_size"]


def run(args):
    t = os.path.abspath(args.trident)
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_MAX_="0", MALLOC_TRIM_THRESHOLD_=str(1 << 32))
    out = []
    say = lambda s="": (print(s, flush=True), out.append(s))  # noqa: E731
    say(f"# peer_pipelining: Trident vs torch.distributed.pipelining, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    say(f"command: {' '.join([os.path.relpath(sys.argv[0], SRC)] + sys.argv[1:])}")
    say(f"load average at start: {loadavg()} ({os.cpu_count()} cores)")
    import torch

    say(f"torch {torch.__version__}, CPU, Gloo, one thread per rank (OMP_NUM_THREADS=1, torch.set_num_threads(1), "
        f"training.threads=1)")
    prefix = os.path.join(work, "readme-bytes")
    from test_reference_training import text_files  # tests/reference: the same training text

    sh([t, "data", "prepare", "--tokenizer", "byte", "--input", *text_files(SRC), "--output", prefix])
    config = os.path.join(SRC, "configs/gpt-tiny.toml")
    sets = ["training.threads=1", f"training.steps={args.steps}", "model.dropout=0", "data.source=file",
            f"data.path={prefix}", "training.eval_interval=0", "training.peak_tflops=1", "training.grad_clip=2.0",
            "logging.log_interval=1"]  # every step: the per-step losses are compared
    setargs = [a for s in sets for a in ("--set", s)]
    ck0, hf0 = os.path.join(work, "ckpt0"), os.path.join(work, "hf0")
    sh([t, "checkpoint", "init", "--config", config, *setargs, "--out", ck0])
    sh([t, "export", "--checkpoint", ck0, "--format", "hf-gpt2", "--out", hf0])
    # Trident's single-process run: every pp run must equal it bit for bit (pure PP changes no arithmetic)
    sh([t, "train", "--config", config, *setargs, "--set", f"logging.dir={os.path.join(work, 'tri-1')}"], env=env)
    single = metrics(os.path.join(work, "tri-1"))
    say(f"model: configs/gpt-tiny.toml with --set {' --set '.join(sets[:-1])} (data: README byte tokens); "
        f"step-0 weights from trident checkpoint init + export --format hf-gpt2; {args.steps} steps per run, "
        f"tokens/s = median over steps 2..{args.steps} of (global batch tokens / step wall time), "
        f"ratio = median over {args.rounds} alternating rounds of Trident/PyTorch")
    wanted = args.schedules.split(",") if args.schedules else [s[0] for s in SCHEDULES]
    summary = []
    port = 29700 + (os.getpid() % 200) * 5
    for p in [int(x) for x in args.stages.split(",")]:
        for name, cls, v, kind, chunks, placement in SCHEDULES:
            if name not in wanted:
                continue
            say()
            say(f"## p={p} {cls} (v={v}, {placement}) vs trident {kind} (chunks={chunks})")
            tri_tps, pt_tps, ratios, tri_m, pt_m, err = [], [], [], None, None, None
            patch = []
            if placement == "v":  # as it is first; NOTE [self p2p on Gloo] in worker_main when it fails
                port += 1
                pd = os.path.join(work, f"pt-{p}-{name}-unpatched")
                r = sh([sys.executable, os.path.abspath(__file__), "worker", "--p", str(p), "--cls", cls, "--v", str(v),
                        "--placement", placement, "--config", os.path.join(work, "tri-1", "config.toml"), "--hf-dir", hf0,
                        "--steps", "1", "--out", pd, "--port", str(port)], env=env, check=False)
                if r.returncode != 0:
                    lines = [ln for ln in r.stdout.strip().splitlines() if ln.strip()]
                    exc = [ln for ln in lines if "Error" in ln]
                    say(f"PyTorch {cls} as it is, on CPU Gloo, fails on its first step: "
                        + (exc[-1] if exc else lines[-1] if lines else f"exit {r.returncode}"))
                    say("  (stage.py _get_init_p2p_neighbors_ops sends a warm-up tensor to its own rank at the V's "
                        "turn; Gloo has no self pair). Below: with those self-addressed warm-up ops dropped, "
                        "nothing else changed (--patch-self-p2p, NOTE [self p2p on Gloo]).")
                    patch = ["--patch-self-p2p"]
                else:
                    say(f"PyTorch {cls} as it is ran its first step on CPU Gloo")
            for rnd in range(args.rounds):
                td = os.path.join(work, f"tri-{p}-{name}-{rnd}")
                port += 2  # a port of its own: the default 29500 may be another job's on a shared machine
                cmd = [t, "launch", "--nproc-per-node", str(p), "--master-port", str(port), "--", t, "train", "--config", config, *setargs,
                       "--set", f"parallel.pp={p}", "--set", f"schedule.kind={kind}", "--set", f"schedule.chunks={chunks}",
                       "--set", f"logging.dir={td}"]
                if rnd == 0:
                    say("trident: " + " ".join(os.path.relpath(c, SRC) if c.startswith(SRC) else c for c in cmd))
                r = sh(cmd, env=env, check=False)
                if r.returncode != 0:
                    err = f"trident exit {r.returncode}: {r.stdout.strip().splitlines()[-3:]}"
                    with open(os.path.join(work, f"tri-{p}-{name}.log"), "w") as f:
                        f.write(r.stdout)
                    break
                tri_m = metrics(td)
                pd = os.path.join(work, f"pt-{p}-{name}-{rnd}")
                port += 1
                pcmd = [sys.executable, os.path.abspath(__file__), "worker", "--p", str(p), "--cls", cls, "--v", str(v),
                        "--placement", placement, "--config", os.path.join(td, "config.toml"), "--hf-dir", hf0,
                        "--steps", str(args.steps), "--out", pd, "--port", str(port)] + patch
                r = sh(pcmd, env=env, check=False)
                if r.returncode != 0:
                    lines = [ln for ln in r.stdout.strip().splitlines() if ln.strip()]
                    exc = [ln for ln in lines if "Error" in ln or "error" in ln]
                    err = f"PyTorch side failed (exit {r.returncode}): " + (exc[-1] if exc else lines[-1] if lines else "")
                    with open(os.path.join(work, f"pt-{p}-{name}.log"), "w") as f:
                        f.write(r.stdout)
                    break
                pt_m = metrics(pd)
                a = statistics.median(x["tokens_per_s"] for x in tri_m[1:])
                b = statistics.median(x["tokens_per_s"] for x in pt_m[1:])
                tri_tps.append(a)
                pt_tps.append(b)
                ratios.append(a / b)
            if err:
                say(f"FAILED: {err}")
                summary.append((p, cls, kind, "n/a", err))
                continue
            worst = 0.0
            say(f"{'step':>4} {'trident loss':>14} {'pytorch loss':>14} {'rel':>9} | {'trident norm':>13} {'pytorch norm':>13} {'rel':>9}")
            for x, y in zip(tri_m, pt_m):
                rl = abs(x["loss"] - y["loss"]) / abs(y["loss"])
                rn = abs(x["grad_norm"] - y["grad_norm"]) / abs(y["grad_norm"])
                worst = max(worst, rl)
                say(f"{x['step']:>4} {x['loss']:14.8f} {y['loss']:14.8f} {rl:9.2e} | {x['grad_norm']:13.8f} "
                    f"{y['grad_norm']:13.8f} {rn:9.2e}")
            agree = worst <= RTOL and len(tri_m) == len(pt_m) == args.steps
            bit = [(x["loss"], x["grad_norm"]) for x in tri_m] == [(x["loss"], x["grad_norm"]) for x in single]
            say(f"trident pp={p} {kind} equals trident's single-process run bit for bit: {'yes' if bit else 'NO'}")
            ratio = statistics.median(ratios)
            say(f"losses agree within {RTOL}: {'yes' if agree else 'NO'} (largest relative difference {worst:.2e})")
            say(f"tokens/s per round: trident {[round(a) for a in tri_tps]}, pytorch {[round(b) for b in pt_tps]}, "
                f"ratio {[round(q, 2) for q in ratios]}; median ratio Trident/PyTorch {ratio:.2f}")
            with open(os.path.join(work, f"pt-{p}-{name}-0", "trace.json")) as f:
                traces = json.load(f)
            tr = sh([t, "schedule", "--kind", kind, "-p", str(p), "-m", str(m_of(td)), "-v", str(chunks),
                     "--format", "csv", "--compute-only"]).stdout.strip().splitlines()
            tr = [trident_compute(tr[r]) for r in range(p)]  # the runtime's calls: no REDUCE_GRAD
            same = all(",".join(traces[r]) == tr[r] for r in range(p))
            pairs = " (PyTorch's overlapped pairs (F;B)OVERLAP_F_B run as F then B)" if kind == "dualpipev" else ""
            say(f"compute order run by PyTorch in step 1 {'equals' if same else 'differs from'} trident schedule "
                f"--kind {kind} -p {p} -m {m_of(td)} -v {chunks}{pairs if same else ''}")
            if not same:
                for r in range(p):
                    say(f"  rank {r} pytorch: {' '.join(traces[r])}")
                    say(f"  rank {r} trident: {tr[r].replace(',', ' ')}")
            summary.append((p, cls, kind, "yes" if agree else "NO", f"{ratio:.2f}")
                           + (("PyTorch as it is fails on Gloo (above); figures with --patch-self-p2p",) if patch else ()))
    say()
    say(f"load average at end: {loadavg()}")
    say()
    say("## summary (p, PyTorch class, Trident kind, losses agree within 1e-5, tokens/s Trident/PyTorch)")
    for row in summary:
        say(" | ".join(str(c) for c in row))
    if args.out:
        with open(args.out, "a" if args.append else "w") as f:
            f.write("\n".join(out) + "\n\n")


# ---------------------------------------------------------------------------------------------
# compute orders


def pytorch_order(cls_name, p, m, v, placement):
    import torch
    from torch.distributed.pipelining import schedules as S

    def mock(idx, n):
        return types.SimpleNamespace(stage_index=idx, num_stages=n, group_size=p, group_rank=0, is_first=idx == 0,
                                     is_last=idx == n - 1, submod=torch.nn.Linear(1, 1))

    cls = getattr(S, cls_name)
    if issubclass(cls, S.PipelineScheduleSingle):
        s = cls(mock(0, p), m, loss_fn=lambda a, b: a)
    else:
        s = cls([mock(stage_of(placement, p, 0, c), p * v) for c in range(v)], m, loss_fn=lambda a, b: a)
    rows = {}
    for r, acts in s.pipeline_order.items():
        rows[r] = [str(a) for a in acts if a is not None and "REDUCE_GRAD" not in str(a)]
    return rows


def unpaired(cells):
    """PyTorch's cells with each (A;B)OVERLAP_F_B written as A, B: Trident's IR has no pairs
    (schedules/README.md, "No overlapped pairs"); both runtimes run them that way."""
    out = []
    for c in cells:
        m = re.fullmatch(r"\(([^;]+);([^)]+)\)OVERLAP_F_B", c)
        out += [m.group(1), m.group(2)] if m else [c]
    return out


def trident_compute(row):
    """A row of `trident schedule --format csv --compute-only` without its REDUCE_GRAD cells, which
    PyTorch's multi-stage orders do not have (the comparison drops PyTorch's too)."""
    return ",".join(c for c in row.split(",") if "REDUCE_GRAD" not in c)


def orders(args):
    t = os.path.abspath(args.trident)
    out = []
    say = lambda s="": (print(s, flush=True), out.append(s))  # noqa: E731
    for case in args.cases:
        p, m, v = (int(x) for x in case.split(","))
        for name, cls, sv, kind, chunks, placement in SCHEDULES:
            vv = v
            if sv == 1 and name not in ("interleaved-zb",) and v != 1:
                continue
            if name in ("zb-v", "dualpipev") and v != 2:
                continue
            if name == "interleaved" and v == 1:
                continue
            tkind = kind if not (name == "interleaved-zb" and v > 1) else None
            say(f"### (p, m, v) = ({p}, {m}, {vv}): {cls}" + (f" vs trident {tkind}" if tkind else " (Trident: none)"))
            try:
                po = pytorch_order(cls, p, m, vv, placement)
            except Exception as e:  # noqa: BLE001
                say(f"PyTorch: {type(e).__name__}: {e}")
                continue
            tr = None
            if not tkind:  # no Trident generator: read PyTorch's order with Trident's CSV reader, validate, simulate
                import tempfile

                with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
                    f.write("\n".join(",".join(po[rk]) for rk in range(p)) + "\n")
                r = sh([t, "schedule", "--kind", "file", "--from-csv", f.name], check=False)
                os.unlink(f.name)
                say(f"  trident schedule --kind file --from-csv (PyTorch's order): "
                    + (r.stdout.strip().splitlines()[0] if r.returncode == 0 else r.stdout.strip()).replace(f.name, "(PyTorch order)"))
                r = sh([t, "schedule", "--kind", "interleaved", "-p", str(p), "-m", str(m), "-v", str(vv)], check=False)
                say(f"  trident schedule --kind interleaved (same p, m, v): " + r.stdout.strip().splitlines()[0])
            if tkind:
                r = sh([t, "schedule", "--kind", tkind, "-p", str(p), "-m", str(m), "-v", str(vv), "--format", "csv",
                        "--compute-only"], check=False)
                tr = [trident_compute(row) for row in r.stdout.strip().splitlines()] if r.returncode == 0 else None
                if tr is None:
                    say(f"trident: {r.stdout.strip()}")
            for rk in range(p):
                a = " ".join(unpaired(po[rk]))
                say(f"  rank {rk} pytorch: {a}")
                if tr:
                    b = tr[rk].replace(",", " ")
                    say(f"  rank {rk} trident: {b}" + ("   (same)" if a == b else "   (DIFFERENT)"))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("run")
    a.add_argument("--trident", default=os.path.join(SRC, "build/trident"))
    a.add_argument("--stages", default="2")
    a.add_argument("--schedules", default="", help="comma list of " + ",".join(s[0] for s in SCHEDULES))
    a.add_argument("--steps", type=int, default=6)
    a.add_argument("--rounds", type=int, default=2)
    a.add_argument("--work", default="/tmp/peer_pipelining")
    a.add_argument("--out", default="")
    a.add_argument("--append", action="store_true")
    o = sub.add_parser("orders")
    o.add_argument("--trident", default=os.path.join(SRC, "build/trident"))
    o.add_argument("--cases", nargs="+", default=["2,4,1", "2,4,2", "4,8,2"])
    o.add_argument("--out", default="")
    w = sub.add_parser("worker")
    for k in ("--cls", "--placement", "--config", "--hf-dir", "--out"):
        w.add_argument(k, required=True)
    for k in ("--p", "--v", "--steps", "--port"):
        w.add_argument(k, type=int, required=True)
    w.add_argument("--patch-self-p2p", action="store_true", help="NOTE [self p2p on Gloo]")
    args = ap.parse_args()
    {"run": run, "orders": orders, "worker": worker}[args.cmd](args)


if __name__ == "__main__":
    main()
