#!/usr/bin/env python3
"""Trident's Llama against transformers' LlamaForCausalLM: the CTest test HfLlama.

Trident -> transformers: llama-tiny (grouped-query attention 8/4, untied head, vocabulary 256
padded to 288) trained 150 steps on the README files' bytes, saved, exported with
`trident export --format hf-llama` (one file) and `--shard-mb 1` (sharded, with
model.safetensors.index.json), loaded with LlamaForCausalLM.from_pretrained:
  a. on a held-out text, `trident eval`'s loss (from the checkpoint and from both exports)
     equals transformers' within 1e-5, and the logits of the first window within 1e-5 of the
     largest logit;
  b. greedy transformers generate() gives the tokens of `trident generate --temperature 0`.
transformers -> Trident: two models transformers creates with random weights (every parameter,
norms included, perturbed), saved with save_pretrained, read with --init-from:
  - "gqa": 3 layers, width 48, 6 heads over 2 key/value heads, SwiGLU 100, vocabulary 259,
    rope_theta 500000, untied, rms_norm_eps 1e-6, saved sharded (max_shard_size 100KB);
  - "mqa-llama3": one key/value head, tied embeddings, Llama 3.1 rope scaling with
    original_max_position_embeddings 16 so each of the three frequency bands (kept,
    interpolated, slowed) holds a frequency;
  c. logits and loss within 1e-5, greedy generation equal;
  d. 4 training steps from "gqa" (model.init_from) equal reference_train.py's from the same
     directory within 1e-5 (trident compare);
  e. a directory Trident cannot read (attention_bias = true, another head_dim, a rope type it
     does not know) is an error naming the key.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_hf_roundtrip import HELD_OUT, PRINT_ABS, RTOL, close, hf_eval_loss, logits_gap, run, trident_eval  # noqa: E402
from test_reference_training import text_files  # noqa: E402
from reference_train import reference  # noqa: E402
from trident_data import reference_args, write_token_file  # noqa: E402


def load_llama(d):
    from transformers import LlamaForCausalLM

    m = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def greedy(model, prompt_ids, new):
    with torch.no_grad():
        g = model.generate(torch.tensor([prompt_ids]), max_new_tokens=new, do_sample=False, eos_token_id=None,
                           pad_token_id=0, bos_token_id=None, output_logits=True, return_dict_in_generate=True)
    gap = min(float(v[0] - v[1]) for v in (s[0].topk(2).values for s in g.logits))
    return g.sequences[0, len(prompt_ids):].tolist(), gap


def trident_greedy(t, source, prompt, new):
    out = run([t, "generate", *source, "--prompt", prompt, "--max-tokens", str(new), "--temperature", "0",
               "--tokenizer", "byte"])
    return list(out[:-1]) if out.endswith(b"\n") else list(out)


def made_model(kind):
    from transformers import LlamaConfig, LlamaForCausalLM

    common = dict(num_hidden_layers=3, hidden_size=48, num_attention_heads=6, intermediate_size=100, vocab_size=259,
                  max_position_embeddings=40, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if kind == "gqa":
        cfg = LlamaConfig(**common, num_key_value_heads=2, rms_norm_eps=1e-6, tie_word_embeddings=False,
                          rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    else:
        cfg = LlamaConfig(**common, num_key_value_heads=1, tie_word_embeddings=True,
                          rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 16})
    torch.manual_seed(11 if kind == "gqa" else 12)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in m.parameters():  # norms off their ones, so a mix-up of norm weights shows
            p.add_(0.05 * torch.randn_like(p))
    return m


def main():
    args = reference_args()
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
    tiny = os.path.join(args.source_dir, "configs/llama-tiny.toml")
    readme = os.path.join(work, "readme-bytes")
    run([t, "data", "prepare", "--tokenizer", "byte", "--input", *text_files(args.source_dir), "--output", readme])
    ck = os.path.join(work, "ckpt")
    base = ["--set", "training.threads=1", "--set", "training.peak_tflops=1", "--set", "data.source=file",
            "--set", "model.vocab_pad_multiple=96", "--set", "logging.log_interval=50"]
    run([t, "train", "--config", tiny, *base, "--set", "training.steps=150", "--set", "training.lr=3e-3",
         "--set", f"data.path={readme}", "--set", f"checkpoint.dir={ck}", "--set", f"logging.dir={work}/train"])
    hf, sharded = os.path.join(work, "hf"), os.path.join(work, "hf-sharded")
    run([t, "export", "--checkpoint", ck, "--format", "hf-llama", "--out", hf])
    run([t, "export", "--checkpoint", ck, "--format", "hf-llama", "--out", sharded, "--shard-mb", "1"])
    with open(os.path.join(sharded, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    check(len(shards) >= 2 and not os.path.exists(os.path.join(sharded, "model.safetensors")),
          f"--shard-mb 1 wrote {len(shards)} shards listed in model.safetensors.index.json")
    for d, label in ((hf, "export"), (sharded, "sharded export")):
        model = load_llama(d)
        seq_len = model.config.max_position_embeddings
        want, n = hf_eval_loss(model, ids, seq_len)
        sources = (["--checkpoint", ck], ["--init-from", d]) if d == hf else (["--init-from", d],)
        for src in sources:
            got, m = trident_eval(t, src, held)
            check(close(got, want, atol=PRINT_ABS) and m == n,
                  f"{label}: eval {src[0]}: trident {got:.6f} ({m} tokens), transformers {want:.8f}, "
                  f"rel {abs(got - want) / want:.2e}")
            gap = logits_gap(t, src, held, model, ids, os.path.join(work, "logits.safetensors"))
            check(gap <= RTOL, f"{label}: logits {src[0]}: largest difference {gap:.2e} of the largest logit")
        if d == hf:
            for prompt in ("Trident is", "The pipeline "):
                p = list(prompt.encode())
                want_tokens, gap = greedy(model, p, seq_len - len(p))
                for src in (["--init-from", hf], ["--checkpoint", ck]):
                    got_tokens = trident_greedy(t, src, prompt, seq_len - len(p))
                    check(got_tokens == want_tokens,
                          f"greedy {src[0]} {prompt!r}: trident {bytes(got_tokens)!r}, transformers "
                          f"{bytes(want_tokens)!r} (smallest top-2 logit gap {gap:.3g})")

    # ---- transformers -> Trident ----
    for kind in ("gqa", "mqa-llama3"):
        made = made_model(kind)
        d = os.path.join(work, "made-" + kind)
        if kind == "gqa":
            made.save_pretrained(d, max_shard_size="100KB")
            check(os.path.exists(os.path.join(d, "model.safetensors.index.json")),
                  "save_pretrained(max_shard_size=100KB) wrote a sharded model")
        else:
            made.save_pretrained(d)
        made = load_llama(d)
        want, n = hf_eval_loss(made, ids, 40)
        got, m = trident_eval(t, ["--init-from", d], held)
        check(close(got, want, atol=PRINT_ABS) and m == n,
              f"{kind}: eval --init-from: trident {got:.6f}, transformers {want:.8f}, rel {abs(got - want) / want:.2e}")
        gap = logits_gap(t, ["--init-from", d], held, made, ids, os.path.join(work, f"logits-{kind}.safetensors"))
        check(gap <= RTOL, f"{kind}: logits --init-from: largest difference {gap:.2e} of the largest logit")
        p = list(b"Once upon")
        want_tokens, gap = greedy(made, p, 40 - len(p))
        got_tokens = trident_greedy(t, ["--init-from", d], "Once upon", 40 - len(p))
        check(got_tokens == want_tokens, f"{kind}: greedy --init-from: {len(want_tokens)} tokens equal "
                                         f"(smallest top-2 logit gap {gap:.3g})")

    # d. training from the "gqa" model against the reference trainer
    d = os.path.join(work, "made-gqa")
    stream = os.path.join(work, "ids259")
    write_token_file(stream + ".train.bin", np.random.default_rng(0).integers(0, 259, 6000), 259, "byte")
    tri, ref = os.path.join(work, "made-trident"), os.path.join(work, "made-transformers")
    run([t, "train", "--config", tiny, "--set", "training.threads=1", "--set", "training.peak_tflops=1",
         "--set", "data.source=file", "--set", f"data.path={stream}", "--set", "model.layers=3",
         "--set", "model.hidden=48", "--set", "model.heads=6", "--set", "model.kv_heads=2",
         "--set", "model.ffn_hidden=100", "--set", "model.seq_len=24", "--set", "model.vocab_size=259",
         "--set", "model.layernorm_eps=1e-6", "--set", "model.rope_theta=500000.0",
         "--set", f"model.init_from={d}", "--set", "training.steps=4", "--set", f"logging.dir={tri}"])
    reference("--config", os.path.join(tri, "config.toml"), "--hf-dir", d, "--out", ref)
    cmp = subprocess.run([t, "compare", tri, ref, "--rtol", str(RTOL)], stdout=subprocess.PIPE, text=True)
    print(cmp.stdout)
    check(cmp.returncode == 0, f"4 steps from the save_pretrained model: trident compare --rtol {RTOL}")

    # e. what Trident refuses, by name
    src_dir = os.path.join(work, "made-mqa-llama3")
    for key, value, expect in (("attention_bias", True, "attention_bias = true"),
                               ("head_dim", 16, "head_dim = 16"),
                               ("rope_parameters", {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0},
                                "rope_type = \"dynamic\"")):
        bad = os.path.join(work, "bad-" + key)
        shutil.copytree(src_dir, bad)
        with open(os.path.join(bad, "config.json")) as f:
            c = json.load(f)
        c[key] = value
        with open(os.path.join(bad, "config.json"), "w") as f:
            json.dump(c, f)
        r = subprocess.run([t, "eval", "--init-from", bad, "--text", held, "--tokenizer", "byte"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(r.returncode != 0 and expect in r.stdout, f"{key} = {value!r} refused: {r.stdout.strip()[-160:]!r}")

    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS: Llama against transformers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
