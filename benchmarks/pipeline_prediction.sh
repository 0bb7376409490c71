#!/usr/bin/env bash
# Measured against predicted pipeline bubble: gpt-tiny at pp = 2, 20 steps, the
# trainer's closing "pipeline: bubble mean ... measured, ... predicted" line
# (schedules/README.md, "Measured timelines"), REPS runs back to back, with the
# machine's load before each.
# Usage: benchmarks/pipeline_prediction.sh [BUILD_DIR]   (a directory holding `trident`;
#   default build; REPS from the environment, default 3); writes
#   benchmarks/results/pipeline_prediction.txt (or $OUT).
set -euo pipefail
build="${1:-build}" reps="${REPS:-3}" out="${OUT:-benchmarks/results/pipeline_prediction.txt}"
[[ -x $build/trident ]] || { echo "pipeline_prediction: $build/trident not found" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
{
  echo "# gpt-tiny, pp = 2, 20 steps: measured and predicted bubble (trident train's closing pipeline lines)"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  machine: $(nproc) cores  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: REPS=$reps benchmarks/pipeline_prediction.sh $build"
  echo "# each run: $build/trident launch --nproc-per-node 2 -- $build/trident train --config configs/gpt-tiny.toml --set parallel.pp=2 --set training.steps=20"
  for rep in $(seq "$reps"); do
    echo "run $rep (load before: $(cut -d' ' -f1-3 /proc/loadavg)):"
    "$build/trident" launch --nproc-per-node 2 --master-port 0 -- "$build/trident" train --config configs/gpt-tiny.toml \
      --set parallel.pp=2 --set training.steps=20 --set logging.progress=false --set logging.dir="$tmp/run$rep" \
      > "$tmp/run$rep.log" 2>&1 || { echo "pipeline_prediction: run $rep failed:" >&2; tail -20 "$tmp/run$rep.log" >&2; exit 1; }
    grep '\] pipeline:' "$tmp/run$rep.log" | sed 's/^/  /'
  done
} | tee "$out"
