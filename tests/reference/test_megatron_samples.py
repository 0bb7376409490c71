#!/usr/bin/env python3
"""Megatron's sample order: `trident data batches` against megatron-core's own datasets, the
CTest test MegatronSamples.

megatron-core's IndexedDatasetBuilder writes three datasets of random byte tokens (documents
of 0 to 120 tokens, one sequence each). For each case megatron-core's
BlendedMegatronDatasetBuilder with a GPTDatasetConfig (NullTokenizer) builds the train split
Megatron's trainer asks for (training.steps x global batch samples), with data.split
"90,8,2": a GPTDataset over one dataset, and a BlendedDataset over the three (weights 0.7, 0.2,
0.1: asked for its share plus megatron-core's surplus each, blended by
build_blending_indices). `trident data batches` with data.order = "megatron" prints every
global batch; sample p of the run (step p // G, place p % G) must hold exactly megatron-core's
item p, tokens and labels, for two seeds and two sequence lengths. The cases span one epoch,
several epochs with the last one apart (< 80 % used) and several epochs without, checked
from the document index megatron-core built, so each path of the order is compared.

`trident data batches` serves any data: on a Trident token file (data.order "stream") it
prints the windows trident_data.Samples (datasets/README.md's stream order written in
Python) puts in each global batch.

data.cache_dir: megatron-core writes its index caches for the single dataset (path_to_cache);
its shuffle index is then reversed in place and megatron-core reads the changed cache back;
`trident data batches` with data.cache_dir equals that, and so differs from the order it builds
itself: it read the cache. A cache of another seed is not taken.

data.cache_dir written: `trident data batches` with an empty data.cache_dir writes the train
split's cache; megatron-core building the same GPTDataset into a second empty folder
(BlendedMegatronDatasetBuilder, the whole split matrix of "90,8,2" as Megatron's trainer has it)
writes the same four train files, names and bytes. Given Trident's folder, megatron-core's
samples equal Trident's, and after the first 12 x 16 entries of Trident's shuffle index are
reversed (still a permutation) megatron-core's samples follow: it loaded Trident's files. A
blend (data.split "100,0,0", which leaves megatron-core's build the train split alone) writes
each dataset's cache, byte-equal to megatron-core's. A `trident train` with evaluation writes
the valid split's cache too, byte-equal to
megatron-core's for the valid samples Megatron's trainer asks (the evaluations x
eval_batches x G), and megatron-core loads both.

Bad inputs: data.order = "megatron" on synthetic data, --steps beyond training.steps, are
errors that say so.
"""

import json
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from trident_data import Samples, megatron_core_train_samples, reference_args, write_token_file  # noqa: E402

from megatron.core.datasets.blended_dataset import BlendedDataset  # noqa: E402
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder  # noqa: E402

G = 16  # configs/gpt-tiny.toml's global batch
SPLIT = "90,8,2"


def fail(msg):
    raise SystemExit("FAIL: " + msg)


def write_dataset(prefix, rng, docs):
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for _ in range(docs):
        builder.add_item(torch.tensor(rng.integers(0, 256, size=int(rng.integers(0, 121))), dtype=torch.int64))
        builder.end_document()
    builder.finalize(prefix + ".idx")


def trident_batches(args, sets, steps):
    cmd = [args.trident, "data", "batches", "--config", os.path.join(args.source_dir, "configs", "gpt-tiny.toml"),
           "--set", "data.source=file", "--set", "data.format=megatron", "--set", f"data.split={SPLIT}",
           "--steps", str(steps)]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return r.returncode, r.stdout.decode(), r.stderr.decode(), cmd


def epochs_of(ds):
    """(epochs, last epoch apart) of a GPTDataset, read from what megatron-core built."""
    n = len(ds.indices)
    epochs = len(ds.document_index) // n
    # Apart: the last n entries are the split's documents, shuffled on their own (one shuffle
    # of all epochs puts them there with a vanishing probability).
    apart = epochs > 1 and sorted(ds.document_index[-n:].tolist()) == ds.indices.tolist()
    return epochs, bool(apart)


