#!/usr/bin/env python3
"""Packed documents against a reference outside Trident: the CTest test ReferenceDocuments.

The pinned text's bytes (text/*.txt, NOTE [pinned text]) with the space (32) as the
end-of-document token: every word, with the space that ends it, is a document, 5.7 to a sample
of 32 tokens on average; a sample without a space is one document, part of one longer than the
sample. Each case trains 20 steps with `trident train` under the four settings of
data.reset_attention_mask x data.reset_position_ids ("both", "attention", "positions",
"none"), and reference_train.py trains the same 20 steps from the same step-0 weights with
transformers' model, each document run through it on its own (NOTE [reference documents]):
  gpt      gpt-tiny (learned positions), its step-0 weights exported with hf-gpt2;
  llama    a LlamaForCausalLM transformers created (test_hf_llama.py's "gqa": rotary, GQA), --init-from;
  mixtral  a MixtralForCausalLM transformers created (test_hf_moe.py's, 4 experts top-2), --init-from.
Checked, per case:
  a. each setting against the reference of the same setting under the training contract
     (README.md: |Trident - fp64| <= K = 4 times torch fp32's own error, within 1e-5 of torch fp32
     on every step that is not ill-conditioned, clipping on the same steps); "both" also in one
     cheap layout a case: gpt pp2 under zb-v (NCCL rules), llama tp2 + SP, mixtral dp2 x ep2;
  b. the per-document reference within 1e-5 of the whole sample under megatron-core's mask as a
     4D mask (--documents mask: 5e-8 gpt, 2.5e-8 llama, 2.8e-8 mixtral), and far (> 1e-3) from
     the undivided run (3.6e-2, 0.31, 0.35): the documents matter;
  c. what restarting the positions does: the references of "both" and "attention" (document
     masks, positions restarting or not) and of "positions" and "none" (no masks) compared.
     Learned positions (GPT) restart visibly in both pairs (0.11 and 4.3e-2; > 1e-3 checked).
     Rotary attention is relative: inside a document a score depends on the two positions'
     difference only, so under document masks restarting them changes rounding and nothing else
     (llama 3.8e-8, mixtral 3.2e-8; < 1e-5 checked), and no test can see a rotary run that forgets
     to restart when it masks; without masks a token's distance to the documents before it
     changes, visibly (3.5e-3, 3.3e-3; > 1e-3 checked). The rotary restart is therefore held by
     the "positions" setting in a, not by "both".
(Figures: largest relative difference of loss or gradient norm over the 20 steps, 2026-12-08.)
It prints the per-step tables and the distances, and writes them to WORK/results.json.
"""

import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from reference_train import reference  # noqa: E402
from test_hf_llama import made_model as made_llama  # noqa: E402
from test_hf_moe import FAMILIES, made_model as made_moe  # noqa: E402
from test_reference_training import check_against_reference, metrics, run, text_files  # noqa: E402
from trident_data import TokenFile, reference_args, write_token_file  # noqa: E402

EOD = 32  # the space
SEQ = 32
STEPS = 20
RTOL = 1e-5
VISIBLE = 1e-3  # a difference that is the model's, not rounding's
SETTINGS = {"both": ["data.reset_attention_mask=true", "data.reset_position_ids=true"],
            "attention": ["data.reset_attention_mask=true"],
            "positions": ["data.reset_position_ids=true"],
            "none": []}
COMMON = ["training.threads=1", f"training.steps={STEPS}", "model.dropout=0", "data.source=file",
          "training.eval_interval=0", "training.peak_tflops=1", "logging.log_interval=1", f"model.seq_len={SEQ}",
          f"data.eod_token={EOD}"]
