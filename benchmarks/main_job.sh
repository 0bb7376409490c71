#!/usr/bin/env bash
# The README's main job (scripts/main.sh's training command: gpt-small-brown on
# 8 ranks, tp2 x pp2 x dp2, interleaved, 200 steps), its output kept with the
# date, the load and the wall time, for the figures README.md quotes.
# Usage: benchmarks/main_job.sh [BUILD_DIR]   (a directory holding `trident`; default build;
#   STEPS from the environment, default 200; LAYOUT, when set, a parallel.pipeline_layout string for the
#   same run, e.g. LAYOUT='Ett|t|t|L' OUT=benchmarks/results/main_job_head_alone.txt); writes
#   benchmarks/results/main_job.txt (or $OUT).
# Needs data/brown-gpt2.* (scripts/main.sh prepares it).
set -euo pipefail
build="${1:-build}" steps="${STEPS:-200}" out="${OUT:-benchmarks/results/main_job.txt}" layout="${LAYOUT:-}"
split=()
[[ -z $layout ]] || split=(--set "parallel.pipeline_layout=$layout")
[[ -x $build/trident ]] || { echo "main_job: $build/trident not found" >&2; exit 1; }
[[ -f data/brown-gpt2.train.bin ]] || { echo "main_job: data/brown-gpt2 missing (run scripts/main.sh or trident data prepare)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
load_before="$(cut -d' ' -f1-3 /proc/loadavg)" start="$(date +%s.%N)" date="$(date -u '+%Y-%m-%d %H:%M UTC')"
"$build/trident" launch --nproc-per-node 8 --master-port 0 -- \
  "$build/trident" train --config configs/gpt-small-brown.toml \
  --set parallel.tp=2 --set parallel.pp=2 --set schedule.kind=interleaved --set schedule.chunks=2 \
  "${split[@]}" --set training.steps="$steps" --set logging.progress=false --set logging.dir="$tmp/run" > "$tmp/out" 2>&1 ||
  { echo "main_job: the run failed:" >&2; tail -30 "$tmp/out" >&2; exit 1; }
wall="$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
{
  echo "# README main job: gpt-small-brown, 8 ranks (tp 2 x pp 2 x dp 2), interleaved v = 2${layout:+, pipeline_layout $layout}, $steps steps"
  echo "# command: ${layout:+LAYOUT='$layout' }${OUT:+OUT=$OUT }STEPS=$steps benchmarks/main_job.sh $build"
  echo "# date: $date  machine: $(nproc) cores  load before: $load_before  after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# wall time of the launch: $wall s"
  cat "$tmp/out"
} | tee "$out"