def check_case(args, prefixes, weights, seed, seq_len, steps):
    name = f"{'blend' if weights else 'single'} seed {seed} seq_len {seq_len} steps {steps}"
    ref = megatron_core_train_samples(prefixes, weights, SPLIT, seq_len, seed, steps * G, 256)
    sets = [f"training.seed={seed}", f"model.seq_len={seq_len}", f"training.steps={steps}"]
    if weights:
        sets.append("data.paths=[" + ", ".join(f'[{w!r}, "{p}"]' for w, p in zip(weights, prefixes)) + "]")
    else:
        sets.append(f"data.path={prefixes[0]}")
    rc, out, err, cmd = trident_batches(args, sets, steps)
    if rc != 0:
        fail(f"{name}: {' '.join(cmd)} failed: {err}")
    lines = [json.loads(line) for line in out.splitlines()]
    if [b["step"] for b in lines] != list(range(1, steps + 1)):
        fail(f"{name}: steps {[b['step'] for b in lines]}")
    for b in lines:
        if len(b["tokens"]) != G or len(b["labels"]) != G:
            fail(f"{name}: step {b['step']} has {len(b['tokens'])} samples, expected {G}")
        for j, (tok, lab) in enumerate(zip(b["tokens"], b["labels"])):
            p = (b["step"] - 1) * G + j
            item = ref[p]
            if tok != item["tokens"].tolist() or lab != item["labels"].tolist():
                where = "" if not isinstance(ref, BlendedDataset) else \
                    f" (megatron-core: dataset {ref.dataset_index[p]}, its sample {ref.dataset_sample_index[p]})"
                fail(f"{name}: sample {p} (step {b['step']}, place {j}) differs from megatron-core's{where}:\n"
                     f"  trident tokens {tok}\n  megatron-core  {item['tokens'].tolist()}")
    parts = ref.datasets if isinstance(ref, BlendedDataset) else [ref]
    return name, [epochs_of(d) for d in parts]


def megatron_core_splits(prefix, seq_len, seed, sizes, cache):
    """megatron-core's train, valid and test GPTDatasets of one dataset, the split matrix whole
    (as Megatron's trainer builds them, each split cached in `cache`)."""
    import warnings
    warnings.filterwarnings("ignore")
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer
    config = GPTDatasetConfig(random_seed=seed, sequence_length=seq_len, blend=([prefix], None), split=SPLIT,
                              tokenizer=NullTokenizer(256), reset_position_ids=False, reset_attention_mask=False,
                              eod_mask_loss=False, path_to_cache=cache)
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()


def cache_files(folder, split):
    """{name: bytes} of the `split` caches in folder."""
    return {f: open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder))
            if f"-GPTDataset-{split}-" in f}


