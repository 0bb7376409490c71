#!/usr/bin/env bash
# Step time of tp=2 vs tp=1 for a hidden-512 GPT on this (2-core) machine, as
# a ratio, with the share of time spent in TP collectives.
#
#  1. End to end: `trident train` on gpt-tiny resized to hidden 512 / ffn 2048 /
#     8 heads / 4 layers, at tp=1 (one process, training.threads=2: both cores)
#     and tp=2 (two ranks, one thread each: both cores). Step times come from
#     metrics.jsonl, the first step skipped as warm-up; median over steps.
#  2. Collective share: bench_tp times one micro-batch forward+backward of the
#     same model and reads the TP group's all-reduce/all-gather time.
# Runs of the two layouts are interleaved REPS times and the median taken, as
# other users of the machine make single runs noisy. OMP_WAIT_POLICY defaults
# to PASSIVE: with libgomp's spinning barriers, the 2-thread tp=1 run slowed
# 3-10x whenever another process held a core (measured: 1000 vs 318 ms per
# micro-batch); 1-thread ranks are unaffected by the setting.
#
# Usage: benchmarks/tp_step_time.sh [BUILD_DIR] [REPS]   (default: build, $REPS or 3)
# Writes benchmarks/results/tp_step_time.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPS=${2:-${REPS:-3}}
STEPS=${STEPS:-6}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
TRIDENT=$BUILD/trident
BENCH=$BUILD/benchmarks/bench_tp
for b in "$TRIDENT" "$BENCH"; do
  [[ -x $b ]] || { echo "missing $b (cmake --build $BUILD --target trident bench_tp)" >&2; exit 1; }
done
OUT=${OUT:-benchmarks/results/tp_step_time.txt}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MODEL=(--set model.hidden=512 --set model.ffn_hidden=2048 --set model.heads=8 --set model.layers=4
       --set training.steps="$STEPS")

# Median step_time_s of a metrics.jsonl, skipping step 1.
median_step() {
  python3 - "$1" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(statistics.median(r["step_time_s"] for r in rows[1:]))
EOF
}
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" | head -1; }

train_tp1=() train_tp2=() mb_tp1t1=() mb_tp1=() mb_tp2=() comm_tp2=() bare_tp2=() share_tp2=()
for rep in $(seq "$REPS"); do
  "$TRIDENT" train --config configs/gpt-tiny.toml "${MODEL[@]}" --set training.threads=2 \
    --set logging.dir="$TMP/tp1" >"$TMP/log1" 2>&1 || { cat "$TMP/log1"; exit 1; }
  train_tp1+=("$(median_step "$TMP/tp1/metrics.jsonl")")
  "$TRIDENT" launch --master-port 0 --nproc-per-node 2 -- "$TRIDENT" train --config configs/gpt-tiny.toml \
    "${MODEL[@]}" --set parallel.tp=2 --set training.threads=1 --set logging.dir="$TMP/tp2" >"$TMP/log2" 2>&1 ||
    { cat "$TMP/log2"; exit 1; }
  train_tp2+=("$(median_step "$TMP/tp2/metrics.jsonl")")
  r1=$("$BENCH" --threads 2)
  r11=$("$BENCH" --threads 1)
  mb_tp1t1+=("$(field step_ms <<<"$r11")")
  r2=$("$TRIDENT" launch --master-port 0 --nproc-per-node 2 -- "$BENCH" --threads 1 | grep RESULT)
  mb_tp1+=("$(field step_ms <<<"$r1")")
  mb_tp2+=("$(field step_ms <<<"$r2")")
  comm_tp2+=("$(field comm_ms <<<"$r2")")
  share_tp2+=("$(field comm_share <<<"$r2")")
  bare_tp2+=("$(field bare_comm_ms <<<"$r2")")
  echo "rep $rep: train step tp1 ${train_tp1[-1]} s, tp2 ${train_tp2[-1]} s; micro-batch tp1 ${mb_tp1[-1]} ms," \
       "tp2 ${mb_tp2[-1]} ms (comm ${comm_tp2[-1]} ms)" >&2
done

t1=$(median "${train_tp1[@]}") t2=$(median "${train_tp2[@]}")
m11=$(median "${mb_tp1t1[@]}") m1=$(median "${mb_tp1[@]}") m2=$(median "${mb_tp2[@]}") c2=$(median "${comm_tp2[@]}") s2=$(median "${share_tp2[@]}") b2=$(median "${bare_tp2[@]}")
mkdir -p benchmarks/results
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$t1" "$t2" "$m1" "$m2" "$c2" "$s2" "$m11" "$b2" "$REPS" "$STEPS" "$(nproc)" "$OMP_WAIT_POLICY" "$LOAD" >"$OUT" <<'EOF'
import sys
t1, t2, m1, m2, c2, s2, m11, b2 = map(float, sys.argv[1:9])
reps, steps, cores, wait, load = sys.argv[9:]
print(f"# tp=2 vs tp=1, GPT hidden 512 / ffn 2048 / 8 heads / 4 layers / seq 32 / vocab 256, fp32 CPU, {cores} cores")
print(f"# median of {reps} interleaved runs; train: {steps} steps of 8 micro-batches of 2, step 1 skipped; OMP_WAIT_POLICY={wait}")
print(f"{'measure':<34}{'tp=1 (1 proc x 2 thr)':>22}{'tp=2 (2 proc x 1 thr)':>22}{'tp2/tp1':>9}")
print(f"{'trident train step time (s)':<34}{t1:>22.3f}{t2:>22.3f}{t2 / t1:>9.2f}")
print(f"{'micro-batch fwd+bwd (ms)':<34}{m1:>22.1f}{m2:>22.1f}{m2 / m1:>9.2f}")
print(f"{'  of which TP collectives (ms)':<34}{0.0:>22.1f}{c2:>22.1f}")
print(f"{'  TP collective share':<34}{0.0:>22.3f}{s2:>22.3f}")
print(f"{'  same all-reduces alone (ms)':<34}{0.0:>22.1f}{b2:>22.1f}")
print(f"{'  bare all-reduce share':<34}{0.0:>22.3f}{b2 / m2:>22.3f}")
print(f"# for scale: micro-batch at tp=1 on one thread: {m11:.1f} ms (tp2/tp1-one-thread {m2 / m11:.2f})")
print("# collective time is wall time inside all_reduce/all_gather (Group::comm_seconds), so it")
print("# includes waiting for the slower rank, not only transfer; rank 0's figure")
print(f"# load average at the end (other users of the machine): {load}")
EOF
cat "$OUT"
