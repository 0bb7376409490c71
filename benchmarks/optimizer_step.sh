#!/usr/bin/env bash
# The optimizer phase alone on gpt-small-brown's parameters, one thread
# (benchmarks/bench_optimizer.cpp): Trident's fused AdamW against the
# element-wise AdamW it replaced and torch::optim::AdamW, and the float64
# gradient norm from _foreach_norm against the per-parameter one. The
# contenders alternate rep by rep; minimum and median over reps. Builds nothing.
# Usage: benchmarks/optimizer_step.sh [BUILD_DIR]    (default: build)
# Environment: REPS (30), OUT (benchmarks/results/optimizer_step.txt)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}"
reps="${REPS:-30}"
out="${OUT:-benchmarks/results/optimizer_step.txt}"
bench="$build/benchmarks/bench_optimizer"
[[ -x "$bench" ]] || { echo "optimizer_step: $bench not found; build it: cmake --build $build --target bench_optimizer" >&2; exit 1; }
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
result=$(OMP_NUM_THREADS=1 "$bench" --reps "$reps")
mkdir -p "$(dirname "$out")"
{
  echo "# the optimizer phase alone: gpt-small-brown's parameters, 1 thread"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores, $(uname -sr)"
  echo "load average at start: $load_start, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work shares these cores)"
  echo "command: benchmarks/optimizer_step.sh $build (REPS=$reps)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- core benchmarks || echo ' (+ local changes)')"
  echo
  echo "$result"
} | tee "$out"