def check_written_caches(args, prefixes):
    prefix = prefixes[0]
    steps, n = 12, 12 * G
    # `trident data batches` writes the train cache into an empty folder.
    mine = os.path.join(args.work, "written")
    os.makedirs(mine)
    sets = [f"data.path={prefix}", f"data.cache_dir={mine}", "training.seed=1234", f"training.steps={steps}"]
    rc, out, err, _ = trident_batches(args, sets, steps)
    if rc != 0 or f"the indices of 0 of 1 datasets read from {mine}, 1 written there" not in err:
        fail(f"data.cache_dir written: rc {rc}, {err}")
    trident = [t for line in out.splitlines() for t in json.loads(line)["tokens"]]
    written = cache_files(mine, "train")
    if sorted(f.split("-", 1)[1] for f in written) != [f"GPTDataset-train-{a}" for a in (
            "description.txt", "document_index.npy", "sample_index.npy", "shuffle_index.npy")]:
        fail(f"data.cache_dir written: files {sorted(os.listdir(mine))}")
    # megatron-core's own, built into another empty folder: the same names and bytes.
    theirs = os.path.join(args.work, "megatron-core-cache")
    megatron_core_splits(prefix, 32, 1234, [n, 32, 16], theirs)
    if written != cache_files(theirs, "train"):
        fail("data.cache_dir written: Trident's train cache differs from megatron-core's:\n  "
             + "\n  ".join(f"{f}: {len(b)} bytes, megatron-core's {len(cache_files(theirs, 'train').get(f, b''))}"
                          for f, b in written.items()))
    # megatron-core given Trident's folder: its samples are Trident's ...
    train, _, _ = megatron_core_splits(prefix, 32, 1234, [n, 32, 16], mine)
    if [train[p]["tokens"].tolist() for p in range(n)] != trident:
        fail("data.cache_dir written: megatron-core's samples from Trident's cache differ from Trident's")
    # ... and follow a change to Trident's shuffle index: it loaded the files, it did not rebuild.
    [shuffle] = [os.path.join(mine, f) for f in written if f.endswith("-shuffle_index.npy")]
    index = np.load(shuffle)
    index[:n] = index[:n][::-1].copy()
    np.save(shuffle, index)
    train, _, _ = megatron_core_splits(prefix, 32, 1234, [n, 32, 16], mine)
    if [train[p]["tokens"].tolist() for p in range(n)] != trident[::-1]:
        fail("data.cache_dir written: megatron-core did not load Trident's (changed) shuffle index")

    # A blend: each dataset's cache, asked for its share plus the surplus. data.split "100,0,0"
    # gives megatron-core's trainer no valid or test split to build, so its build is the
    # train split alone, with the split matrix whole.
    blend = os.path.join(args.work, "written-blend")
    os.makedirs(blend)
    weights = [0.7, 0.2, 0.1]
    sets = ["data.split=100,0,0", "data.paths=[" + ", ".join(f'[{w!r}, "{p}"]' for w, p in zip(weights, prefixes))
            + "]", f"data.cache_dir={blend}", "training.seed=7", f"training.steps={steps}"]
    rc, out, err, _ = trident_batches(args, sets, steps)
    if rc != 0 or f"the indices of 0 of 3 datasets read from {blend}, 3 written there" not in err:
        fail(f"data.cache_dir written, a blend: rc {rc}, {err}")
    # BlendedDataset reads torch.distributed's rank when it has a cache folder, as in Megatron's
    # trainer: a process group of one.
    torch.distributed.init_process_group("gloo", init_method="file://" + os.path.join(args.work, "pg"), rank=0,
                                         world_size=1)
    theirs = os.path.join(args.work, "megatron-core-cache-blend")
    megatron_core_train_samples(prefixes, weights, "100,0,0", 32, 7, n, 256, cache=theirs)
    if len(cache_files(blend, "train")) != 12 or cache_files(blend, "train") != cache_files(theirs, "train"):
        fail(f"data.cache_dir written, a blend: Trident's GPTDataset caches differ from megatron-core's: "
             f"{sorted(cache_files(blend, 'train'))} vs {sorted(cache_files(theirs, 'train'))}")
    ref = megatron_core_train_samples(prefixes, weights, "100,0,0", 32, 7, n, 256, cache=blend)
    if [ref[p]["tokens"].tolist() for p in range(n)] != [t for line in out.splitlines()
                                                           for t in json.loads(line)["tokens"]]:
        fail("data.cache_dir written, a blend: megatron-core's samples from Trident's caches differ from Trident's")
    torch.distributed.destroy_process_group()

    # A training run with evaluation writes the valid split's cache as well.
    both = os.path.join(args.work, "written-train")
    os.makedirs(both)
    steps, interval, batches = 4, 2, 1
    valid = (steps // interval + 1) * batches * G  # what Megatron's trainer asks of the valid split
    cmd = [args.trident, "train", "--config", os.path.join(args.source_dir, "configs", "gpt-tiny.toml"),
           "--set", "data.source=file", "--set", "data.format=megatron", "--set", f"data.split={SPLIT}",
           "--set", f"data.path={prefix}", "--set", f"data.cache_dir={both}", "--set", f"training.steps={steps}",
           "--set", f"training.eval_interval={interval}", "--set", f"training.eval_batches={batches}",
           "--set", f"logging.dir={os.path.join(args.work, 'run')}"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode != 0:
        fail(f"data.cache_dir written by trident train: {' '.join(cmd)} failed: {r.stderr.decode()}")
    theirs = os.path.join(args.work, "megatron-core-cache-train")
    megatron_core_splits(prefix, 32, 1234, [steps * G, valid, batches * G], theirs)
    for split in ("train", "valid"):
        if not cache_files(both, split) or cache_files(both, split) != cache_files(theirs, split):
            fail(f"data.cache_dir written by trident train: the {split} cache differs from megatron-core's: "
                 f"{sorted(cache_files(both, split))} vs {sorted(cache_files(theirs, split))}")
    if cache_files(both, "test"):
        fail("trident train wrote a test cache: it never builds the test split")
    # megatron-core loads both: with their shuffle indices reversed its samples follow.
    mc_train, mc_valid, _ = megatron_core_splits(prefix, 32, 1234, [steps * G, valid, batches * G], both)
    before = {"train": [mc_train[p]["tokens"].tolist() for p in range(len(mc_train))],
              "valid": [mc_valid[p]["tokens"].tolist() for p in range(len(mc_valid))]}
    for split in ("train", "valid"):
        [shuffle] = [os.path.join(both, f) for f in cache_files(both, split) if f.endswith("-shuffle_index.npy")]
        np.save(shuffle, np.load(shuffle)[::-1].copy())
    mc_train, mc_valid, _ = megatron_core_splits(prefix, 32, 1234, [steps * G, valid, batches * G], both)
    for split, ds in (("train", mc_train), ("valid", mc_valid)):
        if [ds[p]["tokens"].tolist() for p in range(len(ds))] != before[split][::-1]:
            fail(f"data.cache_dir written by trident train: megatron-core did not load Trident's {split} cache")


def main():
    args = reference_args()
    rng = np.random.default_rng(11)
    prefixes = []
    for i, docs in enumerate((60, 45, 30)):
        prefix = os.path.join(args.work, f"ds{i}", "corpus")
        os.makedirs(os.path.dirname(prefix))
        write_dataset(prefix, rng, docs)
        prefixes.append(prefix)

    seen = []
    for seed in (1234, 7):
        for seq_len, steps in ((32, 12), (16, 30)):
            seen.append(check_case(args, prefixes[:1], None, seed, seq_len, steps))
            seen.append(check_case(args, prefixes, [0.7, 0.2, 0.1], seed, seq_len, steps))
    # Every path of the order was compared: one epoch, the last epoch apart, several without.
    epochs = [e for _, parts in seen for e in parts]
    if not any(e == 1 for e, _ in epochs) or not any(e > 1 and not a for e, a in epochs):
        fail(f"the cases no longer span one epoch and several without the last apart: {seen}")
    if not any(a for _, a in epochs):
        fail(f"no case puts the last epoch apart: {seen}")

    # data.cache_dir: megatron-core's caches read.
    cache = os.path.join(args.work, "cache")
    megatron_core_train_samples(prefixes[:1], None, SPLIT, 32, 1234, 12 * G, 256, cache=cache)
    [shuffle] = [os.path.join(cache, f) for f in os.listdir(cache) if f.endswith("-GPTDataset-train-shuffle_index.npy")]
    np.save(shuffle, np.load(shuffle)[::-1].copy())
    changed = megatron_core_train_samples(prefixes[:1], None, SPLIT, 32, 1234, 12 * G, 256, cache=cache)
    for seed, expect_cached in ((1234, True), (7, False)):
        sets = [f"data.path={prefixes[0]}", f"data.cache_dir={cache}", f"training.seed={seed}", "training.steps=12"]
        rc, out, err, cmd = trident_batches(args, sets, 12)
        if rc != 0 or f"the indices of {int(expect_cached)} of 1 datasets read from {cache}" not in err:
            fail(f"data.cache_dir, seed {seed}: rc {rc}, {err}")
        if expect_cached:
            got = [t for line in out.splitlines() for t in json.loads(line)["tokens"]]
            if got != [changed[p]["tokens"].tolist() for p in range(12 * G)]:
                fail("data.cache_dir: trident data batches did not read megatron-core's (changed) cache")

    check_written_caches(args, prefixes)

    # The stream order on a Trident token file.
    stream = rng.integers(0, 256, size=5000)
    tok = os.path.join(args.work, "tok")
    write_token_file(tok + ".train.bin", stream.astype(np.int64), 256, "byte")
    r = subprocess.run([args.trident, "data", "batches", "--config",
                        os.path.join(args.source_dir, "configs", "gpt-tiny.toml"), "--set", "data.source=file",
                        "--set", f"data.path={tok}", "--set", "training.seed=5", "--steps", "12"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        fail(f"data batches on a token file: {r.stderr.decode()}")
    ref = Samples(stream.astype(np.int64), 32, 5)
    for b in (json.loads(line) for line in r.stdout.decode().splitlines()):
        want = [ref.window(i).tolist() for i in ref.global_batch(b["step"] - 1, G)]
        if b["tokens"] != [w[:-1] for w in want] or b["labels"] != [w[1:] for w in want]:
            fail(f"data batches on a token file: step {b['step']} differs from trident_data.Samples")

    # Bad inputs.
    rc, _, err, _ = trident_batches(args, [f"data.path={prefixes[0]}", "training.steps=3"], 4)
    if rc != 2 or "--steps 4: expected 1 .. training.steps = 3" not in err:
        fail(f"--steps beyond training.steps: rc {rc}, {err}")
    r = subprocess.run([args.trident, "data", "batches", "--config",
                        os.path.join(args.source_dir, "configs", "gpt-tiny.toml"), "--set", "data.order=megatron",
                        "--steps", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 2 or b'data.order = "megatron" needs data.format = "megatron"' not in r.stderr:
        fail(f"data.order = megatron on synthetic data: rc {r.returncode}, {r.stderr.decode()}")
    print("PASS: data.cache_dir: megatron-core's caches read, Trident's written byte-equal to megatron-core's "
          "(train; a blend's three; train and valid from trident train) and loaded by megatron-core")
    print(f"PASS: {len(seen)} cases, every sample equal to megatron-core's (tokens and labels): "
          + "; ".join(f"{n}: (epochs, last apart) {p}" for n, p in seen))


if __name__ == "__main__":
    main()