# The made models' sizes (test_hf_llama.py, test_hf_moe.py); grad_clip: active on some steps, not all
# (the contract's clipping check), measured on these runs' gradient norms.
CASES = {
    "gpt": dict(config="gpt-tiny", vocab=256, clip=2.0, sets=["model.vocab_pad_multiple=96"]),
    "llama": dict(config="llama-tiny", vocab=259, clip=1.6,
                  sets=["model.layers=3", "model.hidden=48", "model.heads=6", "model.kv_heads=2", "model.ffn_hidden=100",
                        "model.vocab_size=259", "model.layernorm_eps=1e-6", "model.rope_theta=500000.0"]),
    "mixtral": dict(config="mixtral-tiny", vocab=256, clip=1.5,
                    sets=["model.layers=2", "model.hidden=48", "model.heads=6", "model.kv_heads=2", "model.experts=4",
                          "model.vocab_size=256", "model.layernorm_eps=1e-6", "model.rope_theta=500000.0"]
                    + FAMILIES["mixtral"]["sets"]),
}
# One cheap layout a case, under "both" (the regression matrix holds every layout to Trident's one process).
LAYOUTS = {"gpt": [("pp2_zb-v", 2, ["parallel.pp=2", "schedule.kind=zb-v", "parallel.backend=nccl-rules"])],
           "llama": [("tp2_sp", 2, ["parallel.tp=2", "parallel.sequence_parallel=true"])],
           "mixtral": [("dp2_ep2", 2, ["parallel.dp=2", "parallel.ep=2"])]}


def distance(a, b):
    """The largest relative difference of two runs' losses and gradient norms over the steps."""
    return max(abs(x[k] - y[k]) / abs(y[k]) for x, y in zip(a, b) for k in ("loss", "grad_norm"))


def document_stats(path, seq):
    """Documents per sample over every window of the token file (NOTE [sample documents]: an eod at
    input position i < seq - 1 ends a document)."""
    tokens = TokenFile(path).tokens
    n = (len(tokens) - 1) // seq
    counts = np.array([1 + int((tokens[i * seq:i * seq + seq - 1] == EOD).sum()) for i in range(n)])
    return {"samples": n, "documents_per_sample": float(counts.mean()), "one_document": int((counts == 1).sum()),
            "most": int(counts.max())}


def prepare(args, work):
    """The byte token files of the pinned text: vocabulary 256 (trident data prepare) and 259 (the
    made Llama's, the same ids)."""
    prefix = os.path.join(work, "text-bytes")
    run([args.trident, "data", "prepare", "--tokenizer", "byte", "--input", *text_files(args.source_dir),
         "--output", prefix])
    tokens = TokenFile(prefix + ".train.bin").tokens
    write_token_file(os.path.join(work, "text-bytes-259.train.bin"), tokens, 259, "byte")
    return {256: prefix, 259: os.path.join(work, "text-bytes-259")}


def step0_weights(args, work, name, case, sets):
    """The directory the reference loads: gpt-tiny's step-0 checkpoint exported (the run starts from
    it: ReferenceTrainingTiny), or the model transformers made (model.init_from)."""
    d = os.path.join(work, name + "-hf0")
    if name == "gpt":
        ck0 = os.path.join(work, "gpt-ckpt0")
        config = os.path.join(args.source_dir, "configs", case["config"] + ".toml")
        run([args.trident, "checkpoint", "init", "--config", config, *[a for s in sets for a in ("--set", s)],
             "--out", ck0])
        run([args.trident, "export", "--checkpoint", ck0, "--format", "hf-gpt2", "--out", d])
        return d, []
    (made_llama("gqa") if name == "llama" else made_moe("mixtral")).save_pretrained(d)
    return d, [f"model.init_from={d}"]


