#!/usr/bin/env bash
# Training throughput of `trident train` against the plain libtorch loop
# (benchmarks/bench_libtorch_loop.cpp) and against PyTorch eager in Python
# (benchmarks/eager_gpt.py, the project's .venv) on gpt-small-brown at
# tp = pp = dp = 1, one thread each. The three alternate (T L E T L E ...) so
# that load from other work on the machine falls on all; we report the median
# of per-round ratios trident / libtorch and trident / eager, plus Trident's MFU
# against the 1-thread matmul rate it measures at start-up with libtorch's BLAS
# (named in the results). Builds nothing.
#
# Usage: benchmarks/run_train_bench.sh [BUILD_DIR]    (default: build)
# Environment: ROUNDS (3), STEPS (24), WARMUP (4: steps left out of the
#   timing), OUT (benchmarks/results/train_vs_libtorch.txt),
#   MALLOC_VARIANT=1 adds the same pair run with glibc's mmap of large
#   blocks turned off (see benchmarks/README.md), BASELINE=PATH another
#   `trident` binary (e.g. a copy of an earlier build, its trident-torch next
#   to it) run in every round too, for a before/after ratio from one run.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}"
rounds="${ROUNDS:-3}" steps="${STEPS:-24}" warmup="${WARMUP:-4}"
out="${OUT:-benchmarks/results/train_vs_libtorch.txt}"
trident="$build/trident" loop="$build/benchmarks/bench_libtorch_loop" python=.venv/bin/python3
source benchmarks/bench_common.sh
bench_need run_train_bench "$trident" "$loop" "$python"
data=data/brown-gpt2
bench_brown_tokens "$trident" gpt2 "$data"
bench_workdir

# The run's sizes come from the preset; the loop gets the same ones.
config=configs/gpt-small-brown.toml
common=(--set training.steps="$steps" --set training.warmup_steps=2 --set training.eval_interval=0
        --set training.threads=1 --set parallel.tp=1 --set parallel.pp=1 --set parallel.dp=1
        --set logging.log_interval=1)  # every step: the timed means read metrics.jsonl rows

run_trident() {  # $1: tag, $2: binary (default $trident); prints nothing, leaves $work/$1/metrics.jsonl and $work/$1.log
  "${2:-$trident}" train --config "$config" "${common[@]}" --set logging.dir="$work/$1" > "$work/$1.log" 2>&1
}
run_loop() {  # $1: tag
  # The loop gets the allocator policy trident sets for itself in-process
  # (framework/machine.cpp, NOTE [malloc and large tensors]), so the ratio
  # compares the training code, not glibc's mmap threshold.
  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824 "$loop" --data "$data" --layers 4 --hidden 128 --heads 4 --ffn 512 --seq 128 --vocab 50304 \
    --micro-batch 4 --global-batch 16 --lr 3e-3 --steps "$steps" --warmup "$warmup" > "$work/$1.log" 2>&1
}

run_eager() {  # $1: tag; the same sizes, batches, optimizer, thread count and allocator policy
  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824 "$python" benchmarks/eager_gpt.py --data "$data" --layers 4 --hidden 128 --heads 4 --ffn 512 --seq 128 \
    --vocab 50304 --micro-batch 4 --global-batch 16 --lr 3e-3 --steps "$steps" --warmup "$warmup" --threads 1 \
    > "$work/$1.log" 2>&1
}

contend() {  # $1: run function, $2: tag; a failure shows the contender's output
  "$1" "$2" || { echo "run_train_bench: $2 failed:" >&2; tail -20 "$work/$2.log" >&2; exit 1; }
}
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds: trident"; contend run_trident "trident-$r"
  echo "round $r/$rounds: libtorch loop"; contend run_loop "loop-$r"
  echo "round $r/$rounds: PyTorch eager"; contend run_eager "eager-$r"
  if [[ -n "${BASELINE:-}" ]]; then
    echo "round $r/$rounds: baseline trident ($BASELINE)"
    run_trident "base-$r" "$BASELINE" || { echo "run_train_bench: the baseline failed:" >&2; tail -20 "$work/base-$r.log" >&2; exit 1; }
  fi
  if [[ "${MALLOC_VARIANT:-0}" == 1 ]]; then
    echo "round $r/$rounds: trident, then libtorch loop, no mmap for large blocks"
    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296 run_trident "trident-nommap-$r"
    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296 run_loop "loop-nommap-$r"
  fi
done

mkdir -p "$(dirname "$out")"
python3 - "$work" "$rounds" "$warmup" "${MALLOC_VARIANT:-0}" "${BASELINE:-}" > "$work/summary.txt" <<'EOF'
import json, re, statistics, sys
work, rounds, warmup, variant = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
baseline = sys.argv[5]

