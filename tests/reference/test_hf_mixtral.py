#!/usr/bin/env python3
"""Trident's Mixtral against transformers' MixtralForCausalLM (5.24): the CTest test HfMixtral.

transformers -> Trident: a Mixtral transformers creates with random weights (2 layers, width 48,
6 heads over 2 key/value heads, 4 experts of width 40, top-2, vocabulary 259, every parameter
perturbed so that a mix-up of norms or experts shows), saved with save_pretrained (sharded: one
tensor per expert, block_sparse_moe.experts.{e}.w1/w2/w3, NOTE [HF Mixtral layout]), read with
--init-from:
  a. on a held-out text, `trident eval`'s loss equals transformers' within 1e-5, the logits of
     the first window within 1e-5 of the largest logit, and greedy generation gives the same tokens;
  b. 4 training steps from it (model.init_from, with the per-layer balancing losses on) equal
     reference_train.py's from the same directory within 1e-5 (trident compare);
  c. what Trident's Mixtral does not have is refused by name: a sliding window, router jitter,
     more experts per token than experts.
Trident -> transformers is ReferenceTrainingMixtral's (the step-0 export trains as Trident does).
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
from test_hf_llama import greedy, trident_greedy  # noqa: E402
from test_hf_roundtrip import HELD_OUT, PRINT_ABS, RTOL, close, hf_eval_loss, logits_gap, run, trident_eval  # noqa: E402
from trident_data import reference_args, write_token_file  # noqa: E402


def made_mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(num_hidden_layers=2, hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                        intermediate_size=40, num_local_experts=4, num_experts_per_tok=2, vocab_size=259,
                        max_position_embeddings=40, rms_norm_eps=1e-6, tie_word_embeddings=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(21)
    m = MixtralForCausalLM(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m


def load_mixtral(d):
    from transformers import MixtralForCausalLM

    m = MixtralForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                           experts_implementation="eager")
    m.eval()
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

    # a. eval, logits and greedy generation from a save_pretrained directory
    d = os.path.join(work, "made")
    made_mixtral().save_pretrained(d, max_shard_size="100KB")
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        names = json.load(f)["weight_map"]
    check("model.layers.1.block_sparse_moe.experts.3.w2.weight" in names,
          "save_pretrained wrote one tensor per expert (block_sparse_moe.experts.{e}.w1/w2/w3), sharded")
    made = load_mixtral(d)
    want, n = hf_eval_loss(made, ids, 40)
    got, m = trident_eval(t, ["--init-from", d], held)
    check(close(got, want, atol=PRINT_ABS) and m == n,
          f"eval --init-from: trident {got:.6f}, transformers {want:.8f}, rel {abs(got - want) / want:.2e}")
    gap = logits_gap(t, ["--init-from", d], held, made, ids, os.path.join(work, "logits.safetensors"))
    check(gap <= RTOL, f"logits --init-from: largest difference {gap:.2e} of the largest logit")
    p = list(b"Once upon")
    want_tokens, gap = greedy(made, p, 40 - len(p))
    got_tokens = trident_greedy(t, ["--init-from", d], "Once upon", 40 - len(p))
    check(got_tokens == want_tokens, f"greedy --init-from: {len(want_tokens)} tokens equal "
                                     f"(smallest top-2 logit gap {gap:.3g})")

    # b. training from it against the reference trainer, balancing losses included
    stream = os.path.join(work, "ids259")
    write_token_file(stream + ".train.bin", np.random.default_rng(0).integers(0, 259, 6000), 259, "byte")
    tri, ref = os.path.join(work, "made-trident"), os.path.join(work, "made-transformers")
    config = os.path.join(args.source_dir, "configs/mixtral-tiny.toml")
    sets = ["training.threads=1", "training.peak_tflops=1", "data.source=file", f"data.path={stream}",
            "model.layers=2", "model.hidden=48", "model.heads=6", "model.kv_heads=2", "model.ffn_hidden=40",
            "model.experts=4", "model.seq_len=24", "model.vocab_size=259", "model.layernorm_eps=1e-6",
            "model.rope_theta=500000.0", f"model.init_from={d}", "training.steps=4", f"logging.dir={tri}"]
    run([t, "train", "--config", config, *[a for s in sets for a in ("--set", s)]])
    run([sys.executable, os.path.join(HERE, "reference_train.py"), "--config", os.path.join(tri, "config.toml"),
         "--hf-dir", d, "--out", ref])
    cmp = subprocess.run([t, "compare", tri, ref, "--rtol", str(RTOL)], stdout=subprocess.PIPE, text=True)
    print(cmp.stdout)
    check(cmp.returncode == 0, f"4 steps from the save_pretrained model: trident compare --rtol {RTOL}")

    # c. what Trident refuses, by name
    for key, value, expect in (("sliding_window", 8, "sliding_window = 8"),
                               ("router_jitter_noise", 0.1, "router_jitter_noise = 0.1"),
                               ("num_experts_per_tok", 5, "num_experts_per_tok = 5 with num_local_experts = 4")):
        bad = os.path.join(work, "bad-" + key)
        shutil.copytree(d, bad)
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
    print("PASS: Mixtral against transformers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
