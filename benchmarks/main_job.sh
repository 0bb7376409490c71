#!/usr/bin/env bash
# The README's main job (scripts/main.sh's training command: gpt-brown-bytes on
# 8 ranks, tp2 x pp2 x dp2, interleaved, 200 steps), its output kept with the
# date, the load and the wall time, for the figures README.md and docs/launching.md quote.
# Usage: benchmarks/main_job.sh [BUILD_DIR]   (a directory holding `trident`; default build;
#   STEPS from the environment, default 200; LAYOUT, when set, a parallel.pipeline_layout string for the
#   same run, e.g. CONFIG=configs/gpt-small-brown.toml LAYOUT='Ett|t|t|L' OUT=benchmarks/results/main_job_head_alone.txt); writes
#   benchmarks/results/main_job.txt (or $OUT).
#   CONFIG, when set, another preset for the same run (e.g. CONFIG=configs/gpt-small-brown.toml, the
#   GPT-2-vocabulary model whose head dominates, as main_job_head_alone.txt and main_job_even_split.txt).
#   RANKS (8), TP (2) and KIND (interleaved, with 2 chunks; another kind runs with what it needs), when
#   set, change the layout: pp stays 2, dp = RANKS / (TP x 2); e.g. RANKS=2 TP=1 runs one rank per core.
# Needs the preset's token file (data.path; scripts/main.sh prepares data/brown-bytes).
set -euo pipefail
build="${1:-build}" steps="${STEPS:-200}" out="${OUT:-benchmarks/results/main_job.txt}" layout="${LAYOUT:-}"
config="${CONFIG:-configs/gpt-brown-bytes.toml}"
ranks="${RANKS:-8}" tp="${TP:-2}" kind="${KIND:-interleaved}"
chunks=0
[[ $kind != interleaved ]] || chunks=2
data="$(sed -n 's/^path *= *"\(.*\)".*/\1/p' "$config")"
split=()
[[ -z $layout ]] || split=(--set "parallel.pipeline_layout=$layout")
[[ -x $build/trident ]] || { echo "main_job: $build/trident not found" >&2; exit 1; }
[[ -f $data.train.bin ]] || { echo "main_job: $data.train.bin missing (scripts/main.sh or trident data prepare makes it)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
load_before="$(cut -d' ' -f1-3 /proc/loadavg)" start="$(date +%s.%N)" date="$(date -u '+%Y-%m-%d %H:%M UTC')"
"$build/trident" launch --nproc-per-node "$ranks" --master-port 0 -- \
  "$build/trident" train --config "$config" \
  --set parallel.tp="$tp" --set parallel.pp=2 --set schedule.kind="$kind" --set schedule.chunks="$chunks" \
  "${split[@]}" --set training.steps="$steps" --set logging.progress=false --set logging.dir="$tmp/run" > "$tmp/out" 2>&1 ||
  { echo "main_job: the run failed:" >&2; tail -30 "$tmp/out" >&2; exit 1; }
wall="$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
{
  echo "# README main job: $(basename "$config" .toml), $ranks ranks (tp $tp x pp 2 x dp $((ranks / (tp * 2)))), $kind${layout:+, pipeline_layout $layout}, $steps steps"
  echo "# command: ${CONFIG:+CONFIG=$CONFIG }${RANKS:+RANKS=$RANKS }${TP:+TP=$TP }${KIND:+KIND=$KIND }${layout:+LAYOUT='$layout' }${OUT:+OUT=$OUT }STEPS=$steps benchmarks/main_job.sh $build"
  echo "# date: $date  machine: $(nproc) cores  load before: $load_before  after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# wall time of the launch: $wall s"
  cat "$tmp/out"
} | tee "$out"
