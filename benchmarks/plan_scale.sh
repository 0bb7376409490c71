#!/usr/bin/env bash
# How long `trident plan` takes to search a large job: Llama 2 70B on 1,024
# devices (DGX H100 and DGX A100 presets), the whole search with its output,
# wall time of each run (goal: under 60 s on the 2-core developer machine).
# Usage: benchmarks/plan_scale.sh [BUILD_DIR]   (a directory holding `trident`;
#   default build; REPS from the environment, default 3); writes
#   benchmarks/results/plan_scale.txt (or $OUT).
set -euo pipefail
build="${1:-build}" reps="${REPS:-3}" out="${OUT:-benchmarks/results/plan_scale.txt}"
[[ -x $build/trident ]] || { echo "plan_scale: $build/trident not found" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
{
  echo "# trident plan search time: configs/llama2-70b.toml on 1,024 devices, global batch 1024"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  machine: $(nproc) cores  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: REPS=$reps benchmarks/plan_scale.sh $build"
  for cluster in dgx-h100 dgx-a100; do
    cmd="$build/trident plan --config configs/llama2-70b.toml --cluster configs/clusters/$cluster.toml --gpus 1024 --global-batch 1024 --top 3"
    echo "## $cmd"
    for rep in $(seq "$reps"); do
      start=$(date +%s.%N)
      $cmd > "$tmp/out.txt"
      end=$(date +%s.%N)
      awk -v a="$start" -v b="$end" -v r="$rep" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
        'BEGIN {printf "run %d: %.2f s wall (load before: %s)\n", r, b - a, l}'
    done
    sed 's/^/  /' "$tmp/out.txt"
  done
} | tee "$out"
