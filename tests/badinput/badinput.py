#!/usr/bin/env python3
"""The bad-input table (CTest label `badinput`, issue 30): each case runs one
`trident` command line that a user could type wrongly and asserts its exit
status (NOTE [exit statuses] in launch/options.h: 2 bad input, 1 a failure or
a difference), the words its one-line error must hold, no stack trace, and that
it errs within seconds (sizes are refused before anything is allocated).

usage: badinput.py BUILD_DIR SOURCE_DIR [--only NAME_SUBSTRING] [--list]
"""
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

TRACE_MARKS = ("frame #", "Exception raised from", "terminate called", "Traceback", "std::bad_alloc")
MAX_SECONDS = 20  # a size check errs in about a second; an allocation takes minutes


def cases(work, cores, trident="build/trident", busy_port=0):
    tiny = "train --config configs/gpt-tiny.toml --set training.steps=2 --set"
    # name, expected status, command (after `trident`), words the error line holds[, environment added]
    return [
        # Item 2: every float key finite and in range; timeouts bounded.
        ("lr inf", 2, f"{tiny} training.lr=inf", ["training.lr = inf", "finite number > 0"]),
        ("lr nan", 2, f"{tiny} training.lr=nan", ["training.lr = nan", "finite number > 0"]),
        ("init_std inf", 2, f"{tiny} model.init_std=inf", ["model.init_std = inf", "finite"]),
        ("layernorm_eps inf", 2, f"{tiny} model.layernorm_eps=inf", ["model.layernorm_eps = inf", "finite"]),
        ("adam eps inf", 2, f"{tiny} training.eps=inf", ["training.eps = inf", "finite"]),
        ("rope_theta inf", 2, f"{tiny} model.rope_theta=inf", ["model.rope_theta = inf", "finite"]),
        ("timeout inf", 2, f"{tiny} parallel.timeout_s=inf", ["parallel.timeout_s = inf", "[1, 1000000]"]),
        ("timeout 1e300", 2, f"{tiny} parallel.timeout_s=1e300", ["parallel.timeout_s = 1e+300", "[1, 1000000]"]),
        ("timeout 1e-9", 2, f"{tiny} parallel.timeout_s=1e-9", ["parallel.timeout_s = 1e-09", "[1, 1000000]"]),
        ("bucket 1e30", 2, f"{tiny} parallel.dp_bucket_mb=1e30", ["parallel.dp_bucket_mb", "(0, 1048576]"]),
        # checkpoint.async, schedule.zb_auto_costs: nothing accepted that would do nothing.
        ("async without dir", 2, f"{tiny} checkpoint.async=true", ["checkpoint.async = true needs checkpoint.dir"]),
        ("async without interval", 2, f"{tiny} checkpoint.dir=ck-async --set checkpoint.async=true",
         ["checkpoint.async = true", "expected checkpoint.interval > 0"]),
        ("zb_auto_costs unknown", 2, f"{tiny} schedule.zb_auto_costs=fast", ["schedule.zb_auto_costs = \"fast\"", "expected one of"]),
        ("zb_auto_costs without zb-auto", 2, f"{tiny} parallel.pp=2 --set schedule.zb_auto_costs=measured",
         ["schedule.zb_auto_costs = \"measured\"", "only zb-auto"]),
        ("overlap_param_gather without ZeRO-1", 2, f"{tiny} parallel.overlap_param_gather=false",
         ["parallel.overlap_param_gather = false", "only ZeRO-1"]),
        # parallel.pipeline_dtype: an unknown value, bf16 boundaries under fp32 training, a value with no boundary.
        ("pipeline_dtype fp16", 2, f"{tiny} parallel.pp=2 --set parallel.pipeline_dtype=fp16",
         ["parallel.pipeline_dtype = \"fp16\"", "expected one of"]),
        ("pipeline_dtype bf16 under fp32", 2, f"{tiny} parallel.pp=2 --set parallel.pipeline_dtype=bf16",
         ["parallel.pipeline_dtype = \"bf16\" needs training.precision = \"bf16\""]),
        ("pipeline_dtype without a pipeline", 2, f"{tiny} parallel.pipeline_dtype=fp32",
         ["parallel.pipeline_dtype = \"fp32\" has no effect with a single pipeline stage"]),
        # parallel.pipeline_layout (Megatron's layout string) and the account_for_* split (issue 31 item 7).
        ("layout syntax", 2, f"{tiny} parallel.pp=2 --set 'parallel.pipeline_layout=Etttt|(tttL'",
         ["parallel.pipeline_layout = \"Etttt|(tttL\"", "'(' at position 6 is never closed"]),
        ("layout stage count", 2, f"{tiny} parallel.pp=2 --set 'parallel.pipeline_layout=Ett|ttt|tttL'",
         ["has 3 stage(s) but parallel.pp (2) x schedule.chunks (1) = 2"]),
        ("layout layer count", 2, f"{tiny} parallel.pp=2 --set 'parallel.pipeline_layout=Ett|tttL'",
         ["holds 5 transformer layer(s) (t) but model.layers = 8"]),
        ("layout with mtp", 2, f"{tiny} parallel.pp=2 --set 'parallel.pipeline_layout=Etttt|ttttmL'",
         ["'m' (a multi-token prediction layer) is not supported"]),
        ("layout and pipeline_layers", 2,
         f"{tiny} parallel.pp=2 --set 'parallel.pipeline_layout=Etttt|ttttL' --set parallel.pipeline_layers=[4,4]",
         ["parallel.pipeline_layout and parallel.pipeline_layers both give the pipeline split"]),
        ("layout and account_for", 2, f"{tiny} parallel.pp=2 --set 'parallel.pipeline_layout=Etttt|ttttL' "
         "--set parallel.account_for_loss_in_pipeline_split=true",
         ["parallel.account_for_loss_in_pipeline_split with parallel.pipeline_layout"]),
        ("account_for not divisible", 2, f"{tiny} parallel.pp=2 --set parallel.account_for_embedding_in_pipeline_split=true",
         ["model.layers (8) + 1 for the embedding = 9 must be divisible by parallel.pp (2)"]),
        ("account_for without a pipeline", 2, f"{tiny} parallel.account_for_loss_in_pipeline_split=true",
         ["has no effect with a single pipeline stage"]),
        # Item 1: sizes and threads before anything is allocated.
        ("threads 100000", 2, f"{tiny} training.threads=100000", ["training.threads = 100000", "[1, 1024]"]),
        ("threads over cores", 2, f"{tiny} training.threads={cores + 1}",
         [f"training.threads = {cores + 1}", f"{cores} cores"]),
        ("layers 1e9", 2, f"{tiny} model.layers=1000000000", ["model.layers = 1000000000", "host memory", "MemTotal"]),
        ("layers int64 max", 2, f"{tiny} model.layers=9223372036854775807", ["model.layers (9223372036854775807)", "overflow int64"]),
        ("hidden 1e6 layers 1000", 2, f"{tiny} model.hidden=1000000 --set model.layers=1000",
         ["model.hidden = 1000000", "host memory"]),
        ("hidden 2^31", 2, f"{tiny} model.hidden=2147483648", ["model.hidden (2147483648)", "overflow int64"]),
        ("batch 1e9", 2, f"{tiny} training.global_batch_size=1000000000 --set training.micro_batch_size=1000000000",
         ["host memory", "training.micro_batch_size x model.seq_len x model.vocab_size"]),
        # Parameters, logits and tokens under 2 GB; one micro-batch's activations through 1000 layers 4.3 TB.
        ("activations in flight", 2, f"{tiny} model.layers=1000 --set training.micro_batch_size=32768 "
         "--set training.global_batch_size=32768",
         ["host memory", "activations of 1 micro-batch(es) in flight under schedule.kind = \"1f1b\", 1000 layer(s)",
          "4.29e+12"]),
        ("synthetic tokens 1e12", 2, f"{tiny} data.synthetic_tokens=1000000000000",
         ["host memory", "data.synthetic_tokens"]),
        ("schedule p=m=100000", 2, "schedule --kind 1f1b -p 100000 -m 100000 --format summary",
         ["p=100000 m=100000", "compute slots, expected at most 33554432"]),
        # parallel.backend: the nccl-rules test backend is for the CPU only.
        ("nccl-rules on cuda", 2, f"{tiny} parallel.backend=nccl-rules --set training.device=cuda",
         ['parallel.backend = "nccl-rules"', 'needs training.device = "cpu"']),
        ("unknown backend", 2, f"{tiny} parallel.backend=mpi", ['parallel.backend = "mpi"', "nccl-rules"]),
        # Item 4: nothing accepted that cannot work.
        ("empty config", 2, f"train --config {work}/empty.toml", ["empty.toml: the config file is empty"]),
        ("exit_after_steps at the end", 2, f"{tiny} training.exit_after_steps=2 --set checkpoint.dir={work}/ck-exit",
         ["training.exit_after_steps = 2 is not before training.steps = 2"]),
        ("byte tokenizer, vocab 2", 2, f"{tiny} model.vocab_size=2", ["model.vocab_size = 2", '"byte"', ">= 256"]),
        ("gpt2 tokenizer, vocab 256", 2, f"{tiny} data.tokenizer=gpt2", ["model.vocab_size = 256", '"gpt2"', ">= 50257"]),
        ("resume past training.steps", 2,
         f"train --config configs/gpt-tiny.toml --set training.steps=1 --set checkpoint.dir={work}/ck "
         f"--set checkpoint.resume=true --set logging.dir={work}/run-past",
         ["holds step-00000002, past training.steps = 1"]),
        ("latest holding a NUL byte", 2,
         f"train --config configs/gpt-tiny.toml --set training.steps=3 --set checkpoint.dir={work}/ck-nul "
         f"--set checkpoint.resume=true --set logging.dir={work}/run-nul",
         ['latest holds "step-0000\\x00002", not a step-XXXXXXXX name']),
        ("latest naming a missing step", 2,
         f"train --config configs/gpt-tiny.toml --set training.steps=4 --set checkpoint.dir={work}/ck-gone "
         f"--set checkpoint.resume=true --set logging.dir={work}/run-gone",
         [f"{work}/ck-gone/latest names step-00000099, but {work}/ck-gone/step-00000099 does not exist"]),
        ("prepare an empty file", 2, f"data prepare --input {work}/empty.txt --output {work}/p1",
         ["the inputs are empty (1 file(s), 0 bytes)"]),
        ("prepare Latin-1 with gpt2", 2, f"data prepare --tokenizer gpt2 --input {work}/latin1.txt --output {work}/p2",
         ["latin1.txt: not UTF-8 (byte 3 of its text)", "--allow-invalid-utf8"]),
        ("prepare plain text as brown", 2, f"data prepare --format brown --input {work}/plain.txt --output {work}/p3",
         ["plain.txt: not a tagged Brown corpus file"]),
        ("allow-invalid-utf8 with byte", 2,
         f"data prepare --allow-invalid-utf8 --input {work}/plain.txt --output {work}/p4",
         ["--allow-invalid-utf8 is for --tokenizer gpt2 or hf"]),
        ("repeated JSON key", 2, f"compare {work}/dup {work}/a", ['the key "loss" twice']),
        # Item 3: a Hugging Face directory is checked like a training config; weights against it.
        ("hf n_layer 0", 2, f"eval --init-from {work}/hf-n_layer-0 --text README.md",
         ["hf-n_layer-0/config.json: model.layers = 0", "integer >= 1"]),
        ("hf n_layer short of the weights", 2, f"eval --init-from {work}/hf-n_layer-1 --text README.md",
         ["tensor h.1.ln_1.weight is of layer 1 but config.json has n_layer = 1"]),
        ("hf n_head 7", 2, f"eval --init-from {work}/hf-n_head-7 --text README.md",
         ["hf-n_head-7/config.json: model.hidden (64) must be divisible by model.heads (7)"]),
        ("hf untied gpt2", 2, f"eval --init-from {work}/hf-untied --text README.md",
         ["tie_word_embeddings = false", "ties the LM head"]),
        ("hf NaN weight", 2, f"eval --init-from {work}/hf-nan --text README.md",
         ["tensor ln_f.weight holds a non-finite value (nan at flat index 0)"]),
        ("hf unknown tensor", 2, f"eval --init-from {work}/hf-extra --text README.md",
         ["tensor extra.weight is not a GPT-2 parameter"]),
        ("hf llama rms_norm_eps 0", 2, f"eval --init-from {work}/hfl-eps --text README.md",
         ["hfl-eps/config.json: model.layernorm_eps = 0"]),
        ("hf llama rope_theta -1", 2, f"eval --init-from {work}/hfl-theta --text README.md",
         ["hfl-theta/config.json: model.rope_theta = -1"]),
        ("hf llama yarn beside rope_parameters", 2, f"eval --init-from {work}/hfl-yarn --text README.md",
         ['rope_parameters (rope_type "default") and rope_scaling ("yarn") disagree']),
        ("hf llama kv heads 3", 2, f"eval --init-from {work}/hfl-kv --text README.md",
         ["hfl-kv/config.json: model.kv_heads (3) must divide model.heads"]),
        ("hf llama kv heads 0", 2, f"eval --init-from {work}/hfl-kv0 --text README.md",
         ["hfl-kv0/config.json: num_key_value_heads = 0", "expected an integer >= 1 dividing num_attention_heads"]),
        # Issue 64 item 8: an MoE directory's expert count against its weights, and its router's groups,
        # in the file's own key names.
        ("hf mixtral experts beyond the weights", 2, f"eval --init-from {work}/hfm-experts --text README.md",
         ["hfm-experts/config.json: num_local_experts = 16, but the weights hold 8 experts",
          "model.layers.0.block_sparse_moe.gate.weight in", "is [8, 64])"]),
        ("hf qwen2_moe experts short of the weights", 2, f"eval --init-from {work}/hfq-experts --text README.md",
         ["hfq-experts/config.json: num_experts = 4, but the weights hold 8 experts", "model.layers.0.mlp.gate.weight"]),
        ("hf deepseek_v3 experts beyond the weights", 2, f"eval --init-from {work}/hfd-experts --text README.md",
         ["hfd-experts/config.json: n_routed_experts = 16, but the weights hold 8 experts"]),
        ("hf deepseek_v3 n_group 3", 2, f"eval --init-from {work}/hfd-ngroup --text README.md",
         ["hfd-ngroup/config.json: n_group = 3: expected an integer >= 1 dividing n_routed_experts (8)"]),
        ("hf deepseek_v3 topk_group 5", 2, f"eval --init-from {work}/hfd-topk --text README.md",
         ["hfd-topk/config.json: topk_group = 5: expected 1 to n_group (4)"]),
        # A rope factor below 1 (transformers asks >= 1 of llama3 and yarn).
        ("hf llama yarn factor 0.5", 2, f"eval --init-from {work}/hfl-yarn-half --text README.md",
         ["hfl-yarn-half/config.json rope_parameters: factor = 0.5 with rope_type \"yarn\"", "expected a number >= 1"]),
        ("yarn factor 0.5", 2, "train --config configs/deepseek-v3-tiny.toml --set model.rope_factor=0.5",
         ["model.rope_factor = 0.5: expected a finite number >= 1"]),
        ("generate temperature nan", 2, f"generate --init-from {work}/hf --prompt hi --temperature nan",
         ["--temperature nan: expected a finite number >= 0"]),
        # Messages that named the wrong thing (issue 30's "messages that mislead").
        ("WORLD_SIZE without the rest", 2, "train --config configs/gpt-tiny.toml",
         ["the environment sets RANK=0 WORLD_SIZE=2 but not LOCAL_RANK, MASTER_ADDR, MASTER_PORT", "trident launch"],
         {"WORLD_SIZE": "2", "RANK": "0"}),
        ("WORLD_SIZE alone", 2, "train --config configs/gpt-tiny.toml",
         ["the environment sets WORLD_SIZE=2 but not RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT"],
         {"WORLD_SIZE": "2"}),
        # NOTE [MoE keys]: the mixture-of-experts keys do nothing for a dense family; Mixtral's need experts.
        ("experts on llama", 2, "train --config configs/llama-tiny.toml --set model.experts=4",
         ["model.experts is a mixture-of-experts key", "model.arch = \"llama\" is a dense family"]),
        ("mixtral without experts", 2, "train --config configs/mixtral-tiny.toml --set model.experts=0",
         ["model.experts = 0", "needs at least 1"]),
        ("mixtral top-k above experts", 2, "train --config configs/mixtral-tiny.toml --set model.moe_top_k=9",
         ["model.moe_top_k (9) must be at most model.experts (8)"]),
        ("kv_channels on llama", 2, "train --config configs/llama-tiny.toml --set model.kv_channels=16",
         ["model.kv_channels is read by model.arch = \"qwen3_moe\" only"]),
        ("qwen2_moe without a shared expert", 2,
         "train --config configs/qwen2-moe-tiny.toml --set model.moe_shared_ffn_hidden=0",
         ["model.moe_shared_ffn_hidden = 0: qwen2_moe has a shared expert"]),
        ("shared expert on mixtral", 2, "train --config configs/mixtral-tiny.toml --set model.moe_shared_ffn_hidden=8",
         ["model.moe_shared_ffn_hidden is read by model.arch = \"qwen2_moe\" and \"deepseek_v3\" only"]),
        # NOTE [MoE router]: what can route; NOTE [MLA keys]: what latent attention needs.
        ("router groups not dividing the experts", 2,
         "train --config configs/deepseek-v3-tiny.toml --set model.moe_router_groups=3",
         ["model.moe_router_groups (3) must divide model.experts (8)"]),
        ("group top-k above the groups", 2,
         "train --config configs/deepseek-v3-tiny.toml --set model.moe_router_group_topk=5",
         ["model.moe_router_group_topk (5) must be at most model.moe_router_groups (4)"]),
        ("top-k above the chosen groups' experts", 2,
         "train --config configs/deepseek-v3-tiny.toml --set model.moe_router_group_topk=1 --set model.moe_top_k=3",
         ["model.moe_top_k (3) exceeds the experts of model.moe_router_group_topk (1) groups of 2"]),
        ("an unknown score function", 2, "train --config configs/deepseek-v3-tiny.toml --set model.moe_score_function=relu",
         ["model.moe_score_function", "relu"]),
        ("a routed scaling factor of 0", 2,
         "train --config configs/deepseek-v3-tiny.toml --set model.moe_routed_scaling_factor=0",
         ["model.moe_routed_scaling_factor"]),
        ("a bias update without the bias", 2,
         "train --config configs/deepseek-v3-tiny.toml --set model.moe_expert_bias=false",
         ["model.moe_bias_update_rate = 0.001 with model.moe_expert_bias = false: there is no correction bias"]),
        ("DeepSeek-V3 671B on this host", 2, "train --config configs/deepseek-v3.toml --set training.device=cpu",
         ["bytes of host memory", "of which the routed experts' (model.experts = 256"]),
        # NOTE [given keys]: a key the model does not read is refused at its default value too.
        ("top-k at its default on a dense model", 2, "train --config configs/llama-tiny.toml --set model.moe_top_k=2",
         ["model.moe_top_k is a mixture-of-experts key", "model.arch = \"llama\" is a dense family"]),
        ("rope factor at its default without scaling", 2, "train --config configs/llama-tiny.toml --set model.rope_factor=8",
         ["model.rope_factor is read only with model.rope_scaling = \"llama3\" or \"yarn\", got \"none\""]),
        ("router groups on a dense model", 2, "train --config configs/llama-tiny.toml --set model.moe_router_groups=2",
         ["model.moe_router_groups is a mixture-of-experts key"]),
        ("latent attention on llama", 2, "train --config configs/llama-tiny.toml --set model.kv_lora_rank=16",
         ["model.kv_lora_rank is read by model.arch = \"deepseek_v3\" only"]),
        ("yarn key without yarn", 2, "train --config configs/llama-tiny.toml --set model.rope_beta_fast=16",
         ["model.rope_beta_fast is read only with model.rope_scaling = \"yarn\", got \"none\""]),
        ("yarn mscale negative", 2, "train --config configs/deepseek-v3-tiny.toml --set model.rope_mscale=-1",
         ["model.rope_mscale = -1.0: expected a finite number >= 0"]),
        ("yarn betas reversed", 2, "train --config configs/deepseek-v3-tiny.toml --set model.rope_scaling=yarn "
         "--set model.rope_factor=4 --set model.rope_beta_fast=0.5",
         ["model.rope_beta_fast (0.5) must exceed model.rope_beta_slow (1.0)"]),
        ("deepseek_v3 without a kv latent", 2, "train --config configs/deepseek-v3-tiny.toml --set model.kv_lora_rank=0",
         ["model.kv_lora_rank = 0: deepseek_v3 needs the keys' and values' latent width"]),
        ("deepseek_v3 with an odd rotary width", 2,
         "train --config configs/deepseek-v3-tiny.toml --set model.qk_rope_head_dim=7",
         ["model.qk_rope_head_dim = 7: deepseek_v3 needs an even rotary width >= 2"]),
        ("deepseek_v3 with grouped key/value heads", 2, "train --config configs/deepseek-v3-tiny.toml --set model.kv_heads=2",
         ["model.kv_heads = 2 with model.arch = \"deepseek_v3\""]),
        ("deepseek_v3 under context parallelism", 2, "train --config configs/deepseek-v3-tiny.toml --set parallel.cp=2",
         ["parallel.cp = 2 with model.arch = \"deepseek_v3\"", "expected parallel.cp = 1"]),
        ("seq aux loss without a coefficient", 2,
         "train --config configs/mixtral-tiny.toml --set model.moe_aux_loss=seq_aux_loss --set model.moe_aux_loss_coeff=0",
         ["model.moe_aux_loss = \"seq_aux_loss\" with model.moe_aux_loss_coeff = 0"]),
        # NOTE [pooled aux loss]: transformers' softmax definition; no context-parallel pooling.
        ("pooled aux loss with a sigmoid router", 2,
         "train --config configs/deepseek-v3-tiny.toml --set model.moe_aux_loss=pooled_aux_loss "
         "--set model.moe_aux_loss_coeff=0.01",
         ["model.moe_aux_loss = \"pooled_aux_loss\" with model.moe_score_function = \"sigmoid\"",
          "a softmax over the router logits"]),
        ("pooled aux loss under context parallelism", 2,
         "train --config configs/mixtral-tiny.toml --set model.moe_aux_loss=pooled_aux_loss --set parallel.cp=2",
         ["model.moe_aux_loss = \"pooled_aux_loss\" with parallel.cp = 2", "is not built"]),
        ("every layer dense", 2, "train --config configs/qwen2-moe-tiny.toml --set model.moe_first_dense=4",
         ["model.moe_first_dense (4) must be below model.layers (4)"]),
        ("dense layers on mixtral", 2, "train --config configs/mixtral-tiny.toml --set model.moe_first_dense=1",
         ["model.moe_first_dense = 1: Mixtral has experts in every layer"]),
        # NOTE [expert grid]: ep splits the experts over data-parallel replicas.
        ("ep on a dense model", 2, "train --config configs/llama-tiny.toml --set parallel.ep=2",
         ["parallel.ep = 2 with model.arch = \"llama\": a dense family has no experts to split"]),
        ("ep not dividing the experts", 2, "train --config configs/mixtral-tiny.toml --set parallel.ep=3",
         ["parallel.ep (3) must divide model.experts (8)"]),
        ("ep not dividing dp", 2, "train --config configs/mixtral-tiny.toml --set parallel.ep=2",
         ["parallel.ep (2) must divide parallel.dp (1)"]),
        ("all-gather dispatcher without ep", 2,
         "train --config configs/mixtral-tiny.toml --set parallel.moe_dispatcher=allgather",
         ["parallel.moe_dispatcher = \"allgather\" with parallel.ep = 1: every expert is on every rank"]),
        ("drop policy without capacity", 2,
         "train --config configs/mixtral-tiny.toml --set model.moe_token_drop_policy=position",
         ["model.moe_token_drop_policy = \"position\" with model.moe_capacity_factor = 0: no token is dropped"]),
        ("capacity on a dense model", 2, "train --config configs/llama-tiny.toml --set model.moe_capacity_factor=1.0",
         ["model.moe_capacity_factor is a mixture-of-experts key"]),
        ("ep zero", 2, "train --config configs/mixtral-tiny.toml --set parallel.ep=0",
         ["parallel.ep"]),
        # NOTE [overlapped pairs]: pairs hide the experts' all-to-alls; each combination that has
        # none to hide, or would issue them from the wrong thread, is refused saying why.
        ("overlap_moe without ep", 2, "train --config configs/mixtral-tiny.toml --set schedule.overlap_moe=true",
         ["schedule.overlap_moe = true with parallel.ep = 1: there is no expert all-to-all to hide"]),
        ("overlap_moe with recomputation", 2,
         "train --config configs/mixtral-tiny.toml --set parallel.dp=2 --set parallel.ep=2 "
         "--set schedule.overlap_moe=true --set training.recompute=full",
         ["schedule.overlap_moe = true with training.recompute = \"full\": recomputation re-runs a forward"]),
        ("overlap_moe with gpipe", 2,
         "train --config configs/mixtral-tiny.toml --set parallel.dp=2 --set parallel.ep=2 "
         "--set schedule.overlap_moe=true --set schedule.kind=gpipe",
         ["schedule.overlap_moe = true with schedule.kind = \"gpipe\": it runs every forward before any backward"]),
        ("overlap_moe with the all-gather dispatcher", 2,
         "train --config configs/mixtral-tiny.toml --set parallel.dp=2 --set parallel.ep=2 "
         "--set schedule.overlap_moe=true --set parallel.moe_dispatcher=allgather",
         ["schedule.overlap_moe = true with parallel.moe_dispatcher = \"allgather\""]),
        # NOTE [context split]: 2 x cp equal chunks per sequence; cp_comm only with cp > 1.
        ("cp_comm without cp", 2, "train --config configs/llama-tiny.toml --set parallel.cp_comm=a2a",
         ["parallel.cp_comm = \"a2a\" with parallel.cp = 1: no sequence is split"]),
        ("cp not splitting the sequence", 2, "train --config configs/gpt-tiny.toml --set parallel.cp=3",
         ["parallel.cp = 3 needs model.seq_len (32) divisible by 2 x cp = 6"]),
        ("ulysses heads not dividing", 2,
         "train --config configs/llama-tiny.toml --set parallel.cp=8 --set parallel.cp_comm=a2a",
         ["parallel.cp_comm = \"a2a\" scatters each rank's heads over cp", "must be divisible by parallel.cp (8)"]),
        ("overlap_moe with cp", 2,
         "train --config configs/mixtral-tiny.toml --set parallel.cp=2 --set parallel.ep=2 --set schedule.overlap_moe=true",
         ["schedule.overlap_moe = true with parallel.cp = 2: both halves of a pair would exchange keys and values"]),
        ("ep not dividing cp x dp", 2,
         "train --config configs/mixtral-tiny.toml --set parallel.cp=2 --set parallel.ep=8 --set parallel.dp=2",
         ["parallel.ep (8) must divide (tp / etp) x cp x dp = (1 / 1) x 2 x 2 = 4"],
         {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}),
        ("cp zero", 2, "train --config configs/llama-tiny.toml --set parallel.cp=0",
         ["parallel.cp"]),
        ("plan ep 0", 2, "plan --config configs/mixtral-tiny.toml --cluster configs/clusters/dgx-h100.toml --gpus 8 "
         "--layout dp=8,ep=0", ["--layout 'dp=8,ep=0': tp, cp, pp and ep must be >= 1"]),
        # NOTE [expert grid]: parallel.etp is tp or 1, MoE only; the pairs' halves would share the tp group.
        ("etp above tp", 2, "train --config configs/mixtral-tiny.toml --set parallel.etp=2",
         ["parallel.etp (2) must be at most parallel.tp (1)"]),
        ("etp negative", 2, "train --config configs/mixtral-tiny.toml --set parallel.etp=-1",
         ["parallel.etp = -1", "an integer >= 0"]),
        # (rank 0 of a world of 4 or 2: the layout is refused before any rendezvous)
        ("etp not dividing tp", 2, "train --config configs/mixtral-tiny.toml --set parallel.tp=4 --set parallel.etp=3",
         ["parallel.etp (3) must divide parallel.tp (4)"],
         {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}),
        ("ep not dividing tp over etp times dp", 2,
         "train --config configs/mixtral-tiny.toml --set parallel.tp=2 --set parallel.etp=1 --set parallel.ep=4",
         ["parallel.ep (4) must divide (tp / etp) x dp = (2 / 1) x 1 = 2"],
         {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"}),
        ("plan moe-tp with a layout", 2, "plan --config configs/mixtral-tiny.toml --cluster configs/clusters/dgx-h100.toml "
         "--gpus 8 --layout tp=2,dp=4 --moe-tp", ["--moe-tp applies to the search, not to --layout"]),
        ("etp on a dense model", 2, "train --config configs/llama-tiny.toml --set parallel.etp=1",
         ["parallel.etp = 1 with model.arch = \"llama\": a dense family has no experts to split"]),
        ("etp 1 with tokens not splitting over tp", 2,
         "train --config configs/mixtral-tiny.toml --set parallel.tp=2 --set parallel.etp=1 "
         "--set training.micro_batch_size=1 --set model.seq_len=31",
         ["parallel.etp = 1 with parallel.tp = 2: each of the tp / etp = 2 token slices routes an equal part",
          "expected a multiple of 2"]),
        # NOTE [planned overlap], NOTE [overlapped pairs]: the planner's and `trident schedule`'s overlap refusals.
        ("plan overlap without ep", 2, "plan --config configs/mixtral-tiny.toml --cluster configs/clusters/dgx-h100.toml "
         "--gpus 8 --layout dp=8,overlap_moe=1", ["overlap_moe=1 with ep(1): there is no expert all-to-all to hide"]),
        ("plan overlap with cp", 2, "plan --config configs/mixtral-tiny.toml --cluster configs/clusters/dgx-h100.toml "
         "--gpus 8 --layout cp=2,dp=4,ep=2,overlap_moe=1",
         ["overlap_moe=1 with cp(2): a pair's two halves would exchange keys and values"]),
        ("schedule overlap with gpipe", 2, "schedule --kind gpipe -p 2 -m 4 --overlap-moe",
         ["--overlap-moe: --kind gpipe at p=2 m=4 has no backward followed by a forward"]),
        # NOTE [held store port]: the launcher's listening socket is rank 0's alone, and must listen on MASTER_PORT.
        ("store fd on rank 1", 2, "train --config configs/gpt-tiny.toml",
         ["TRIDENT_STORE_FD=0 is set for rank 1", "only rank 0, which hosts the rendezvous store"],
         {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400",
          "TRIDENT_STORE_FD": "0"}),
        ("store fd not open", 2, "train --config configs/gpt-tiny.toml",
         ["TRIDENT_STORE_FD=987 cannot host the rendezvous store: it is not an open file descriptor"],
         {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400",
          "TRIDENT_STORE_FD": "987"}),
        ("store fd not a socket", 2, "train --config configs/gpt-tiny.toml",
         ["TRIDENT_STORE_FD=2 cannot host the rendezvous store: it is not a TCP socket"],
         {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400",
          "TRIDENT_STORE_FD": "2"}),
        ("master port in use", 2,
         f"launch --nproc-per-node 2 --master-port {busy_port} -- {trident} {tiny} parallel.dp=2",
         [f"cannot host the rendezvous store: port {busy_port} is already in use on this node",
          f"MASTER_PORT={busy_port}", "--master-port"]),
        ("exec failure", 2, "launch --nproc-per-node 2 --master-port 0 -- /no/such/program",
         ["diagnosis: rank 0 could not be started (cannot run '/no/such/program': No such file or directory)"]),
        ("checkpoint show, corrupted", 2, f"checkpoint show {work}/ck-corrupt",
         [f"{work}/ck-corrupt/step-00000002/rank-00000.bin:", "fails its checksum", "the file is corrupted"]),
        ("manifest edited to world 2", 2, f"checkpoint show {work}/ck-world2",
         [f"{work}/ck-world2/step-00000002/manifest.json: world = 2, but the step's 1 rank file(s) were "
          "written for world 1"]),
        ("resume, manifest edited to world 2", 2,
         f"train --config configs/gpt-tiny.toml --set training.steps=3 --set checkpoint.dir={work}/ck-world2 "
         f"--set checkpoint.resume=true --set logging.dir={work}/run-world2",
         ["ck-world2/step-00000002/manifest.json: world = 2", "written for world 1"]),
        ("bin_size edited", 2, f"checkpoint show {work}/ck-binsize",
         ["ck-binsize/step-00000002/rank-00000.json: bin_size = 64, but its tensors and blobs end at byte"]),
        ("tokenizer.json []", 2,
         f"data prepare --tokenizer hf --tokenizer-dir {work}/tok-array --input {work}/plain.txt --output {work}/p5",
         ["tok-array/tokenizer.json: the file holds an array, not a JSON object"]),
        ("token header, bytes for a name", 2, f"data info {work}/garbage.bin",
         ['the header\'s tokenizer name "g\\x01\\xfe2" is not a name', "the header is corrupt"]),
        ("token file missing", 2, f"{tiny} data.source=file --set data.path={work}/none-tok",
         [f"cannot open token file {work}/none-tok.train.bin", "`trident data prepare --tokenizer byte",
          f"--output {work}/none-tok`"]),
        ("token header, an unknown name", 2, f"{tiny} data.source=file --set data.path={work}/odd",
         [f"token file {work}/odd.train.bin: the header names tokenizer \"gpX2\", none Trident has"]),
        # Already handled: config and command-line mistakes.
        ("unknown key", 2, f"{tiny} training.stepz=3", ["unknown key training.stepz"]),
        ("set without =", 2, f"{tiny} training.steps", ["--set training.steps: expected section.key=value"]),
        ("missing config", 2, "train --config no/such.toml", ["cannot open config file 'no/such.toml'"]),
        ("train without config", 2, "train", ["--config FILE is required"]),
        ("unknown option", 2, "train --bogus", ["bogus"]),
        ("unknown command", 2, "trian", ["unknown command 'trian'"]),
        ("schedule bad format", 2, "schedule --kind 1f1b -p 2 -m 4 --format pdf", ["--format 'pdf'"]),
        ("schedule unknown kind", 2, "schedule --kind 2f2b -p 2 -m 4", ["2f2b"]),
        ("launch without --", 2, "launch --nproc-per-node 1 true", ["missing `--`"]),
        ("min-nodes on one node", 2, "launch --nproc-per-node 1 --master-port 0 --min-nodes 1 --max-restarts 1 -- true",
         ["--min-nodes 1 needs --nnodes > 1"]),
        ("data info missing file", 2, f"data info {work}/none.bin", ["none.bin"]),
        # The tables' rules (a family's, a kind's chunks: NOTE [config tables]) in every command that reads a config.
        ("llama key under gpt: train", 2, f"{tiny} model.rope_theta=5e5",
         ["model.rope_theta is a llama key: model.arch = \"gpt\" does not read it"]),
        ("llama kv_heads: plan", 2, "plan --config configs/gpt-tiny.toml --cluster "
         "configs/clusters/dgx-a100.toml --gpus 8 --set model.arch=llama --set model.kv_heads=3",
         ["model.kv_heads (3) must divide model.heads (8)"]),
        ("unknown arch: data batches", 2, "data batches --config configs/gpt-tiny.toml --steps 1 --set model.arch=bert",
         ["model.arch = \"bert\": expected one of \"gpt\", \"llama\", \"mixtral\", \"qwen2_moe\", \"qwen3_moe\" or \"deepseek_v3\""]),
        ("zb-v with 3 chunks: checkpoint init", 2, f"checkpoint init --config configs/gpt-tiny.toml --out {work}/ck-init-bad "
         "--set parallel.pp=2 --set schedule.kind=zb-v --set schedule.chunks=3",
         ["schedule.chunks = 3: schedule.kind = \"zb-v\" runs 2 chunks per rank"]),
        ("layers over the kind's chunks: plan profile", 2, f"plan profile --config configs/gpt-tiny.toml --out {work}/p.json "
         "--set parallel.pp=2 --set schedule.kind=zb-v --set model.layers=6",
         ["model.layers (6) must be divisible by parallel.pp (2) x schedule.chunks (2) = 4"]),
        ("data batches without --steps", 2, "data batches --config configs/gpt-tiny.toml", ["--steps N is required"]),
        ("cache_tokenizer not JSON", 2, f"{tiny} data.cache_tokenizer=NullTokenizer",
         ['data.cache_tokenizer = "NullTokenizer": not JSON']),
        ("data batches missing dataset", 2, "data batches --config configs/gpt-tiny.toml --steps 1 --set "
         f"data.source=file --set data.format=megatron --set data.path={work}/none", [f"{work}/none.idx"]),
        # Issue 66: document boundaries and prompt-completion data.
        ("reset keys without an eod", 2, f"{tiny} data.reset_position_ids=true",
         ['data.reset_position_ids = true needs an end-of-document token', "set data.eod_token"]),
        ("reset keys on a Megatron dataset without an eod", 2, "data batches --config configs/gpt-tiny.toml --steps 1 "
         f"--set data.source=file --set data.format=megatron --set data.path={work}/sft-good "
         "--set data.reset_attention_mask=true", ["data.reset_attention_mask = true needs an end-of-document token"]),
        ("documents under context parallelism", 2, f"{tiny} data.eod_token=32 --set data.reset_attention_mask=true "
         "--set parallel.cp=2", ["data.reset_attention_mask = true: documents under context parallelism are not built yet"]),
        ("documents with latent attention", 2, "train --config configs/deepseek-v3-tiny.toml --set training.steps=2 "
         "--set data.eod_token=32 --set data.reset_position_ids=true",
         ["latent attention (MLA) over packed documents is not built yet"]),
        ("completion_only_loss in stream order", 2, f"{tiny} data.completion_only_loss=true",
         ["data.completion_only_loss reads PREFIX.lossmask", 'data.order = "stream"']),
        ("JSONL line without its fields", 2, f"data prepare --format prompt-completion --output-format megatron "
         f"--eod-token 0 --input {work}/sft-nocompletion.jsonl --output {work}/p6",
         ['sft-nocompletion.jsonl:2: has "prompt" but no "completion"']),
        ("JSONL line with neither form", 2, f"data prepare --format prompt-completion --output-format megatron "
         f"--eod-token 0 --input {work}/sft-question.jsonl --output {work}/p7",
         ['sft-question.jsonl:1: expected an object with "prompt" and "completion"']),
        ("empty completion", 2, f"data prepare --format prompt-completion --output-format megatron --eod-token 0 "
         f"--input {work}/sft-empty.jsonl --output {work}/p8", ['sft-empty.jsonl:3: "completion" is empty']),
        ("mask file of another token file", 2, "data batches --config configs/gpt-tiny.toml --steps 1 "
         f"--set data.source=file --set data.format=megatron --set data.path={work}/sft-bad --set "
         "data.completion_only_loss=true", ["sft-bad.lossmask", "does not match its token file"]),
        ("overlong without packing", 2, f"data prepare --format prompt-completion --output-format megatron "
         f"--eod-token 0 --overlong truncate --input {work}/sft-good.jsonl --output {work}/p9",
         ["--overlong truncate", "needs --pack-seq-len"]),
        ("packing plain JSONL", 2, f"data prepare --format jsonl --output-format megatron --pack-seq-len 64 "
         f"--input {work}/sft-good.jsonl --output {work}/p10", ["--pack-seq-len packs prompt-completion examples"]),
        ("prompt-completion to a token file", 2, f"data prepare --format prompt-completion --eod-token 0 "
         f"--input {work}/sft-good.jsonl --output {work}/p11", ["needs --output-format megatron"]),
        ("an example longer than the pack", 2, f"data prepare --format prompt-completion --output-format megatron "
         f"--eod-token 0 --pack-seq-len 8 --input {work}/sft-good.jsonl --output {work}/p12",
         ["sft-good.jsonl:1: the example's 16 tokens do not fit a packed sequence of 8", "--overlong truncate"]),
        ("compare malformed", 2, f"compare {work}/bad {work}/a", ["bad/metrics.jsonl:2: invalid JSON", "one flat JSON object of numbers per line"]),
        ("compare missing run", 2, f"compare {work}/none {work}/a", ["cannot open"]),
        # Issue 64 item 8: the user's mistakes that exited 1 (NOTE [exit statuses]).
        ("cuda without a device", 2, f"{tiny} training.device=cuda --set logging.dir={work}/run-cuda",
         ['training.device = "cuda" but this process sees 0 CUDA devices'], {"CUDA_VISIBLE_DEVICES": ""}),
        ("logging.dir under a file", 2, f"{tiny} logging.dir={work}/plain.txt/run",
         [f"cannot create logging.dir '{work}/plain.txt/run'"]),
        ("export a checkpoint onto a file", 2, f"export --checkpoint {work}/ck --format hf-gpt2 --out {work}/plain.txt",
         [f"--out '{work}/plain.txt' is a file: expected a directory"]),
        ("hf eval of a missing text", 2, f"eval --init-from {work}/hf --text {work}/none.txt",
         [f"--text '{work}/none.txt': cannot read it (no such file)"]),
        ("hf init_from of another width", 2, f"{tiny} model.init_from={work}/hf --set model.hidden=128",
         [f"Hugging Face model {work}/hf does not fit the config", "model.hidden"]),
        # Item 5: a difference is 1, not 2; so is a rank that fails.
        ("compare differ", 1, f"compare {work}/a {work}/b", []),
        ("a failed rank", 1, "launch --nproc-per-node 1 --master-port 0 -- sh -c 'exit 1'", ["exited with status 1"]),
    ]


RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                  "GROUP_RANK", "NODE_RANK", "TRIDENT_STORE_FD")


def edit_json(path, edit):
    import json
    doc = json.load(open(path))
    edit(doc)
    json.dump(doc, open(path, "w"), indent=1)


def edit_checkpoints(work):
    """Copies of the step-2 checkpoint in work/ck: a flipped byte in its data, a manifest
    saying world 2 (one rank wrote it), a rank index with another bin_size."""
    step = "step-00000002"
    for name in ("ck-corrupt", "ck-world2", "ck-binsize"):
        shutil.copytree(os.path.join(work, "ck"), os.path.join(work, name))
    with open(os.path.join(work, "ck-corrupt", step, "rank-00000.bin"), "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last ^ 0x10]))
    edit_json(os.path.join(work, "ck-world2", step, "manifest.json"), lambda m: m.update(world=2))
    edit_json(os.path.join(work, "ck-binsize", step, "rank-00000.json"), lambda m: m.update(bin_size=64))


def make_broken_files(work):
    """A tokenizer.json holding `[]`; token files (NOTE [token file format]: a 128-byte header,
    the tokenizer's name at byte 40) naming no tokenizer, in bytes and in letters."""
    import struct
    os.makedirs(os.path.join(work, "tok-array"))
    open(os.path.join(work, "tok-array", "tokenizer.json"), "w").write("[]\n")

    def token_file(path, name):
        tokens = bytes(range(64)) * 4
        header = b"TRIDTOK\0" + struct.pack("<IIQQII", 1, 2, len(tokens), 1, 256, 0xFFFFFFFF)
        header = (header + name.ljust(32, b"\0")).ljust(128, b"\0")
        open(path, "wb").write(header + struct.pack(f"<{len(tokens)}H", *tokens))
    token_file(os.path.join(work, "garbage.bin"), b"g\x01\xfe2")
    for split in ("train", "val"):
        token_file(os.path.join(work, f"odd.{split}.bin"), b"gpX2")


def make_sft_files(trident, work):
    """Prompt-completion JSONL (good, a line without its completion, one with neither form, an
    empty completion), a dataset prepared from the good one (sft-good) and a copy whose loss-mask
    file counts one token fewer (sft-bad)."""
    import json
    good = [{"prompt": "What is 2+2? ", "completion": "4."}, {"text": "A plain document."}]
    lines = {"good": good, "nocompletion": good[:1] + [{"prompt": "Hi"}],
             "question": [{"question": "Hi"}], "empty": good + [{"prompt": "Hi", "completion": ""}]}
    for name, rows in lines.items():
        open(os.path.join(work, f"sft-{name}.jsonl"), "w").write("".join(json.dumps(r) + "\n" for r in rows))
    subprocess.run([trident, "data", "prepare", "--format", "prompt-completion", "--output-format", "megatron",
                    "--eod-token", "0", "--input", os.path.join(work, "sft-good.jsonl"), "--output",
                    os.path.join(work, "sft-good")], check=True, stdout=subprocess.DEVNULL)
    for ext in ("bin", "idx"):
        shutil.copy(os.path.join(work, f"sft-good.{ext}"), os.path.join(work, f"sft-bad.{ext}"))
    mask = open(os.path.join(work, "sft-good.lossmask"), "rb").read()
    count = int.from_bytes(mask[8:16], "little") - 1
    open(os.path.join(work, "sft-bad.lossmask"), "wb").write(mask[:8] + count.to_bytes(8, "little") + mask[16:-1])


def edited(src, dst, config=None, tensors=None):
    """A copy of Hugging Face directory src with config.json and/or model.safetensors edited."""
    import json
    shutil.copytree(src, dst)
    if config:
        path = os.path.join(dst, "config.json")
        c = json.load(open(path))
        config(c)
        json.dump(c, open(path, "w"))
    if tensors:
        from safetensors.numpy import load_file, save_file
        path = os.path.join(dst, "model.safetensors")
        t = load_file(path)
        tensors(t)
        save_file(t, path)


def make_hf_dirs(trident, source, work):
    """GPT-2, Llama and MoE directories written by `trident export`, and broken copies of them."""
    import numpy as np
    for arch, config, fmt in (("hf", "gpt-tiny", "hf-gpt2"), ("hfl", "llama-tiny", "hf-llama"),
                              ("hfm", "mixtral-tiny", "hf-mixtral"), ("hfq", "qwen2-moe-tiny", "hf-qwen2-moe"),
                              ("hfd", "deepseek-v3-tiny", "hf-deepseek-v3")):
        ck = os.path.join(work, f"ck-{arch}")
        subprocess.run([trident, "train", "--config", f"configs/{config}.toml", "--set", "training.steps=1",
                        "--set", f"checkpoint.dir={ck}", "--set", f"logging.dir={work}/run-{arch}"],
                       cwd=source, check=True, stdout=subprocess.DEVNULL)
        subprocess.run([trident, "export", "--checkpoint", ck, "--format", fmt, "--out", os.path.join(work, arch)],
                       cwd=source, check=True, stdout=subprocess.DEVNULL)
    hf, hfl = os.path.join(work, "hf"), os.path.join(work, "hfl")
    edited(hf, f"{work}/hf-n_layer-0", config=lambda c: c.update(n_layer=0))
    edited(hf, f"{work}/hf-n_layer-1", config=lambda c: c.update(n_layer=1))
    edited(hf, f"{work}/hf-n_head-7", config=lambda c: c.update(n_head=7))
    edited(hf, f"{work}/hf-untied", config=lambda c: c.update(tie_word_embeddings=False))

    def nan(t):
        name = next(k for k in t if k.endswith("ln_f.weight"))
        t[name] = t[name].copy()
        t[name][0] = np.nan
    edited(hf, f"{work}/hf-nan", tensors=nan)
    edited(hf, f"{work}/hf-extra", tensors=lambda t: t.update({"extra.weight": np.zeros((2, 2), np.float32)}))
    edited(hfl, f"{work}/hfl-eps", config=lambda c: c.update(rms_norm_eps=0))
    edited(hfl, f"{work}/hfl-theta", config=lambda c: c.update(rope_theta=-1, rope_parameters=None))
    edited(hfl, f"{work}/hfl-yarn",
           config=lambda c: c.update(rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                     rope_scaling={"rope_type": "yarn", "factor": 4.0}))
    edited(hfl, f"{work}/hfl-kv", config=lambda c: c.update(num_key_value_heads=3))
    edited(hfl, f"{work}/hfl-kv0", config=lambda c: c.update(num_key_value_heads=0))
    edited(hfl, f"{work}/hfl-yarn-half", config=lambda c: c.update(rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 0.5, "original_max_position_embeddings": 16}))
    # Each MoE directory holds 8 experts per layer (the tiny presets'); its config.json says otherwise.
    hfm, hfq, hfd = (os.path.join(work, a) for a in ("hfm", "hfq", "hfd"))
    edited(hfm, f"{work}/hfm-experts", config=lambda c: c.update(num_local_experts=16))
    edited(hfq, f"{work}/hfq-experts", config=lambda c: c.update(num_experts=4))
    edited(hfd, f"{work}/hfd-experts", config=lambda c: c.update(n_routed_experts=16))
    edited(hfd, f"{work}/hfd-ngroup", config=lambda c: c.update(n_group=3))
    edited(hfd, f"{work}/hfd-topk", config=lambda c: c.update(topk_group=5))


def main():
    args = sys.argv[1:]
    only = None
    if "--only" in args:
        i = args.index("--only")
        only = args[i + 1]
        del args[i:i + 2]
    listing = "--list" in args
    args = [a for a in args if a != "--list"]
    build, source = args[0], args[1]
    trident = os.path.join(build, "trident")
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="badinput-") as work:
        row = '{"step": 1, "loss": %s, "grad_norm": 1.0}'
        for d, rows in (("a", [row % "5.0"]), ("b", [row % "6.0"]), ("bad", [row % "5.0", '{"step": 2, "lo']),
                        ("dup", ['{"step": 1, "loss": 5.0, "loss": 6.0, "grad_norm": 1.0}'])):
            os.makedirs(os.path.join(work, d))
            with open(os.path.join(work, d, "metrics.jsonl"), "w") as f:
                f.write("\n".join(rows) + "\n")
        # A port something else listens on (the rendezvous store cannot have it).
        busy = socket.socket()
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        table = [c for c in cases(work, cores, os.path.abspath(trident), busy.getsockname()[1])
                 if only is None or only in c[0]]
        make_broken_files(work)
        if not listing and any("sft-" in c[2] for c in table):
            make_sft_files(trident, work)
        open(os.path.join(work, "empty.toml"), "w").write("# nothing set\n\n")
        open(os.path.join(work, "empty.txt"), "w").close()
        open(os.path.join(work, "latin1.txt"), "wb").write(b"caf\xe9 au lait\n")
        open(os.path.join(work, "plain.txt"), "w").write("Just some plain text.\n")
        if not listing and any(w in c[0] for c in table for w in ("resume", "latest", "checkpoint", "manifest", "bin_size")):
            # A step-2 checkpoint to resume from, and copies whose `latest` holds a NUL byte or names a missing step.
            subprocess.run([trident, "train", "--config", "configs/gpt-tiny.toml", "--set", "training.steps=2",
                            "--set", f"checkpoint.dir={work}/ck", "--set", f"logging.dir={work}/run-ck"],
                           cwd=source, check=True, stdout=subprocess.DEVNULL)
            shutil.copytree(os.path.join(work, "ck"), os.path.join(work, "ck-nul"))
            with open(os.path.join(work, "ck-nul", "latest"), "wb") as f:
                f.write(b"step-0000\x00002\n")
            shutil.copytree(os.path.join(work, "ck"), os.path.join(work, "ck-gone"))
            with open(os.path.join(work, "ck-gone", "latest"), "w") as f:
                f.write("step-00000099\n")
            edit_checkpoints(work)
        if not listing and any(c[0].startswith("hf") or "temperature" in c[0] for c in table):
            make_hf_dirs(trident, source, work)
        if listing:
            for name, status, cmd, words, *_ in table:
                print(f"{name}: exit {status}: trident {cmd}")
            return 0
        failures = []
        start = time.monotonic()
        # No rank variables from the caller's environment: a case sets its own.
        base_env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
        for name, status, cmd, words, *extra in table:
            t0 = time.monotonic()
            env = dict(base_env, TRIDENT_RDZV_TIMEOUT_S="10", **(extra[0] if extra else {}))
            try:
                r = subprocess.run([trident] + shlex.split(cmd), cwd=source, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=MAX_SECONDS * 3, env=env)
                out, rc = r.stdout.decode(errors="replace"), r.returncode
            except subprocess.TimeoutExpired as e:
                out, rc = (e.stdout or b"").decode(errors="replace"), "timeout"
            secs = time.monotonic() - t0
            problems = []
            if rc != status:
                problems.append(f"exit {rc}, expected {status}")
            lines = [l for l in out.splitlines() if l.strip()]
            if words and not any(all(w in l for w in words) for l in lines):
                problems.append(f"no one line holds all of {words}")
            for mark in TRACE_MARKS:
                if mark in out:
                    problems.append(f"a stack trace ({mark!r})")
            # Under `trident launch` its own verdict ("trident launch: ...") follows the ranks' lines.
            own = [l for l in lines if not (cmd.startswith("launch ") and l.startswith("trident launch: "))]
            if status == 2 and len(own) > 2:
                problems.append(f"{len(own)} lines, expected one error line")
            if secs > MAX_SECONDS:
                problems.append(f"took {secs:.1f} s, expected under {MAX_SECONDS} s")
            verdict = "ok  " if not problems else "FAIL"
            print(f"{verdict} {secs:5.2f}s exit {rc}  {name}: trident {cmd}")
            if problems:
                failures.append(name)
                print("       " + "; ".join(problems))
                print("       output: " + "\n               ".join(out.splitlines()[-6:]))
        total = time.monotonic() - start
        print(f"badinput: {len(table) - len(failures)} of {len(table)} cases passed in {total:.1f} s")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
