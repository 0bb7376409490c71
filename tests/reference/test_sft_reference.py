#!/usr/bin/env python3
"""Fine-tuning on completions against transformers: the CTest test ReferenceSft.

tests/data/sft-tiny.jsonl (TRL's prompt-completion format) prepared as docs/data.md prepares it
(`trident data prepare --format prompt-completion --output-format megatron --eod-token 0
--pack-seq-len 128`: examples packed whole, the loss-mask file beside them), and
configs/llama-sft-tiny.toml as it is (documents kept apart, positions restarting, eod_mask_loss,
completion_only_loss, Megatron's sample order) from a LlamaForCausalLM transformers created with
the preset's sizes, read with model.init_from; 20 steps. reference_train.py trains the same
steps from the same directory with each document through the model on its own, the labels of
the prompts and of the predictions made from an eod -100, and transformers' loss summed over the
counted labels of the global batch over their count (NOTE [reference loss masks]). Checked:
  a. the labels counted per step (metrics.jsonl's loss_tokens) are the reference's, fewer than
     half the labels (the completions and their eods);
  b. every step's loss and gradient norm under the training contract (README.md: K = 4 times
     torch fp32's own error of the fp64 truth, within 1e-5 of torch fp32 where that is not
     ill-conditioned); the step-1 loss, the loss on the completions of the step-0 model, within
     1e-5 of transformers'; the loss falls over the 20 steps; the per-document reference within
     1e-5 of the whole samples under megatron-core's mask as a 4D mask (--documents mask);
  c. data parallelism with counts that differ between the ranks (the reference's
     loss_tokens_per_rank at --dp 2 shows which steps): dp2 within 1e-5 of one process, on
     every step (one mean over the global batch's counted labels, not a mean of the ranks' means).
"""

import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from reference_train import reference  # noqa: E402
from test_reference_training import FLOOR, K, RTOL_FP32, metrics, run  # noqa: E402
from trident_data import reference_args  # noqa: E402

STEPS = 20


