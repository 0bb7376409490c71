#!/usr/bin/env bash
# Training throughput of `trident train` against PyTorch eager (benchmarks/eager_gpt.py
# in the project's .venv) on the tiny presets, gpt-tiny and llama-tiny, where the
# time per operation rather than the matmuls sets the pace (as small kernels do on
# a GPU). Both read the Brown corpus as bytes (data/brown-bytes, made here when
# missing), tp = pp = dp = 1, one thread, the same allocator policy. PyTorch runs
# twice per round: torch.optim.AdamW as a user writes it (its CPU default, a
# per-parameter loop) and with fused=True (foreach clipping). The contenders
# alternate (T E F T E F ...); we report the median of per-round ratios.
# Builds nothing.
#
# Usage: benchmarks/tiny_vs_eager.sh [BUILD_DIR]    (default: build)
# Environment: ROUNDS (5), STEPS (60), WARMUP (10: steps left out of the timing),
#   OUT (benchmarks/results/tiny_vs_eager.txt).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}"
rounds="${ROUNDS:-5}" steps="${STEPS:-60}" warmup="${WARMUP:-10}"
out="${OUT:-benchmarks/results/tiny_vs_eager.txt}"
trident="$build/trident" python=.venv/bin/python3
source benchmarks/bench_common.sh
bench_need tiny_vs_eager "$trident" "$python"
data=data/brown-bytes
bench_brown_tokens "$trident" byte "$data"
bench_workdir

# The sizes each contender gets, from the presets (configs/gpt-tiny.toml, configs/llama-tiny.toml).
declare -A eager_args=(
  [gpt-tiny]="--arch gpt --layers 8 --hidden 64 --heads 8 --ffn 256 --seq 32 --vocab 256"
  [llama-tiny]="--arch llama --layers 8 --hidden 64 --heads 8 --kv-heads 4 --ffn 176 --seq 32 --vocab 256"
)
run_trident() {  # $1: model, $2: tag
  "$trident" train --config "configs/$1.toml" --set training.steps="$steps" --set training.eval_interval=0 \
    --set training.threads=1 --set parallel.dp=1 --set data.source=file --set data.path="$data" \
    --set logging.log_interval=1 --set logging.dir="$work/$2" > "$work/$2.log" 2>&1
}
run_eager() {  # $1: model, $2: tag, $3: --adamw choice; the presets' batches and optimizer settings
  # shellcheck disable=SC2086
  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824 "$python" benchmarks/eager_gpt.py --data "$data" \
    ${eager_args[$1]} --micro-batch 2 --global-batch 16 --lr 1e-3 --steps "$steps" --warmup "$warmup" \
    --threads 1 --adamw "$3" > "$work/$2.log" 2>&1
}
fail() { echo "tiny_vs_eager: $1 failed:" >&2; tail -20 "$work/$1.log" >&2; exit 1; }
for model in gpt-tiny llama-tiny; do
  for r in $(seq 1 "$rounds"); do
    echo "$model round $r/$rounds"
    run_trident "$model" "$model-trident-$r" || fail "$model-trident-$r"
    run_eager "$model" "$model-eager-$r" default || fail "$model-eager-$r"
    run_eager "$model" "$model-fused-$r" fused || fail "$model-fused-$r"
  done
done

python3 - "$work" "$rounds" "$warmup" > "$work/summary.txt" <<'EOF'
import json, re, statistics, sys
work, rounds, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
med = statistics.median

def trident(tag):  # tokens over seconds of the steps after the warm-up, from metrics.jsonl
    steps = [json.loads(l) for l in open(f"{work}/{tag}/metrics.jsonl")][warmup:]
    secs = sum(s["step_time_s"] for s in steps)
    return sum(s["tokens_per_s"] * s["step_time_s"] for s in steps) / secs

def eager(tag):
    return float(re.search(r"tokens_per_s ([0-9.]+)", open(f"{work}/{tag}.log").read()).group(1))

print(f"{'model':<11} {'trident tok/s':>14} {'eager tok/s':>12} {'fused tok/s':>12} {'trident/eager':>14} "
      f"{'trident/fused':>14}   per round trident/eager")
for model in ["gpt-tiny", "llama-tiny"]:
    t = [trident(f"{model}-trident-{r}") for r in range(1, rounds + 1)]
    e = [eager(f"{model}-eager-{r}") for r in range(1, rounds + 1)]
    f = [eager(f"{model}-fused-{r}") for r in range(1, rounds + 1)]
    print(f"{model:<11} {med(t):>14.1f} {med(e):>12.1f} {med(f):>12.1f} {med(a / b for a, b in zip(t, e)):>14.3f} "
          f"{med(a / b for a, b in zip(t, f)):>14.3f}   {[round(a / b, 3) for a, b in zip(t, e)]}")
print("goal: trident/eager >= 1.3 on both (issue 31); ratios are medians of per-round ratios")
EOF

{
  echo "# trident train vs PyTorch eager on the tiny presets: tp=pp=dp=1, 1 thread, Brown corpus as bytes"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores, $(uname -sr)"
  echo "load average at start: $load_start, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "libtorch: $("$python" -c 'import torch; print(torch.__version__)') (PyPI torch in .venv)"
  echo "command: benchmarks/tiny_vs_eager.sh $build (ROUNDS=$rounds STEPS=$steps WARMUP=$warmup)"
  echo "run: $rounds rounds x $steps steps (first $warmup untimed), micro-batch 2, global batch 16, seq 32"
  echo "eager: torch.optim.AdamW with its CPU default (eager) and with fused=True (fused)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- models parallel core runtime framework schedules || echo ' (+ local changes)')"
  echo
  cat "$work/summary.txt"
} | tee "$out"
