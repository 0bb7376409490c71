#!/usr/bin/env python3
"""Trident's MoE families against transformers 5.24: the CTest test HfMoe.

For each of MixtralForCausalLM, Qwen2MoeForCausalLM and Qwen3MoeForCausalLM, a model transformers
creates with random weights (2 layers, width 48, 6 heads over 2 key/value heads, 4 experts, top-2,
vocabulary 256 (the byte tokenizer's, so that greedy generation prints
bytes); Qwen2-MoE with its gated shared expert, unnormalised top-k weights and a dense first layer, Qwen3-MoE with
q/k norms and a head width of 12 where 48 / 6 is 8; every parameter perturbed so that a mix-up of
norms, biases, gates or experts shows), saved with save_pretrained (sharded: one tensor set per
expert, NOTE [HF Mixtral layout], NOTE [HF Qwen MoE layout]), read with --init-from:
  a. on a held-out text, `trident eval`'s loss equals transformers' within 1e-5, the logits of the
     first window within 1e-5 of the largest logit, and greedy generation gives the same tokens;
  b. 4 training steps from it (model.init_from, with the per-layer balancing losses on) equal
     reference_train.py's from the same directory within 1e-5 (trident compare), on one process and
     on two tensor-parallel ranks (the experts split over tp, or whole with the ranks as ep 2);
  c. what Trident's family does not have is refused by name (a sliding window, router jitter, dense
     layers between the sparse ones, no q/k/v biases, attention biases);
  d. Qwen3-MoE's expert count read from num_experts (the Hub's files) as from num_local_experts
     (what transformers 5.24 writes);
  e. an expert's tensor missing from the files, or transposed, is a one-line error naming it.
Trident -> transformers is ReferenceTraining{Mixtral,Qwen2Moe,Qwen3Moe}'s (the step-0 export trains
as Trident does).
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
from reference_train import reference  # noqa: E402
from trident_data import reference_args, write_token_file  # noqa: E402


# The families, each: its transformers classes, its preset, the config overrides that give the made
# model's sizes, and what Trident refuses in its config.json.
YARN = {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0, "original_max_position_embeddings": 10,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 1.0}

FAMILIES = {
    "mixtral": dict(config="MixtralConfig", model="MixtralForCausalLM", preset="mixtral-tiny",
                    extra=dict(intermediate_size=40, num_local_experts=4),
                    sets=["model.ffn_hidden=40"],
                    refused=(("sliding_window", 8, "sliding_window = 8"),
                             ("router_jitter_noise", 0.1, "router_jitter_noise = 0.1"),
                             ("num_experts_per_tok", 5, "num_experts_per_tok = 5 with num_local_experts = 4"))),
    "qwen2_moe": dict(config="Qwen2MoeConfig", model="Qwen2MoeForCausalLM", preset="qwen2-moe-tiny",
                      # layer 0 dense (mlp_only_layers = [0]: model.moe_first_dense = 1)
                      extra=dict(intermediate_size=72, moe_intermediate_size=40, num_experts=4,
                                 shared_expert_intermediate_size=56, norm_topk_prob=False, mlp_only_layers=[0]),
                      sets=["model.ffn_hidden=72", "model.moe_ffn_hidden=40", "model.moe_shared_ffn_hidden=56",
                            "model.moe_first_dense=1"],
                      refused=(("decoder_sparse_step", 2, "decoder_sparse_step = 2"),
                               ("mlp_only_layers", [1], "mlp_only_layers = [1]"),
                               ("qkv_bias", False, "qkv_bias = false"))),
    # head_dim 12, not 48 / 6 = 8 (Qwen3's own head width); save_pretrained writes num_local_experts
    "qwen3_moe": dict(config="Qwen3MoeConfig", model="Qwen3MoeForCausalLM", preset="qwen3-moe-tiny",
                      extra=dict(intermediate_size=72, moe_intermediate_size=40, num_experts=4, head_dim=12,
                                 norm_topk_prob=True),
                      sets=["model.ffn_hidden=72", "model.moe_ffn_hidden=40", "model.kv_channels=12"],
                      refused=(("use_sliding_window", True, "use_sliding_window = true"),
                               ("attention_bias", True, "attention_bias = true"))),
    # DeepSeek-V3: latent attention (values narrower than queries; rotary rows interleaved, as the Hub's
    # files keep them), a dense first layer, a sigmoid router over 3 groups with a random correction bias
    # and scaling, an ungated shared expert; YaRN rope scaling (NOTE [YaRN]) over 10 original positions,
    # so that of the 3 rotary frequencies one is kept and two interpolated, with an mscale that scales
    # the tables (0.964) and mscale_all_dim the softmax (x 1.30)
    "deepseek_v3": dict(config="DeepseekV3Config", model="DeepseekV3ForCausalLM", preset="deepseek-v3-tiny",
                        extra=dict(num_key_value_heads=6, intermediate_size=72, moe_intermediate_size=40,
                                   n_routed_experts=6, n_group=3, topk_group=2, n_shared_experts=1,
                                   routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1,
                                   q_lora_rank=20, kv_lora_rank=14, qk_nope_head_dim=10, qk_rope_head_dim=6,
                                   v_head_dim=8, num_mtp_layers=0, rope_parameters=YARN),
                        moe_layers=1,
                        sets=["model.kv_heads=0", "model.ffn_hidden=72", "model.moe_ffn_hidden=40",
                              "model.moe_shared_ffn_hidden=40", "model.moe_first_dense=1", "model.experts=6",
                              "model.moe_router_groups=3", "model.moe_router_group_topk=2", "model.q_lora_rank=20",
                              "model.kv_lora_rank=14", "model.qk_nope_head_dim=10", "model.qk_rope_head_dim=6",
                              "model.v_head_dim=8", "model.rope_scaling=yarn", "model.rope_factor=4",
                              "model.rope_original_max_position=10", "model.rope_mscale=0.707",
                              "model.rope_mscale_all_dim=1"],
                        refused=(("scoring_func", "softmax", "scoring_func = \"softmax\""),
                                 ("num_key_value_heads", 2, "num_key_value_heads = 2"),
                                 ("n_shared_experts", 0, "n_shared_experts = 0"),
                                 ("head_dim", 16, "head_dim = 16 but qk_rope_head_dim = 6"),
                                 ("rope_parameters", {**YARN, "attention_factor": 1.0}, "attention_factor is set"))),
}


def made_model(family):
    import transformers

    f = FAMILIES[family]
    common = dict(num_hidden_layers=2, hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                  num_experts_per_tok=2, vocab_size=256, max_position_embeddings=40, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg = getattr(transformers, f["config"])(**{**common, **f["extra"]})
    torch.manual_seed(21)
    m = getattr(transformers, f["model"])(cfg)
    with torch.no_grad():
        for p in m.parameters():  # norms, biases and gates off their init, so a mix-up shows
            p.add_(0.05 * torch.randn_like(p))
        for name, b in m.named_buffers():  # DeepSeek-V3's correction bias: large enough to change choices
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.3 * torch.randn_like(b))
    return m


def load_model(family, d):
    import transformers

    m = getattr(transformers, FAMILIES[family]["model"]).from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager")
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

    stream = os.path.join(work, "ids256")
    write_token_file(stream + ".train.bin", np.random.default_rng(0).integers(0, 256, 6000), 256, "byte")
    for family, f in FAMILIES.items():
        # a. eval, logits and greedy generation from a save_pretrained directory
        d = os.path.join(work, "made-" + family)
        made_model(family).save_pretrained(d, max_shard_size="100KB")
        with open(os.path.join(d, "model.safetensors.index.json")) as fh:
            names = list(json.load(fh)["weight_map"])
        check(sum(".experts.3." in n for n in names) == 3 * f.get("moe_layers", 1 if family == "qwen2_moe" else 2),
              f"{family}: save_pretrained wrote one tensor set per expert, sharded")
        made = load_model(family, d)
        want, n = hf_eval_loss(made, ids, 40)
        got, m = trident_eval(t, ["--init-from", d], held)
        check(close(got, want, atol=PRINT_ABS) and m == n,
              f"{family}: eval --init-from: trident {got:.6f}, transformers {want:.8f}, rel {abs(got - want) / want:.2e}")
        gap = logits_gap(t, ["--init-from", d], held, made, ids, os.path.join(work, f"logits-{family}.safetensors"))
        check(gap <= RTOL, f"{family}: logits --init-from: largest difference {gap:.2e} of the largest logit")
        p = list(b"Once upon")
        want_tokens, gap = greedy(made, p, 40 - len(p))
        got_tokens = trident_greedy(t, ["--init-from", d], "Once upon", 40 - len(p))
        check(got_tokens == want_tokens, f"{family}: greedy --init-from: {len(want_tokens)} tokens equal "
                                         f"(smallest top-2 logit gap {gap:.3g})")

        # b. training from it against the reference trainer, balancing losses included
        tri, ref = os.path.join(work, family + "-trident"), os.path.join(work, family + "-transformers")
        config = os.path.join(args.source_dir, "configs", f["preset"] + ".toml")
        sets = ["training.threads=1", "training.peak_tflops=1", "data.source=file", f"data.path={stream}",
                "model.layers=2", "model.hidden=48", "model.heads=6", "model.kv_heads=2", "model.experts=4",
                "model.seq_len=24", "model.vocab_size=256", "model.layernorm_eps=1e-6", "model.rope_theta=500000.0",
                f"model.init_from={d}", "training.steps=4", f"logging.dir={tri}"] + f["sets"]
        run([t, "train", "--config", config, *[a for s_ in sets for a in ("--set", s_)]])
        reference("--config", os.path.join(tri, "config.toml"), "--hf-dir", d, "--out", ref)
        cmp = subprocess.run([t, "compare", tri, ref, "--rtol", str(RTOL)], stdout=subprocess.PIPE, text=True)
        print(cmp.stdout)
        check(cmp.returncode == 0, f"{family}: 4 steps from the save_pretrained model: trident compare --rtol {RTOL}")
        # b'. the same 4 steps on two tensor-parallel ranks (NOTE [experts under tensor parallelism]): each
        #     expert split over tp (Mixtral, Qwen3-MoE), or whole with the tp ranks folded into ep (Qwen2-MoE)
        tp2 = tri + "-tp2"
        par = ["parallel.tp=2"] + (["parallel.etp=1", "parallel.ep=2"] if family == "qwen2_moe" else [])
        tp_sets = [s_ for s_ in sets if not s_.startswith("logging.dir=")] + par + [f"logging.dir={tp2}"]
        # (a free port: 29500, the default, is the README tests' and the Slurm test's: RESOURCE_LOCK)
        run([t, "launch", "--nproc-per-node", "2", "--master-port", "0", "--", t, "train", "--config", config,
             *[a for s_ in tp_sets for a in ("--set", s_)]])
        cmp = subprocess.run([t, "compare", tp2, ref, "--rtol", str(RTOL)], stdout=subprocess.PIPE, text=True)
        print(cmp.stdout)
        check(cmp.returncode == 0, f"{family}: the same 4 steps at {' '.join(par)}: trident compare --rtol {RTOL}")

        # c. what Trident refuses, by name
        for key, value, expect in f["refused"]:
            bad = os.path.join(work, f"bad-{family}-{key}")
            shutil.copytree(d, bad)
            with open(os.path.join(bad, "config.json")) as fh:
                c = json.load(fh)
            c[key] = value
            with open(os.path.join(bad, "config.json"), "w") as fh:
                json.dump(c, fh)
            r = subprocess.run([t, "eval", "--init-from", bad, "--text", held, "--tokenizer", "byte"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            check(r.returncode != 0 and expect in r.stdout,
                  f"{family}: {key} = {value!r} refused: {r.stdout.strip()[-160:]!r}")

    # e. an expert's tensor missing, or of another shape, is named
    from safetensors.torch import load_file, save_file
    d = os.path.join(work, "made-mixtral")
    victim = "model.layers.0.block_sparse_moe.experts.1.w2.weight"
    for kind in ("missing", "transposed"):
        bad = os.path.join(work, "bad-mixtral-expert-" + kind)
        shutil.copytree(d, bad)
        with open(os.path.join(bad, "model.safetensors.index.json")) as fh:
            index = json.load(fh)
        shard = os.path.join(bad, index["weight_map"][victim])
        tensors = load_file(shard)
        if kind == "missing":
            del tensors[victim]
            del index["weight_map"][victim]
            with open(os.path.join(bad, "model.safetensors.index.json"), "w") as fh:
                json.dump(index, fh)
            expect = f"has no tensor {victim} (for layers.0.moe.experts.down.weight)"
        else:
            tensors[victim] = tensors[victim].t().contiguous()
            expect = f"tensor {victim} has shape [40, 48] but each expert of layers.0.moe.experts.down.weight needs [48, 40]"
        save_file(tensors, shard, metadata={"format": "pt"})
        r = subprocess.run([t, "eval", "--init-from", bad, "--text", held, "--tokenizer", "byte"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(r.returncode != 0 and expect in r.stdout and len(r.stdout.strip().splitlines()) == 1,
              f"mixtral: an expert's tensor {kind}: one line naming it: {r.stdout.strip()[-200:]!r}")

    # d. Qwen3-MoE as the Hub's files write it: num_experts where save_pretrained wrote num_local_experts
    d, hub = os.path.join(work, "made-qwen3_moe"), os.path.join(work, "hub-qwen3_moe")
    shutil.copytree(d, hub)
    with open(os.path.join(hub, "config.json")) as fh:
        c = json.load(fh)
    check("num_local_experts" in c and "num_experts" not in c,
          "qwen3_moe: transformers 5.24's save_pretrained writes num_local_experts")
    c["num_experts"] = c.pop("num_local_experts")
    with open(os.path.join(hub, "config.json"), "w") as fh:
        json.dump(c, fh)
    got_hub, _ = trident_eval(t, ["--init-from", hub], held)
    got_made, _ = trident_eval(t, ["--init-from", d], held)
    check(got_hub == got_made, f"qwen3_moe: num_experts (the Hub's) read as num_local_experts: {got_hub} = {got_made}")

    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS: Mixtral, Qwen2-MoE and Qwen3-MoE against transformers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