def made_llama(d):
    """A LlamaForCausalLM of configs/llama-sft-tiny.toml's sizes with random weights, every
    parameter perturbed (norms off their ones), saved with save_pretrained."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(num_hidden_layers=8, hidden_size=64, num_attention_heads=8, num_key_value_heads=4,
                      intermediate_size=176, vocab_size=256, max_position_embeddings=128, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(31)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    m.save_pretrained(d)


def contract(T, P, D):
    """The training contract per step and key: failures, and the largest Trident-vs-fp32 distance."""
    failures, worst = [], 0.0
    for x, y, z in zip(T, P, D):
        for k in ("loss", "grad_norm"):
            e_tri, e_pt = abs(x[k] - z[k]) / abs(z[k]), abs(y[k] - z[k]) / abs(z[k])
            d = abs(x[k] - y[k]) / abs(y[k])
            worst = max(worst, d)
            if e_tri > K * max(e_pt, FLOOR):
                failures.append(f"step {x['step']} {k}: |Trident - fp64| = {e_tri:.3g} > {K} x max({e_pt:.3g}, {FLOOR:.3g})")
            if d > RTOL_FP32 and e_pt <= RTOL_FP32 / (K + 1):
                failures.append(f"step {x['step']} {k}: Trident and torch fp32 differ by {d:.3g} on a well-conditioned step")
    return failures, worst


def main():
    args = reference_args()
    t, work = args.trident, args.work
    torch.set_num_threads(1)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    data, hf = os.path.join(work, "sft"), os.path.join(work, "hf-llama")
    run([t, "data", "prepare", "--format", "prompt-completion", "--output-format", "megatron", "--eod-token", "0",
         "--pack-seq-len", "128", "--input", os.path.join(args.source_dir, "tests/data/sft-tiny.jsonl"),
         "--output", data])
    made_llama(hf)
    config = os.path.join(args.source_dir, "configs/llama-sft-tiny.toml")
    sets = ["training.threads=1", "training.peak_tflops=1", "training.eval_interval=0", f"training.steps={STEPS}",
            "logging.log_interval=1", "model.layernorm_eps=1e-6", f"data.path={data}", f"model.init_from={hf}"]
    tri, dp2 = os.path.join(work, "trident"), os.path.join(work, "trident-dp2")
    run([t, "train", "--config", config, *[a for s in sets for a in ("--set", s)], "--set", f"logging.dir={tri}"])
    run([t, "launch", "--nproc-per-node", "2", "--master-port", "0", "--", t, "train", "--config", config,
         *[a for s in sets + ["parallel.dp=2"] for a in ("--set", s)], "--set", f"logging.dir={dp2}"])
    ref32, ref64, refdp = (os.path.join(work, d) for d in ("ref-fp32", "ref-fp64", "ref-dp2"))
    reference("--config", os.path.join(tri, "config.toml"), "--hf-dir", hf, "--out", ref32,
              "--also", f"float64:eager:{ref64}", "--also", f"float32:eager,dp=2:{refdp}")
    refmask = os.path.join(work, "ref-mask")
    reference("--config", os.path.join(tri, "config.toml"), "--hf-dir", hf, "--out", refmask, "--documents", "mask")
    T, P, D, R2, T2 = metrics(tri), metrics(ref32), metrics(ref64), metrics(refdp), metrics(dp2)

    # a. the counted labels
    same = [x.get("loss_tokens") for x in T] == [y["loss_tokens"] for y in P]
    labels = 4 * 128  # the global batch's labels
    check(same and all(0 < y["loss_tokens"] < labels / 2 for y in P),
          f"loss_tokens per step equal the reference's: {[y['loss_tokens'] for y in P]} of {labels}")
    # b. the contract, step 1, the fall
    f_, worst = contract(T, P, D)
    for f in f_:
        check(False, f)
    check(not f_, f"{STEPS} steps under the training contract (largest Trident vs torch fp32: {worst:.2e})")
    d1 = abs(T[0]["loss"] - P[0]["loss"]) / P[0]["loss"]
    check(d1 <= RTOL_FP32, f"step-1 loss on the completions: Trident {T[0]['loss']:.8f}, transformers "
                           f"{P[0]['loss']:.8f} (rel {d1:.2e})")
    check(T[-1]["loss"] < 0.9 * T[0]["loss"], f"the loss falls: {T[0]['loss']:.4f} -> {T[-1]['loss']:.4f}")
    d_mask = max(abs(a[k] - b[k]) / abs(b[k]) for a, b in zip(metrics(refmask), P) for k in ("loss", "grad_norm"))
    check(d_mask <= RTOL_FP32, f"the per-document reference within {RTOL_FP32} of the whole samples under a 4D "
                               f"block mask (--documents mask): {d_mask:.2e}")
    # c. uneven data parallelism
    uneven = [y["step"] for y in R2 if len(set(y["loss_tokens_per_rank"])) > 1]
    check(len(uneven) > 0, f"the dp ranks count different labels on steps {uneven} "
                           f"(e.g. {R2[uneven[0] - 1]['loss_tokens_per_rank'] if uneven else None})")
    d = max(abs(a[k] - b[k]) / abs(b[k]) for a, b in zip(T2, T) for k in ("loss", "grad_norm"))
    check(d <= RTOL_FP32, f"dp2 within {RTOL_FP32} of one process: {d:.2e}")
    d_ref = max(abs(a[k] - b[k]) / abs(b[k]) for a, b in zip(T2, R2) for k in ("loss", "grad_norm"))
    check(d_ref <= RTOL_FP32, f"dp2 within {RTOL_FP32} of the reference summing in dp2's order: {d_ref:.2e}")
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump({"trident": T, "dp2": T2, "reference": P, "fp64": D, "reference_dp2": R2}, f, indent=1)
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS: fine-tuning on completions against transformers (labels -100 on the prompts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