def trident(tag):
    steps = [json.loads(l) for l in open(f"{work}/{tag}/metrics.jsonl")][warmup:]
    secs = sum(s["step_time_s"] for s in steps)
    tok = sum(s["tokens_per_s"] * s["step_time_s"] for s in steps) / secs  # tokens / seconds
    flops_per_tok = steps[0]["tflops"] * 1e12 / steps[0]["tokens_per_s"]
    peak = float(re.search(r"peak ([0-9.e+]+) GFLOP/s", open(f"{work}/{tag}.log").read()).group(1)) * 1e9
    mfu = statistics.mean(s["mfu"] for s in steps)
    return tok, mfu, peak, flops_per_tok

def loop(tag):
    m = re.search(r"tokens_per_s ([0-9.]+)", open(f"{work}/{tag}.log").read())
    return float(m.group(1))

t = [trident(f"trident-{r}") for r in range(1, rounds + 1)]
l = [loop(f"loop-{r}") for r in range(1, rounds + 1)]
e = [loop(f"eager-{r}") for r in range(1, rounds + 1)]
med = statistics.median
t_tok, l_tok = med(x[0] for x in t), med(l)
print(f"per round (tokens/s): trident {[round(x[0], 1) for x in t]}  libtorch {[round(x, 1) for x in l]}  "
      f"eager {[round(x, 1) for x in e]}")
print(f"per round (trident/libtorch): {[round(a[0] / b, 3) for a, b in zip(t, l)]}")
print(f"per round (trident/eager): {[round(a[0] / b, 3) for a, b in zip(t, e)]}")
print(f"per round peak (GFLOP/s, 1 thread 1024^3 matmul): {[round(x[2] / 1e9, 1) for x in t]}")
print(f"median tokens/s: trident {t_tok:.1f}, libtorch loop {l_tok:.1f}")
print(f"median tokens/s: PyTorch eager {med(e):.1f}")
print(f"ratio trident/libtorch, median of per-round ratios: {med(a[0] / b for a, b in zip(t, l)):.3f}   (goal >= 1.0)")
print(f"ratio trident/eager, median of per-round ratios: {med(a[0] / b for a, b in zip(t, e)):.3f}   (goal >= 1.5)")
print(f"trident MFU (median of per-run means): {100 * med(x[1] for x in t):.1f} %   (goal >= 50 %)")
print(f"libtorch loop MFU, same FLOP count and peak: "
      f"{100 * med(b * a[3] / a[2] for a, b in zip(t, l)):.1f} %")
print(f"model FLOPs per token (trainer's model_flops_per_step / tokens): {t[0][3] / 1e6:.2f} MFLOP")
if baseline:
    b = [trident(f"base-{r}") for r in range(1, rounds + 1)]
    print(f"baseline trident ({baseline}): per round (tokens/s) {[round(x[0], 1) for x in b]}")
    print(f"per round (trident/baseline): {[round(a[0] / c[0], 3) for a, c in zip(t, b)]}")
    print(f"per round (baseline/libtorch): {[round(c[0] / d, 3) for c, d in zip(b, l)]}")
    print(f"per round (baseline/eager): {[round(c[0] / d, 3) for c, d in zip(b, e)]}")
    print(f"ratio trident/baseline, median of per-round ratios: {med(a[0] / c[0] for a, c in zip(t, b)):.3f}")
if variant:
    v = [trident(f"trident-nommap-{r}") for r in range(1, rounds + 1)]
    w = [loop(f"loop-nommap-{r}") for r in range(1, rounds + 1)]
    print(f"with MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4G (both contenders):")
    print(f"  per round (tokens/s): trident {[round(x[0], 1) for x in v]}  libtorch {[round(x, 1) for x in w]}")
    print(f"  median tokens/s: trident {med(x[0] for x in v):.1f}, libtorch loop {med(w):.1f}, "
          f"median of per-round ratios {med(a[0] / b for a, b in zip(v, w)):.3f}")
    print(f"  trident MFU {100 * med(x[1] for x in v):.1f} %, libtorch loop MFU "
          f"{100 * med(b * a[3] / a[2] for a, b in zip(v, w)):.1f} %")
EOF

{
  echo "# trident train vs plain libtorch loop: gpt-small-brown, tp=pp=dp=1, 1 thread"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores, $(uname -sr)"
  echo "load average at start: $load_start, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work shares these cores)"
  echo "libtorch: $("$python" -c 'import torch; print(torch.__version__)') (PyPI torch in .venv);" \
       "BLAS: $("$python" -c 'import torch; print(next(l.strip(" -") for l in torch.__config__.show().splitlines() if "Math Kernel" in l or "BLAS_INFO" in l))' 2>/dev/null || echo unknown)"
  echo "command: benchmarks/run_train_bench.sh $build (ROUNDS=$rounds STEPS=$steps WARMUP=$warmup${BASELINE:+ BASELINE=$BASELINE})"
  echo "run: $rounds rounds x $steps steps (first $warmup untimed), micro-batch 4, global batch 16, seq 128"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- models parallel core runtime framework schedules || echo ' (+ local changes)')"
  echo
  cat "$work/summary.txt"
} | tee "$out"
