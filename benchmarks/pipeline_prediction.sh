#!/usr/bin/env bash
# Measured against predicted pipeline time: gpt-tiny for 20 steps under each case
# below, the trainer's closing "pipeline: bubble mean ... | pipeline time X ms measured,
# Y ms predicted" line (schedules/README.md, "Measured timelines"), REPS runs of each
# back to back, with the machine's load before each and Y / X per run.
# Usage: benchmarks/pipeline_prediction.sh [BUILD_DIR]   (a directory holding `trident`;
#   default build; REPS from the environment, default 3; CASES, default all of them: a
#   space-separated subset of the names below); writes
#   benchmarks/results/pipeline_prediction.txt (or $OUT).
# On 2 cores, a pp = 4 run's 4 processes share them: its "latency" is mostly a process
# waiting to be scheduled, which the prediction takes as measured.
set -euo pipefail
build="${1:-build}" reps="${REPS:-3}" out="${OUT:-benchmarks/results/pipeline_prediction.txt}"
[[ -x $build/trident ]] || { echo "pipeline_prediction: $build/trident not found" >&2; exit 1; }
declare -A sets=(
  [pp2-1f1b]="parallel.pp=2"
  [pp4-1f1b]="parallel.pp=4"
  [pp4-zb-h1]="parallel.pp=4 schedule.kind=zb-h1"
  [pp4-interleaved]="parallel.pp=4 schedule.kind=interleaved schedule.chunks=2"
  [pp4-interleaved-nccl-rules]="parallel.pp=4 schedule.kind=interleaved schedule.chunks=2 parallel.backend=nccl-rules"
)
cases="${CASES:-pp2-1f1b pp4-1f1b pp4-zb-h1 pp4-interleaved pp4-interleaved-nccl-rules}"
for c in $cases; do
  [[ -n ${sets[$c]:-} ]] || { echo "pipeline_prediction: unknown case '$c' (expected: ${!sets[*]})" >&2; exit 2; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
{
  echo "# gpt-tiny, 20 steps: measured and predicted pipeline time (trident train's closing pipeline lines)"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: REPS=$reps CASES=\"$cases\" benchmarks/pipeline_prediction.sh $build"
  for c in $cases; do
    read -r -a kv <<< "${sets[$c]}"
    args=()
    for x in "${kv[@]}"; do args+=(--set "$x"); done
    nproc_=$(sed -n 's/.*parallel.pp=\([0-9]*\).*/\1/p' <<< "${sets[$c]}")
    echo "case $c: $build/trident launch --nproc-per-node $nproc_ -- $build/trident train --config configs/gpt-tiny.toml ${args[*]} --set training.steps=20"
    for rep in $(seq "$reps"); do
      load="$(cut -d' ' -f1-3 /proc/loadavg)"
      log="$tmp/$c-$rep.log"
      "$build/trident" launch --nproc-per-node "$nproc_" --master-port 0 -- "$build/trident" train --config configs/gpt-tiny.toml \
        "${args[@]}" --set training.steps=20 --set logging.progress=false --set logging.dir="$tmp/run-$c-$rep" \
        > "$log" 2>&1 || { echo "pipeline_prediction: $c run $rep failed:" >&2; tail -20 "$log" >&2; exit 1; }
      line=$(grep -m1 '\] pipeline: bubble' "$log")
      ratio=$(sed -n 's/.*pipeline time \([0-9.e+-]*\) ms measured, \([0-9.e+-]*\) ms predicted.*/\2 \1/p' <<< "$line" |
              awk '{ printf "%.3f", $1 / $2 }')
      echo "  run $rep (load before: $load): predicted / measured pipeline time = $ratio"
      echo "    ${line#*] }"
    done
  done
} | tee "$out"
