#!/usr/bin/env python3
"""Where a layout's error against the fp64 truth comes from (tests/reference/README.md,
"Where a layout's error comes from"). Not a CTest: about a minute and a half on 2 cores.

gpt-tiny on the byte tokens of the pinned README text, tests/reference/text (the ReferenceTrainingTiny text),
20 steps, warm-up 3, clipping at 1.0 (the tiny test clips at 2.0). It trains:

  Trident     tp1pp1dp1, tp2, dp2 (ZeRO 0 and 1), pp2, tp2 x dp2, tp2 x pp2 x dp2 interleaved
              (schedule.chunks = 2) ZeRO-1 on 8 ranks;
  reference   reference_train.py in float64 (the truth) and float32: 1 thread, 2 threads, the
              micro-batch gradients summed in data parallelism's order (--dp 2), pairwise
              (--accumulate pairwise), in float64 (--accumulate float64), and the norm of
              clip_grad_norm_ as it is (--norm native);

and writes, per run and step, e(x) = |x - fp64| / |fp64| for the loss and the gradient norm, the
ratio e / max(e(torch fp32), 2^-22) of the training contract, and the distances that isolate one
factor each (a Trident layout against Trident's single-process run; the reference in DP's order
against the reference in order), to RESULTS/error_sources.json and a table RESULTS/error_sources.txt
(error_sources-REV.{json,txt} with --text-rev REV, -seedN with --seed N).

  .venv/bin/python3 tests/reference/error_sources.py --trident build/trident --source-dir . \\
      --work build/tests/reference/error-sources --results tests/reference/results
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_reference_training import FLOOR, K, metrics, text_files, run  # noqa: E402

CLIP = 1.0
STEP = 10  # the step the tracker quoted

_3D = ["parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "parallel.zero=1", "schedule.kind=interleaved",
       "schedule.chunks=2"]
TRIDENT = [  # (name, ranks, --set overrides)
    ("tp1pp1dp1", 1, []),
    ("tp2", 2, ["parallel.tp=2"]),
    ("dp2_zero0", 2, ["parallel.dp=2", "parallel.zero=0"]),
    ("dp2_zero1", 2, ["parallel.dp=2", "parallel.zero=1"]),
    ("pp2", 2, ["parallel.pp=2"]),
    ("tp2_dp2_zero1", 4, ["parallel.tp=2", "parallel.dp=2", "parallel.zero=1"]),
    ("tp2_pp2_dp2_interleaved_zero1", 8, _3D),
]
REFERENCE = [  # (name, reference_train.py arguments); "torch_fp64" is the truth, "torch_fp32" the contract's
    ("torch_fp64", ["--dtype", "float64"]),
    ("torch_fp32", ["--dtype", "float32"]),
    ("torch_fp32_threads2", ["--dtype", "float32", "--threads", "2"]),
    ("torch_fp32_dp2_order", ["--dtype", "float32", "--dp", "2"]),
    ("torch_fp32_pairwise", ["--dtype", "float32", "--accumulate", "pairwise"]),
    ("torch_fp32_accumulate_fp64", ["--dtype", "float32", "--accumulate", "float64"]),
    ("torch_fp32_norm_native", ["--dtype", "float32", "--norm", "native"]),
]
# One factor each: (label, run, against).
PAIRS = [
    ("DP order in Trident (dp2 ZeRO-0 vs tp1)", "dp2_zero0", "tp1pp1dp1"),
    ("ZeRO-1 vs ZeRO-0 (dp2)", "dp2_zero1", "dp2_zero0"),
    ("DP order in the reference (--dp 2 vs in order)", "torch_fp32_dp2_order", "torch_fp32"),
    ("TP in Trident (tp2 vs tp1)", "tp2", "tp1pp1dp1"),
    ("PP in Trident (pp2 vs tp1)", "pp2", "tp1pp1dp1"),
    ("tp2 x dp2 vs tp2", "tp2_dp2_zero1", "tp2"),
    ("3D vs tp2 x dp2", "tp2_pp2_dp2_interleaved_zero1", "tp2_dp2_zero1"),
    ("3D vs tp1", "tp2_pp2_dp2_interleaved_zero1", "tp1pp1dp1"),
    ("torch threads 2 vs 1", "torch_fp32_threads2", "torch_fp32"),
    ("Trident tp1 vs torch fp32", "tp1pp1dp1", "torch_fp32"),
]


def readme_text(src, rev, work):
    """The README files of the tiny case: the pinned copies, or those of git revision `rev`
    (the same selection rule, applied to that revision's tree)."""
    if not rev:
        return text_files(src)
    names = subprocess.run(["git", "-C", src, "ls-tree", "-r", "--name-only", rev], check=True,
                           stdout=subprocess.PIPE, text=True).stdout.split()
    skip = ("build", ".venv", "node_modules", "runs", "data", "tests")
    picked = [n for n in names if n.endswith("README.md") and n.count("/") <= 2
              and (n == "README.md" or n.split("/")[0] not in skip) and os.path.basename(n) == "README.md"]
    out = []
    for n in sorted(picked):
        path = os.path.join(work, "text", n)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(subprocess.run(["git", "-C", src, "show", f"{rev}:{n}"], check=True, stdout=subprocess.PIPE).stdout)
        out.append(path)
    return out


def rel(a, b):
    return abs(a - b) / abs(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trident", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--results", required=True, help="folder for error_sources.json and error_sources.txt")
    ap.add_argument("--text-rev", default="", help="the README text of this git revision instead of the working tree's")
    ap.add_argument("--seed", type=int, default=0, help="training.seed (0: gpt-tiny's)")
    args = ap.parse_args()
    t, src = args.trident, os.path.abspath(args.source_dir)
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    start = time.time()

    files = readme_text(src, args.text_rev, work)
    prefix = os.path.join(work, "readme-bytes")
    run([t, "data", "prepare", "--tokenizer", "byte", "--input", *files, "--output", prefix])
    config = os.path.join(src, "configs/gpt-tiny.toml")
    sets = ["training.threads=1", "training.steps=20", "model.dropout=0", "data.source=file",
            "training.eval_interval=0", "training.peak_tflops=1", "logging.log_interval=1",
            f"data.path={prefix}", "model.vocab_pad_multiple=96", "training.warmup_steps=3",
            f"training.grad_clip={CLIP}"] + ([f"training.seed={args.seed}"] if args.seed else [])
    setargs = [a for s in sets for a in ("--set", s)]

    runs = {}
    for name, nproc, extra in TRIDENT:
        out = os.path.join(work, name)
        train = [t, "train", "--config", config, *setargs, *[a for s in extra for a in ("--set", s)],
                 "--set", f"logging.dir={out}"]
        run(train if nproc == 1 else [t, "launch", "--nproc-per-node", str(nproc), "--master-port", "0", "--", *train])
        runs[name] = metrics(out)
    ck0, hf0 = os.path.join(work, "ckpt0"), os.path.join(work, "hf0")
    run([t, "checkpoint", "init", "--config", config, *setargs, "--out", ck0])
    run([t, "export", "--checkpoint", ck0, "--format", "hf-gpt2", "--out", hf0])
    env = dict(os.environ, MALLOC_MMAP_MAX_="0", MALLOC_TRIM_THRESHOLD_=str(1 << 32))
    for name, extra in REFERENCE:
        out = os.path.join(work, name)
        run([sys.executable, os.path.join(HERE, "reference_train.py"), "--config",
             os.path.join(work, "tp1pp1dp1", "config.toml"), "--hf-dir", hf0, "--out", out, *extra], env=env)
        runs[name] = metrics(out)

    truth, p32 = runs["torch_fp64"], runs["torch_fp32"]
    keys = ("loss", "grad_norm")
    table = {}
    for name, rows in runs.items():
        if name == "torch_fp64":
            continue
        per = {k: [rel(x[k], z[k]) for x, z in zip(rows, truth)] for k in keys}
        ratio = {k: [e / max(rel(y[k], z[k]), FLOOR) for e, y, z in zip(per[k], p32, truth)] for k in keys}
        table[name] = {
            "rel_err": per, "ratio": ratio,
            "max_rel_err": {k: max(per[k]) for k in keys},
            f"step{STEP}_rel_err": {k: per[k][STEP - 1] for k in keys},
            "max_ratio": {k: max(ratio[k]) for k in keys},
            "clipped_steps": [x["step"] for x in rows if x["grad_norm"] > CLIP],
        }
    pairs = []
    for label, a, b in PAIRS:
        d = {k: [rel(x[k], y[k]) for x, y in zip(runs[a], runs[b])] for k in keys}
        pairs.append({"label": label, "run": a, "against": b, "rel_diff": d,
                      "max_rel_diff": {k: max(d[k]) for k in keys}, f"step{STEP}_rel_diff": {k: d[k][STEP - 1] for k in keys},
                      "bit_identical": all(x[k] == y[k] for x, y in zip(runs[a], runs[b]) for k in keys)})

    lines = [f"gpt-tiny, README bytes{' of ' + args.text_rev if args.text_rev else ''}"
             f"{', seed %d' % args.seed if args.seed else ''}, 20 steps, warm-up 3, "
             f"clip {CLIP}; e = |x - fp64| / |fp64|; ratio = e / max(e(torch fp32), 2^-22), contract K = {K}",
             "fp64 grad norms: " + " ".join("%.3f" % z["grad_norm"] for z in truth), "",
             f"{'run':<32} {'e(loss) max':>11} {'step ' + str(STEP):>9} {'e(norm) max':>11} {'step ' + str(STEP):>9} "
             f"{'ratio loss':>10} {'ratio norm':>10}  clipped"]
    for name, r in table.items():
        c = r["clipped_steps"]
        lines.append(f"{name:<32} {r['max_rel_err']['loss']:11.2e} {r[f'step{STEP}_rel_err']['loss']:9.2e} "
                     f"{r['max_rel_err']['grad_norm']:11.2e} {r[f'step{STEP}_rel_err']['grad_norm']:9.2e} "
                     f"{r['max_ratio']['loss']:10.2f} {r['max_ratio']['grad_norm']:10.2f}  "
                     f"{'all 20' if len(c) == 20 else c}")
    lines += ["", f"{'one factor: run vs against':<48} {'loss max':>9} {'step ' + str(STEP):>9} {'norm max':>9} "
              f"{'step ' + str(STEP):>9}"]
    for p in pairs:
        lines.append(f"{p['label']:<48} {p['max_rel_diff']['loss']:9.2e} {p[f'step{STEP}_rel_diff']['loss']:9.2e} "
                     f"{p['max_rel_diff']['grad_norm']:9.2e} {p[f'step{STEP}_rel_diff']['grad_norm']:9.2e}"
                     + ("  (bit-identical)" if p["bit_identical"] else ""))
    lines += ["", "per-step e(grad_norm):"]
    for name, r in table.items():
        lines.append(f"{name:<32} " + " ".join(f"{e:.1e}" for e in r["rel_err"]["grad_norm"]))
    lines += ["", "per-step e(loss):"]
    for name, r in table.items():
        lines.append(f"{name:<32} " + " ".join(f"{e:.1e}" for e in r["rel_err"]["loss"]))
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(args.results, exist_ok=True)
    stem = "error_sources" + (f"-{args.text_rev}" if args.text_rev else "") + (f"-seed{args.seed}" if args.seed else "")
    with open(os.path.join(args.results, stem + ".json"), "w") as f:
        json.dump({"case": "gpt-tiny README bytes, 20 steps, warm-up 3, clip 1.0", "text_rev": args.text_rev or None,
                   "seed": args.seed or None,
                   "K": K, "floor": FLOOR, "step_quoted": STEP, "runs": table, "pairs": pairs,
                   "fp64": truth, "seconds": round(time.time() - start, 1)}, f, indent=1)
    with open(os.path.join(args.results, stem + ".txt"), "w") as f:
        f.write(text)
    print(f"wrote {args.results}/{stem}.{{json,txt}} in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
