#!/usr/bin/env python3
"""The Hugging Face round trip through Hugging Face's own code:
the CTest test HfRoundTrip.

Trident -> transformers: gpt-tiny (vocabulary 256 padded to 288) trained 100 steps on the
README files' bytes (enough that greedy continuations are not one repeated byte: " te te te",
with top-2 logit gaps of 0.04 and more, four orders above fp32's differences; 400 steps took
20 s more for a smallest gap of 0.056), saved, `trident export --format hf-gpt2`, then
GPT2LMHeadModel.from_pretrained on the export, and on a held-out text:
  a. the mean next-token loss of `trident eval` (from the checkpoint and from the export)
     equals transformers' over the same windows, within 1e-5 relative (eval prints 6 decimals),
     and the logits `trident eval --logits` writes for the first window equal transformers'
     within 1e-5 (largest difference relative to the largest logit);
  b. the full-precision check of the logits' use: one `trident train` step from
     model.init_from = the export on the held-out token file, against transformers' forward and
     backward on the same micro-batches (reference_train.py --steps 1): loss and gradient norm
     within 1e-5 relative: what the logits determine in training, the loss of every
     micro-batch (their log-softmax at the targets) and, through the backward, the gradient
     norm; and through (c), their argmax;
  c. greedy transformers generate() gives the same tokens as `trident generate --temperature 0`
     (from the export and from the checkpoint); the smallest top-1/top-2 logit gap on the way
     is printed, so a tie would be visible.
transformers -> Trident: a GPT2LMHeadModel that transformers creates (3 layers, width 48,
6 heads, MLP 100, vocabulary 259: padded by Trident to 264, n_positions 40 > seq_len 24),
every parameter perturbed so biases and LayerNorms are not at their init, saved with
save_pretrained:
  d. `trident eval --init-from` gives transformers' loss on the held-out text (1e-5) and its
     logits (1e-5);
  e. `trident train --set model.init_from=...` for 5 steps on a token file with all 259 ids
     equals reference_train.py from the same directory (trident compare --rtol 1e-5).
"""

import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_reference_training import metrics, text_files  # noqa: E402
from reference_train import reference  # noqa: E402
from trident_data import reference_args, write_token_file  # noqa: E402

RTOL = 1e-5
PRINT_ABS = 5e-7  # `trident eval` prints the loss with 6 decimals

# Text that appears in no file of the repository (so it is held out from training).
HELD_OUT = (
    "Outside the window the orchard was already turning, and the old surveyor counted the rows twice "
    "before he wrote anything down. Forty-one pear trees, a stone wall that leaned to the east, a gate "
    "that nobody had oiled since the spring of the flood. He measured the slope with a string and a "
    "level bubble, noted the wind, and decided that the drainage ditch would have to run along the "
    "northern edge, where the clay gave way to gravel. By evening the sky had cleared; the numbers, "
    "checked against the parish map, agreed to within a hand's breadth, which was as close as anyone "
    "in the valley had ever needed them to be.\n"
)


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if r.returncode != 0:
        sys.stdout.write(r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace"))
        raise SystemExit(f"FAIL: exit {r.returncode}: {' '.join(cmd)}")
    return r.stdout


def load_hf(d):
    from transformers import GPT2LMHeadModel

    m = GPT2LMHeadModel.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def hf_eval_loss(model, ids, seq_len):
    """`trident eval`'s windows: tokens[k*L : k*L+L+1], each window's mean loss weighted by its length."""
    n = len(ids)
    total = 0.0
    with torch.no_grad():
        for start in range(0, n - 1, seq_len):
            length = min(seq_len, n - 1 - start)
            x = torch.tensor([ids[start:start + length]])
            y = torch.tensor([ids[start + 1:start + 1 + length]])
            logits = model(input_ids=x).logits
            total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).item() * length
    return total / (n - 1), n - 1


def trident_eval(t, source, text_file):
    out = run([t, "eval", *source, "--text", text_file, "--tokenizer", "byte"]).decode()
    fields = dict(kv.split("=") for kv in out.split())
    return float(fields["loss"]), int(fields["tokens"])


