#!/usr/bin/env bash
# Activation memory under training.recompute = none / selective / full: for
# gpt-tiny and gpt-small-brown (tp = pp = dp = 1, one thread, one step, eval
# off) the bytes the forward leaves alive per in-flight micro-batch, as
# `trident train` measures them on the host allocator (framework/trainer.cpp:
# the per-rank "peak N micro-batches in flight holding B activation bytes"
# line; metrics.jsonl has no such field). Deterministic up to the allocator, so
# one run per mode.
# Usage: benchmarks/recompute_memory.sh [BUILD_DIR]   (a directory holding `trident`;
#   default build); writes benchmarks/results/recompute_memory.txt (or $OUT).
# gpt-small-brown needs data/brown-gpt2.* (scripts/main.sh prepares it).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}" out="${OUT:-benchmarks/results/recompute_memory.txt}"
[[ -x $build/trident ]] || { echo "recompute_memory: $build/trident not found" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
rows=""
for config in gpt-tiny gpt-small-brown; do
  for mode in none selective full; do
    log="$tmp/$config-$mode.log"
    "$build/trident" train --config "configs/$config.toml" --set training.recompute=$mode --set training.steps=1 \
      --set training.eval_interval=0 --set training.threads=1 --set training.peak_tflops=1 \
      --set logging.progress=false --set logging.dir="$tmp/$config-$mode" > "$log" 2>&1 ||
      { echo "recompute_memory: $config $mode failed:" >&2; tail -20 "$log" >&2; exit 1; }
    line=$(grep -m1 'micro-batches in flight holding' "$log") ||
      { echo "recompute_memory: no activation line in $log" >&2; exit 1; }
    rows+=$(echo "$line" | awk -v c="$config" -v m="$mode" '{
        for (i = 1; i <= NF; ++i) { if ($i == "peak") n = $(i + 1); if ($i == "holding") b = $(i + 1) }
        printf "%-16s %-10s %3d %12d %10.2f\n", c, m, n, b, b / n / 1e6 }')$'\n'
  done
done
{
  echo "# activation bytes per in-flight micro-batch under training.recompute (tp = pp = dp = 1, 1 thread, 1 step)"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: benchmarks/recompute_memory.sh $build"
  echo "# columns: config recompute peak_inflight activation_bytes MB_per_microbatch"
  printf "%s" "$rows"
} | tee "$out"
