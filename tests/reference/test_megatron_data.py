#!/usr/bin/env python3
"""Megatron indexed datasets written by megatron-core, read by Trident: the CTest test
MegatronIndexedData.

megatron-core's IndexedDatasetBuilder writes 40 documents of random byte tokens (lengths
0 to 300, one or two sequences each) as PREFIX.bin + PREFIX.idx, once with uint16 and once
with int32 tokens; megatron-core's own IndexedDataset reads them back (so the files are
what Megatron trains on). Trident trains gpt-tiny 4 steps on each with
data.format = "megatron", and once on a Trident token file holding the concatenation of
the same sequences in order (trident_data.write_token_file): the per-step losses and
gradient norms of the three runs are bit-identical, so Trident read the same tokens
(framework/data/README.md's sample order over one stream). Then a truncated PREFIX.bin
and a corrupt PREFIX.idx make `trident train` fail with an error naming the file.
"""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from trident_data import reference_args, write_token_file  # noqa: E402

warnings.filterwarnings("ignore")  # megatron-core warns that Transformer Engine and Apex are absent
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder  # noqa: E402


def fail(msg):
    raise SystemExit("FAIL: " + msg)


def write_megatron(prefix, docs, dtype):
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    for doc in docs:
        for seq in doc:
            builder.add_item(torch.tensor(seq, dtype=torch.int64))
        builder.end_document()
    builder.finalize(prefix + ".idx")


def train(args, work, sets):
    run_dir = os.path.join(work, "run")
    cmd = [args.trident, "train", "--config", os.path.join(args.source_dir, "configs", "gpt-tiny.toml"),
           "--set", "training.steps=4", "--set", "training.threads=1", "--set", "training.peak_tflops=1",
           "--set", "logging.progress=false", "--set", "data.source=file", "--set", f"logging.dir={run_dir}"]
    for s in sets:
        cmd += ["--set", s]
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = r.stdout.decode(errors="replace")
    if r.returncode != 0:
        return None, out
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()], out


def main():
    args = reference_args()

    rng = np.random.default_rng(7)
    docs = []
    for _ in range(40):
        n_seq = int(rng.integers(1, 3))
        docs.append([rng.integers(0, 256, size=int(rng.integers(0, 301))).tolist() for _ in range(n_seq)])
    stream = np.array([t for doc in docs for seq in doc for t in seq], dtype=np.int64)

    runs = {}
    for name, dtype in (("uint16", np.uint16), ("int32", np.int32)):
        prefix = os.path.join(args.work, name, "corpus")
        os.makedirs(os.path.dirname(prefix))
        write_megatron(prefix, docs, dtype)
        ds = IndexedDataset(prefix)  # megatron-core's reader agrees with what was written
        seqs = [seq for doc in docs for seq in doc]
        if len(ds) != len(seqs) or any(ds[i].tolist() != seqs[i] for i in range(len(seqs))):
            fail(f"megatron-core does not read back its own {name} dataset")
        if ds.index.dtype != dtype or len(ds.document_indices) != len(docs) + 1:
            fail(f"{name}: dtype {ds.index.dtype}, {len(ds.document_indices)} document indices")
        rows, out = train(args, os.path.join(args.work, name), ["data.format=megatron", f"data.path={prefix}"])
        if rows is None:
            sys.stdout.write(out)
            fail(f"trident train on the {name} Megatron dataset failed")
        runs[name] = rows

    tok_prefix = os.path.join(args.work, "trident", "corpus")
    os.makedirs(os.path.dirname(tok_prefix))
    write_token_file(tok_prefix + ".train.bin", stream, 256, "byte")
    rows, out = train(args, os.path.join(args.work, "trident"), [f"data.path={tok_prefix}"])
    if rows is None:
        sys.stdout.write(out)
        fail("trident train on the Trident token file failed")
    runs["trident"] = rows

    key = [(r["step"], r["loss"], r["grad_norm"]) for r in runs["trident"]]
    if len(key) != 4:
        fail(f"the token-file run logged {len(key)} steps")
    for name in ("uint16", "int32"):
        got = [(r["step"], r["loss"], r["grad_norm"]) for r in runs[name]]
        if got != key:
            fail(f"{name} Megatron dataset: (step, loss, grad norm) {got} != the token file's {key}")

    # Corrupt files: errors that name the file and what is wrong.
    prefix = os.path.join(args.work, "uint16", "corpus")
    with open(prefix + ".bin", "r+b") as f:
        f.truncate(os.path.getsize(prefix + ".bin") - 2)
    _, out = train(args, os.path.join(args.work, "truncated"), ["data.format=megatron", f"data.path={prefix}"])
    if f"Megatron data file {prefix}.bin has" not in out or "truncated" not in out:
        sys.stdout.write(out)
        fail("a truncated .bin is not an error naming it")
    with open(prefix + ".idx", "r+b") as f:
        f.write(b"XMIDIDX")
    _, out = train(args, os.path.join(args.work, "corrupt"), ["data.format=megatron", f"data.path={prefix}"])
    if f"Megatron index {prefix}.idx has a wrong magic" not in out:
        sys.stdout.write(out)
        fail("a corrupt .idx is not an error naming it")
    print(f"PASS: {len(docs)} documents, {stream.size} tokens written by megatron-core (uint16 and int32): "
          f"4 steps bit-identical to the token file's, losses {[r['loss'] for r in runs['trident']]}")


if __name__ == "__main__":
    main()