def logits_gap(t, source, text_file, model, ids, out):
    """Largest |trident - transformers| logit of the first window over the largest |logit|."""
    from safetensors.numpy import load_file

    run([t, "eval", *source, "--text", text_file, "--tokenizer", "byte", "--logits", out])
    got = load_file(out)
    window = got["ids"].tolist()
    assert window == ids[: len(window)], "trident's window is not the text's first tokens"
    with torch.no_grad():
        want = model(torch.tensor([window])).logits[0].double().numpy()
    mine = got["logits"].astype(np.float64)
    assert mine.shape == want.shape, f"logits shape {mine.shape} against transformers' {want.shape}"
    return float(np.abs(mine - want).max() / np.abs(want).max())


def close(a, b, rtol=RTOL, atol=0.0):
    return abs(a - b) <= rtol * abs(b) + atol


def main():
    args = reference_args()  # the work folder afresh: checkpoints and runs must start from nothing
    t, work = args.trident, args.work
    torch.set_num_threads(1)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    held = os.path.join(work, "held-out.txt")
    with open(held, "w") as f:
        f.write(HELD_OUT)
    ids = list(HELD_OUT.encode())

    # ---- Trident -> transformers ----
    tiny = os.path.join(args.source_dir, "configs/gpt-tiny.toml")
    readme = os.path.join(work, "readme-bytes")
    run([t, "data", "prepare", "--tokenizer", "byte", "--input", *text_files(args.source_dir), "--output", readme])
    heldtok = os.path.join(work, "held-out")
    run([t, "data", "prepare", "--tokenizer", "byte", "--input", held, "--output", heldtok, "--val-fraction", "0"])
    ck, hf = os.path.join(work, "ckpt"), os.path.join(work, "hf")
    base = ["--set", "training.threads=1", "--set", "training.peak_tflops=1", "--set", "data.source=file",
            "--set", "model.vocab_pad_multiple=96", "--set", "logging.log_interval=20"]
    run([t, "train", "--config", tiny, *base, "--set", "training.steps=100", "--set", "training.lr=3e-3",
         "--set", f"data.path={readme}", "--set", f"checkpoint.dir={ck}", "--set", f"logging.dir={work}/train"])
    run([t, "export", "--checkpoint", ck, "--format", "hf-gpt2", "--out", hf])
    model = load_hf(hf)
    seq_len = model.config.n_positions

    # a. trident eval vs transformers on the held-out text
    want, n = hf_eval_loss(model, ids, seq_len)
    for src in (["--checkpoint", ck], ["--init-from", hf]):
        got, m = trident_eval(t, src, held)
        check(close(got, want, atol=PRINT_ABS) and m == n,
              f"eval {src[0]}: trident {got:.6f} ({m} tokens), transformers {want:.8f} ({n} tokens), "
              f"rel {abs(got - want) / want:.2e}")

    for src in (["--checkpoint", ck], ["--init-from", hf]):
        gap = logits_gap(t, src, held, model, ids, os.path.join(work, "logits.safetensors"))
        check(gap <= RTOL, f"logits {src[0]}: largest difference {gap:.2e} of the largest logit (<= {RTOL})")

    # b. one training step's loss and gradient norm, full precision
    step_run, ref_run = os.path.join(work, "step-trident"), os.path.join(work, "step-transformers")
    run([t, "train", "--config", tiny, *base, "--set", "training.steps=1", "--set", f"data.path={heldtok}",
         "--set", f"model.init_from={hf}", "--set", f"logging.dir={step_run}"])
    reference("--config", os.path.join(step_run, "config.toml"), "--hf-dir", hf, "--out", ref_run, "--steps", "1")
    a, b = metrics(step_run)[0], metrics(ref_run)[0]
    for k in ("loss", "grad_norm"):
        check(close(a[k], b[k]), f"step 1 from the export on the held-out tokens, {k}: trident {a[k]!r}, "
                                 f"transformers {b[k]!r}, rel {abs(a[k] - b[k]) / abs(b[k]):.2e}")

    # c. greedy generation (prompt + new tokens fit in n_positions: generate() does not slide the window)
    for prompt in ("Trident is", "The pipeline "):
        new = seq_len - len(prompt.encode())
        with torch.no_grad():
            g = model.generate(torch.tensor([list(prompt.encode())]), max_new_tokens=new, do_sample=False,
                               eos_token_id=None, pad_token_id=0, bos_token_id=None, output_logits=True,
                               return_dict_in_generate=True)
        hf_tokens = g.sequences[0, len(prompt.encode()):].tolist()
        gap = min(float(v[0] - v[1]) for v in (s[0].topk(2).values for s in g.logits))
        for src in (["--init-from", hf], ["--checkpoint", ck]):
            out = run([t, "generate", *src, "--prompt", prompt, "--max-tokens", str(new), "--temperature", "0",
                       "--tokenizer", "byte"])
            tri_tokens = list(out[:-1]) if out.endswith(b"\n") else list(out)
            check(tri_tokens == hf_tokens,
                  f"greedy {src[0]} {prompt!r}: {len(hf_tokens)} tokens, trident {bytes(tri_tokens)!r}, "
                  f"transformers {bytes(hf_tokens)!r} (smallest top-2 logit gap {gap:.3g})")

    # ---- transformers -> Trident ----
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(7)
    cfg = GPT2Config(n_layer=3, n_embd=48, n_head=6, n_inner=100, vocab_size=259, n_positions=40,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    made = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for p in made.parameters():  # biases and LayerNorms off their init, so a mix-up shows
            p.add_(0.05 * torch.randn_like(p))
    hf2 = os.path.join(work, "hf-made")
    made.save_pretrained(hf2)
    made = load_hf(hf2)

    # d. eval (seq_len = n_positions = 40 for a model read from HF)
    want, n = hf_eval_loss(made, ids, 40)
    got, m = trident_eval(t, ["--init-from", hf2], held)
    check(close(got, want, atol=PRINT_ABS) and m == n,
          f"eval of the save_pretrained model: trident {got:.6f}, transformers {want:.8f}, "
          f"rel {abs(got - want) / want:.2e}")

    gap = logits_gap(t, ["--init-from", hf2], held, made, ids, os.path.join(work, "logits-made.safetensors"))
    check(gap <= RTOL, f"logits of the save_pretrained model: largest difference {gap:.2e} of the largest logit")

    # e. five training steps from it, on a token stream that uses all 259 ids
    stream = os.path.join(work, "ids259")
    # Random ids over all 259 entries. No tokenizer made them; the header names "byte" because
    # `trident train` checks the header's tokenizer against data.tokenizer (default "byte"), and
    # its vocab 259 against model.vocab_size.
    write_token_file(stream + ".train.bin", np.random.default_rng(0).integers(0, 259, 6000), 259, "byte")
    tri5, ref5 = os.path.join(work, "made-trident"), os.path.join(work, "made-transformers")
    run([t, "train", "--config", tiny, "--set", "training.threads=1", "--set", "training.peak_tflops=1",
         "--set", "data.source=file", "--set", f"data.path={stream}", "--set", "model.layers=3",
         "--set", "model.hidden=48", "--set", "model.heads=6", "--set", "model.ffn_hidden=100",
         "--set", "model.seq_len=24", "--set", "model.vocab_size=259", "--set", "model.vocab_pad_multiple=8",
         "--set", f"model.init_from={hf2}", "--set", "training.steps=5", "--set", f"logging.dir={tri5}"])
    reference("--config", os.path.join(tri5, "config.toml"), "--hf-dir", hf2, "--out", ref5)
    cmp = subprocess.run([t, "compare", tri5, ref5, "--rtol", str(RTOL)], stdout=subprocess.PIPE, text=True)
    print(cmp.stdout)
    check(cmp.returncode == 0, f"5 steps from the save_pretrained model: trident compare --rtol {RTOL}")

    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS: HF round trip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
