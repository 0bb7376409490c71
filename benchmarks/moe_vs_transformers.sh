#!/usr/bin/env bash
# Training throughput of `trident train` on configs/mixtral-tiny.toml against
# transformers' MixtralForCausalLM at the same sizes (benchmarks/eager_mixtral.py in
# the project's .venv), one thread, the same batches (micro-batch 2, global batch 16,
# seq 32) from the Brown corpus as bytes (data/brown-bytes, made here when missing),
# tp = pp = dp = 1, the same allocator policy. transformers runs twice per round: its
# "eager" experts (a loop over the experts that received tokens) and its default
# "grouped_mm" (on the CPU its per-expert fallback op). The contenders alternate
# (T E G T E G ...); we report the median of per-round ratios. Then bench_moe_layer
# times one MoE layer and its parts (routing, permuting, experts) at the preset's
# micro-batch, and the share of Trident's step they take: a part's forward + backward
# x layers x micro-batches per step over the step time.
#
# Usage: benchmarks/moe_vs_transformers.sh [BUILD_DIR]    (default: build)
# Environment: ROUNDS (5), STEPS (60), WARMUP (10: steps left out of the timing),
#   REPS (21: bench_moe_layer's), OUT (benchmarks/results/moe_vs_transformers.txt).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}"
rounds="${ROUNDS:-5}" steps="${STEPS:-60}" warmup="${WARMUP:-10}" reps="${REPS:-21}"
out="${OUT:-benchmarks/results/moe_vs_transformers.txt}"
trident="$build/trident" layer="$build/benchmarks/bench_moe_layer" python=.venv/bin/python3
source benchmarks/bench_common.sh
bench_need moe_vs_transformers "$trident" "$layer" "$python"
data=data/brown-bytes
bench_brown_tokens "$trident" byte "$data"
bench_workdir
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824

run_trident() {  # $1: tag
  "$trident" train --config configs/mixtral-tiny.toml --set training.steps="$steps" --set training.eval_interval=0 \
    --set training.threads=1 --set parallel.dp=1 --set data.source=file --set data.path="$data" \
    --set logging.log_interval=1 --set logging.dir="$work/$1" > "$work/$1.log" 2>&1
}
run_hf() {  # $1: tag, $2: transformers' experts implementation; the preset's sizes, batches and optimizer
  "$python" benchmarks/eager_mixtral.py --data "$data" --layers 4 --hidden 64 --heads 8 --kv-heads 4 --ffn 48 \
    --experts 8 --top-k 2 --seq 32 --vocab 256 --micro-batch 2 --global-batch 16 --lr 1e-3 --steps "$steps" \
    --warmup "$warmup" --threads 1 --experts-impl "$2" > "$work/$1.log" 2>&1
}
fail() { echo "moe_vs_transformers: $1 failed:" >&2; tail -20 "$work/$1.log" >&2; exit 1; }
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds"
  run_trident "trident-$r" || fail "trident-$r"
  run_hf "eager-$r" eager || fail "eager-$r"
  run_hf "grouped-$r" grouped_mm || fail "grouped-$r"
done
"$layer" --reps "$reps" > "$work/layer.txt" 2> "$work/layer.log" || fail layer

python3 - "$work" "$rounds" "$warmup" > "$work/summary.txt" <<'EOF'
import json, re, statistics, sys
work, rounds, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
med = statistics.median

def trident(tag):  # tokens over seconds of the steps after the warm-up, and the mean step time
    steps = [json.loads(l) for l in open(f"{work}/{tag}/metrics.jsonl")][warmup:]
    secs = sum(s["step_time_s"] for s in steps)
    return sum(s["tokens_per_s"] * s["step_time_s"] for s in steps) / secs, secs / len(steps)

def hf(tag):
    return float(re.search(r"tokens_per_s ([0-9.]+)", open(f"{work}/{tag}.log").read()).group(1))

t = [trident(f"trident-{r}") for r in range(1, rounds + 1)]
e = [hf(f"eager-{r}") for r in range(1, rounds + 1)]
g = [hf(f"grouped-{r}") for r in range(1, rounds + 1)]
tok = [a for a, _ in t]
print(f"{'trident tok/s':>14} {'hf eager tok/s':>15} {'hf grouped tok/s':>17} {'trident/eager':>14} {'trident/grouped':>16}"
      "   per round trident/eager")
print(f"{med(tok):>14.1f} {med(e):>15.1f} {med(g):>17.1f} {med(a / b for a, b in zip(tok, e)):>14.3f} "
      f"{med(a / b for a, b in zip(tok, g)):>16.3f}   {[round(a / b, 3) for a, b in zip(tok, e)]}")
print("goal: trident/eager >= 1.5 (issue 48); ratios are medians of per-round ratios")
print()
text = open(f"{work}/layer.txt").read()
print(text.split("moe_layer:")[0].rstrip())
f = dict(zip(*[iter(re.search(r"moe_layer: (.*)", text).group(1).split())] * 2))
step = med(s for _, s in t)
layers, micro_batches = 4, 16 // 2  # configs/mixtral-tiny.toml
share = lambda secs: 100.0 * float(secs) * layers * micro_batches / step
print(f"share of Trident's step ({step * 1e3:.1f} ms, median over rounds; x {layers} layers x {micro_batches} "
      f"micro-batches): routing {share(f['route']):.1f}%, permuting {share(f['permute']):.1f}%, "
      f"experts {share(f['experts']):.1f}%, the MoE layers in all {share(f['layer']):.1f}%")
EOF

{
  echo "# trident train vs transformers' MixtralForCausalLM on mixtral-tiny: tp=pp=dp=1, 1 thread, Brown corpus as bytes"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores, $(uname -sr)"
  echo "load average at start: $load_start, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "torch: $("$python" -c 'import torch; print(torch.__version__)'), transformers: $("$python" -c 'import transformers; print(transformers.__version__)')"
  echo "command: benchmarks/moe_vs_transformers.sh $build (ROUNDS=$rounds STEPS=$steps WARMUP=$warmup REPS=$reps)"
  echo "run: $rounds rounds x $steps steps (first $warmup untimed), micro-batch 2, global batch 16, seq 32"
  echo "transformers: its experts as \"eager\" (a loop over the experts hit) and \"grouped_mm\" (its default), sdpa attention, its router aux loss, torch AdamW"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- models parallel core runtime framework schedules || echo ' (+ local changes)')"
  echo
  cat "$work/summary.txt"
} | tee "$out"