def train_case(args, work, name, case, data):
    """Trident's and the reference's runs of one case: {setting: (Trident's, reference fp32's; its fp64
    run is beside it, + "-fp64")}, the reference's --documents mask run of "both", and the layouts'."""
    config = os.path.join(args.source_dir, "configs", case["config"] + ".toml")
    sets = COMMON + case["sets"] + [f"data.path={data[case['vocab']]}", f"training.grad_clip={case['clip']}"]
    hf0, init = step0_weights(args, work, name, case, sets)
    sets += init
    runs = {}
    for setting, keys in SETTINGS.items():
        tri, ref = (os.path.join(work, f"{name}-{setting}-{who}") for who in ("trident", "ref"))
        run([args.trident, "train", "--config", config, *[a for s in sets + keys for a in ("--set", s)],
             "--set", f"logging.dir={tri}"])
        reference("--config", os.path.join(tri, "config.toml"), "--hf-dir", hf0, "--out", ref,
                  "--also", f"float64:eager:{ref}-fp64")
        runs[setting] = (tri, ref)
    mask = os.path.join(work, f"{name}-both-ref-mask")
    reference("--config", os.path.join(runs["both"][0], "config.toml"), "--hf-dir", hf0, "--out", mask,
              "--documents", "mask")
    layouts = {}
    for layout, nproc, par in LAYOUTS.get(name, []):
        layouts[layout] = os.path.join(work, f"{name}-both-{layout}")
        run([args.trident, "launch", "--nproc-per-node", str(nproc), "--master-port", "0", "--", args.trident, "train",
             "--config", config, *[a for s in sets + SETTINGS["both"] + par for a in ("--set", s)],
             "--set", f"logging.dir={layouts[layout]}"])
    return runs, mask, layouts


def check_case(name, case, runs, mask, layouts, check):
    """a-c of the docstring for one case; returns its figures."""
    ref = {s: metrics(r) for s, (_, r) in runs.items()}
    out = {}
    both = [(f"both, {label}", tri) for label, tri in [("one process", runs["both"][0])] + list(layouts.items())]
    for label, tri in both + [(s, runs[s][0]) for s in SETTINGS if s != "both"]:
        setting = label.split(",")[0]
        failures, ill, _, worst = check_against_reference(f"{name} {label}", metrics(tri), ref[setting],
                                                          metrics(runs[setting][1] + "-fp64"), case["clip"], STEPS)
        for f in failures:
            check(False, f)
        check(not failures, f"{name} {label}: the contract against the reference: largest ratio loss "
                            f"{worst['loss']:.2f}, grad norm {worst['grad_norm']:.2f}; {len(ill)} ill-conditioned")
        out[label] = dict(worst, ill_conditioned=ill)
    for layout, tri in layouts.items():
        if layout.startswith("pp"):  # a pipeline changes no arithmetic
            same = [(a["loss"], a["grad_norm"]) for a in metrics(tri)] == [(b["loss"], b["grad_norm"])
                                                                          for b in metrics(runs["both"][0])]
            check(same, f"{name} {layout}: the losses and norms of one process, bit for bit")
    d = distance(metrics(mask), ref["both"])
    check(d <= RTOL, f"{name}: the per-document reference and the 4D-mask one agree: {d:.2e}")
    d_none = distance(ref["both"], ref["none"])
    check(d_none > VISIBLE, f"{name}: documents change the training: per-document vs undivided {d_none:.2e}")
    rotary = name != "gpt"
    d_masked = distance(ref["both"], ref["attention"])
    check(d_masked < RTOL if rotary else d_masked > VISIBLE,
          f"{name}: with document masks, restarting positions moves the reference by {d_masked:.2e} "
          f"({'rotary: relative, rounding only' if rotary else 'learned positions: visible'})")
    d_open = distance(ref["positions"], ref["none"])
    check(d_open > VISIBLE, f"{name}: without masks, restarting positions moves the reference by {d_open:.2e}")
    out.update(mask_vs_split=d, both_vs_none=d_none, both_vs_attention=d_masked, positions_vs_none=d_open)
    return out


def main():
    args = reference_args()
    work = args.work
    torch.set_num_threads(1)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    data = prepare(args, work)
    stats = document_stats(data[256] + ".train.bin", SEQ)
    check(stats["documents_per_sample"] > 2 and stats["one_document"] > 0,
          f"the samples hold {stats['documents_per_sample']:.2f} documents on average (at most {stats['most']}), "
          f"{stats['one_document']} of {stats['samples']} are one document")
    results = {"documents": stats}
    for name, case in CASES.items():
        runs, mask, layouts = train_case(args, work, name, case, data)
        results[name] = check_case(name, case, runs, mask, layouts, check)
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS: packed documents against the per-document reference (GPT, Llama, Mixtral)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
