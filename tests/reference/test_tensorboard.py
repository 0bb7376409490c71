#!/usr/bin/env python3
"""Trident's TensorBoard event files read by the tensorboard package: the CTest test
TensorBoardEvents.

gpt-tiny trains 6 steps with `logging.tensorboard = true` and an evaluation every 3 steps.
Its run directory must hold one `events.out.tfevents.<time>.<host>`, and tensorboard's own
readers (the record reader checks both masked CRC-32Cs of every record) must find:
  - a first event with file_version "brain.Event:2";
  - one event per metrics.jsonl row, with the row's step, and one simple_value per numeric
    key of the row (the tag is the key), equal to the row's value rounded to float32;
  - through EventAccumulator (what `tensorboard --logdir` uses): the scalars loss, eval_loss
    (evaluation steps only), lr, grad_norm, tokens_per_s, tflops, mfu, bubble,
    optimizer_state_bytes and peak_memory_bytes, the loss of every step equal to
    metrics.jsonl's in float32.
"""

import glob
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
from tensorboard.backend.event_processing import event_accumulator, event_file_loader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trident_data import reference_args  # noqa: E402

REQUIRED = ["loss", "eval_loss", "lr", "grad_norm", "tokens_per_s", "tflops", "mfu", "bubble",
            "optimizer_state_bytes", "peak_memory_bytes"]


def fail(msg):
    raise SystemExit("FAIL: " + msg)


def f32(v):
    return float(np.float32(float("nan") if v is None else v))


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def main():
    args = reference_args()
    run_dir = os.path.join(args.work, "run")
    cmd = [args.trident, "train", "--config", os.path.join(args.source_dir, "configs", "gpt-tiny.toml"),
           "--set", "training.steps=6", "--set", "training.eval_interval=3", "--set", "training.threads=1",
           "--set", "training.peak_tflops=1", "--set", "logging.progress=false",
           "--set", "logging.tensorboard=true", "--set", f"logging.dir={run_dir}"]
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.stdout.write(r.stdout.decode(errors="replace"))
        fail(f"exit {r.returncode}")

    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if [row["step"] for row in rows] != list(range(1, 7)):
        fail(f"metrics.jsonl steps {[row['step'] for row in rows]}")
    files = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    if len(files) != 1:
        fail(f"expected one event file in {run_dir}, found {files}")
    name = os.path.basename(files[0])
    if not re.fullmatch(r"events\.out\.tfevents\.\d+\..+", name):
        fail(f"event file name {name}")

    # Every record as written, parsed by tensorboard's loader (CRCs checked; the Legacy
    # loader leaves simple_value as it is, EventFileLoader migrates it to a tensor).
    events = list(event_file_loader.LegacyEventFileLoader(files[0]).Load())
    if not events or events[0].file_version != "brain.Event:2":
        fail(f"first event is not the file version: {events[:1]}")
    scalars = events[1:]
    if [e.step for e in scalars] != [row["step"] for row in rows]:
        fail(f"event steps {[e.step for e in scalars]} != metrics.jsonl's")
    for e, row in zip(scalars, rows):
        got = {v.tag: v.simple_value for v in e.summary.value}
        want = {k: f32(v) for k, v in row.items() if k != "step"}
        if set(got) != set(want):
            fail(f"step {row['step']}: tags {sorted(got)} != metrics.jsonl keys {sorted(want)}")
        for k in want:
            if not same(got[k], want[k]):
                fail(f"step {row['step']}: {k} = {got[k]!r} in the event file, {want[k]!r} in metrics.jsonl")

    # What TensorBoard shows.
    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    missing = [t for t in REQUIRED if t not in tags]
    if missing:
        fail(f"EventAccumulator has no scalars {missing} (has {sorted(tags)})")
    for tag in REQUIRED:
        want = [(row["step"], f32(row[tag])) for row in rows if tag in row]
        got = [(s.step, s.value) for s in acc.Scalars(tag)]
        if len(got) != len(want) or not all(a[0] == b[0] and same(a[1], b[1]) for a, b in zip(got, want)):
            fail(f"{tag}: EventAccumulator {got} != metrics.jsonl {want}")
    evals = [s.step for s in acc.Scalars("eval_loss")]
    if evals != [3, 6]:
        fail(f"eval_loss at steps {evals}, expected [3, 6]")
    print(f"PASS: {name}: {len(scalars)} steps, {len(tags)} scalar tags equal to metrics.jsonl in float32; "
          f"loss {[round(s.value, 4) for s in acc.Scalars('loss')]}")


if __name__ == "__main__":
    main()
