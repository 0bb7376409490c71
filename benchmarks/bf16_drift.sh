#!/usr/bin/env bash
# How far a bf16 run drifts from the fp32 one: gpt-tiny, tp = pp = dp = 1,
# 20 steps each (the steps tests/regression/test_bf16_regression.cpp trains),
# compared by `trident compare` (largest per-step relative difference of the
# loss and the gradient norm). Deterministic on one machine.
# Usage: benchmarks/bf16_drift.sh [BUILD_DIR]   (a directory holding `trident`; default
#   build); writes benchmarks/results/bf16_drift.txt (or $OUT).
set -euo pipefail
build="${1:-build}" out="${OUT:-benchmarks/results/bf16_drift.txt}"
[[ -x $build/trident ]] || { echo "bf16_drift: $build/trident not found" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for precision in fp32 bf16; do
  "$build/trident" train --config configs/gpt-tiny.toml --set training.steps=20 --set training.precision=$precision \
    --set training.peak_tflops=1 --set logging.progress=false --set logging.dir="$tmp/$precision" > "$tmp/$precision.log" 2>&1 ||
    { echo "bf16_drift: $precision run failed:" >&2; tail -20 "$tmp/$precision.log" >&2; exit 1; }
done
cmp=$("$build/trident" compare "$tmp/fp32" "$tmp/bf16" --rtol 1 2>&1) || { echo "$cmp" >&2; exit 1; }
{
  echo "# bf16 against fp32: gpt-tiny, 20 steps, tp = pp = dp = 1"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: benchmarks/bf16_drift.sh $build"
  echo "# $build/trident compare FP32_RUN BF16_RUN --rtol 1:"
  echo "$cmp"
} | tee "$out"
