#!/usr/bin/env bash
# Activation memory under training.recompute = none / selective / full: for
# gpt-tiny and gpt-small-brown (tp = pp = dp = 1, one thread, one step, eval
# off) the bytes the forward leaves alive per in-flight micro-batch, as
# `trident train` measures them on the host allocator (rank 0's rank-0.json in
# the run directory: peak_inflight, peak_activation_bytes; NOTE [rank summary]
# in framework/trainer.cpp). Deterministic up to the allocator, so one run
# per mode.
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
    summary="$tmp/$config-$mode/rank-0.json"
    [[ -f $summary ]] || { echo "recompute_memory: no $summary (see $log)" >&2; exit 1; }
    rows+=$(python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
n, b = s["peak_inflight"], s["peak_activation_bytes"]
print("%-16s %-10s %3d %12d %10.2f" % (sys.argv[2], sys.argv[3], n, b, b / n / 1e6))' "$summary" "$config" "$mode")$'\n'
  done
done
{
  echo "# activation bytes per in-flight micro-batch under training.recompute (tp = pp = dp = 1, 1 thread, 1 step)"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: benchmarks/recompute_memory.sh $build"
  echo "# columns: config recompute peak_inflight activation_bytes MB_per_microbatch"
  printf "%s" "$rows"
} | tee "$out"
