#!/usr/bin/env python3
"""Document boundaries in the samples: `trident data batches` against megatron-core's GPTDataset
with reset_position_ids, reset_attention_mask and eod_mask_loss, the CTest test MegatronDocuments.

megatron-core's IndexedDatasetBuilder writes three datasets of documents of random byte tokens
0..254 (0 to 90 of them), each ended by the end-of-document token 255 (megatron-core's
NullTokenizer(255): its eod is 255), so a sample of 32 or 64 tokens holds several documents, a
document longer than the sample, an eod on the sample's last input, or none at all.
megatron-core's BlendedMegatronDatasetBuilder builds the train split (a BlendedDataset of the three,
weights 0.5, 0.3, 0.2; and the first alone, a GPTDataset) with the flags given; `trident data
batches` with data.order = "megatron", data.eod_token = 255 and the same flags prints every global
batch. Sample p of the run (step p // G, place p % G) must hold megatron-core's item p: tokens,
labels, position_ids, loss_mask, and its attention_mask (1, L, L, True = masked) must be the mask
that Trident's document boundaries (cu_seqlens) give: position j attends to j' iff j' <= j and
both lie in one document. Every flag combination of the three is checked on the blend.
"""

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from trident_data import megatron_core_train_samples, reference_args  # noqa: E402

from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder  # noqa: E402

G = 16  # configs/gpt-tiny.toml's global batch
SPLIT = "100,0,0"
EOD = 255
KEYS = ("reset_position_ids", "reset_attention_mask", "eod_mask_loss")


def fail(msg):
    raise SystemExit("FAIL: " + msg)


def write_dataset(prefix, rng, docs):
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for _ in range(docs):
        doc = rng.integers(0, EOD, size=int(rng.integers(0, 91))).tolist() + [EOD]
        builder.add_item(torch.tensor(doc, dtype=torch.int64))
        builder.end_document()
    builder.finalize(prefix + ".idx")


def mask_of(cu, seq_len):
    """megatron-core's attention mask (True = masked) from document boundaries."""
    doc = np.zeros(seq_len, dtype=np.int64)
    for k in range(len(cu) - 1):
        doc[cu[k]:cu[k + 1]] = k
    j = np.arange(seq_len)
    allowed = (j[None, :] <= j[:, None]) & (doc[None, :] == doc[:, None])
    return ~allowed


def trident_batches(args, sets, steps):
    cmd = [args.trident, "data", "batches", "--config", os.path.join(args.source_dir, "configs", "gpt-tiny.toml"),
           "--set", "data.source=file", "--set", "data.format=megatron", "--set", f"data.split={SPLIT}",
           "--set", f"data.eod_token={EOD}", "--steps", str(steps)]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} failed: {r.stderr.decode()}")
    return [json.loads(line) for line in r.stdout.decode().splitlines()]


def check_sample(name, p, b, j, item, seq_len):
    mine = {k: b[k][j] for k in ("tokens", "labels", "position_ids", "loss_mask")}
    theirs = {"tokens": item["tokens"].tolist(), "labels": item["labels"].tolist(),
              "position_ids": item["position_ids"].tolist(), "loss_mask": [int(v) for v in item["loss_mask"]]}
    if any(v != 0.0 and v != 1.0 for v in item["loss_mask"].tolist()):
        fail(f"{name}: megatron-core's loss mask of sample {p} is not 0/1")
    for k in mine:
        if mine[k] != theirs[k]:
            fail(f"{name}: sample {p} (step {b['step']}, place {j}): {k} differs from megatron-core's\n"
                 f"  trident       {mine[k]}\n  megatron-core {theirs[k]}\n  tokens        {mine['tokens']}")
    cu = b["cu_seqlens"][j]
    if cu[0] != 0 or cu[-1] != seq_len or any(x >= y for x, y in zip(cu, cu[1:])):
        fail(f"{name}: sample {p}: cu_seqlens {cu} are not increasing from 0 to {seq_len}")
    if not np.array_equal(mask_of(cu, seq_len), item["attention_mask"][0].numpy()):
        fail(f"{name}: sample {p}: the attention mask of cu_seqlens {cu} differs from megatron-core's\n"
             f"  tokens {mine['tokens']}")
    return len(cu) - 1


def check_case(args, prefixes, weights, flags, seed, seq_len, steps):
    name = f"{'blend' if weights else 'single'} {dict(zip(KEYS, flags))} seed {seed} seq_len {seq_len}"
    ref = megatron_core_train_samples(prefixes, weights, SPLIT, seq_len, seed, steps * G, EOD, documents=flags)
    sets = [f"training.seed={seed}", f"model.seq_len={seq_len}", f"training.steps={steps}"]
    sets += [f"data.{k}={'true' if f else 'false'}" for k, f in zip(KEYS, flags)]
    if weights:
        sets.append("data.paths=[" + ", ".join(f'[{w!r}, "{p}"]' for w, p in zip(weights, prefixes)) + "]")
    else:
        sets.append(f"data.path={prefixes[0]}")
    lines = trident_batches(args, sets, steps)
    if [b["step"] for b in lines] != list(range(1, steps + 1)):
        fail(f"{name}: steps {[b['step'] for b in lines]}")
    docs, masked = [], 0
    for b in lines:
        for key in ("tokens", "labels", "position_ids", "loss_mask", "cu_seqlens"):
            if len(b.get(key, [])) != G:
                fail(f"{name}: step {b['step']} has {len(b.get(key, []))} samples of {key}, expected {G}")
        for j in range(G):
            p = (b["step"] - 1) * G + j
            docs.append(check_sample(name, p, b, j, ref[p], seq_len))
            masked += b["loss_mask"][j].count(0)
    return name, min(docs), max(docs), masked


def main():
    args = reference_args()
    rng = np.random.default_rng(5)
    prefixes = []
    for i, docs in enumerate((70, 50, 40)):
        prefix = os.path.join(args.work, f"ds{i}", "corpus")
        os.makedirs(os.path.dirname(prefix))
        write_dataset(prefix, rng, docs)
        prefixes.append(prefix)
    seen = []
    for flags in itertools.product((False, True), repeat=3):
        if any(flags):
            seen.append(check_case(args, prefixes, [0.5, 0.3, 0.2], flags, 1234, 32, 12))
    seen.append(check_case(args, prefixes, [0.5, 0.3, 0.2], (True, True, True), 7, 64, 8))
    seen.append(check_case(args, prefixes[:1], None, (True, True, True), 3, 32, 10))
    for name, lo, hi, masked in seen:
        print(f"ok: {name}: {lo} to {hi} documents a sample, {masked} loss positions masked")
    # Every combination must have met samples of one document and of several.
    if min(s[1] for s in seen) != 1 or max(s[2] for s in seen) < 3:
        fail("the datasets gave no sample of one document or none of three or more")
    print("MegatronDocuments: ok")


if __name__ == "__main__":
    main()
