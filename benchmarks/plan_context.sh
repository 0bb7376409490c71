#!/usr/bin/env bash
# What the planner says of context parallelism (NOTE [planned context
# parallelism] in planner/step.cpp) for Llama 3.1 8B on DGX H100 nodes
# (configs/clusters/dgx-h100.toml): the longest sequence a layout of 64 GPUs
# trains within device memory (`--longest-seq`: the config's 8,192 doubled
# while one fits, cp searched up to 64), and at 131,072 tokens on 128 GPUs the
# cp-16 layout (tp 8 x cp 16) beside the cp-1 layout (tp 8 x dp 16) of the
# same model, cluster and global batch (16 sequences).
# Usage: benchmarks/plan_context.sh [BUILD_DIR]   (default build); writes
#   benchmarks/results/plan_context.txt (or $OUT).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}" out="${OUT:-benchmarks/results/plan_context.txt}"
[[ -x $build/trident ]] || { echo "plan_context: $build/trident not found" >&2; exit 1; }
longest="$build/trident plan --config configs/llama-3.1-8b.toml --cluster configs/clusters/dgx-h100.toml --gpus 64 --longest-seq --top 3"
base="$build/trident plan --config configs/llama-3.1-8b.toml --cluster configs/clusters/dgx-h100.toml --gpus 128 --seq 131072 --global-batch 16"
{
  echo "# trident plan and context parallelism: configs/llama-3.1-8b.toml on configs/clusters/dgx-h100.toml"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: benchmarks/plan_context.sh $build"
  echo "## $longest"
  $longest | sed 's/^/  /'
  for layout in tp=8,pp=1,dp=16,sp=1,recompute=full,mbs=1 tp=8,cp=16,pp=1,dp=1,sp=1,recompute=full,mbs=1; do
    echo "## $base --layout $layout"
    $base --layout "$layout" | sed 's/^/  /'
  done
} | tee "$out"
