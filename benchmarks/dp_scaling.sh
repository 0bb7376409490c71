#!/usr/bin/env bash
# Data-parallel scaling on gpt-small-brown, one thread per rank: tokens/s of
# dp = 2 against dp = 1 (goal >= 1.7x on this 2-core machine), and the
# exposed gradient-reduction time per step (finish_grad_sync: what the
# backward did not hide) with overlap_grad_reduce on and off, and the ceiling
# the machine allows: two dp = 1 runs of half the batch side by side. The layouts run
# interleaved REPS times, so machine noise hits them alike; medians of the
# per-run means (first WARMUP steps left out) are reported.
#   benchmarks/dp_scaling.sh [BUILD_DIR]   env: REPS (3), STEPS (20), WARMUP (4), OUT
# Needs data/brown-gpt2.* (scripts/main.sh prepares it).
set -euo pipefail
build="${1:-build}"
reps="${REPS:-3}" steps="${STEPS:-20}" warmup="${WARMUP:-4}"
out="${OUT:-benchmarks/results/dp_scaling.txt}"
[[ -f data/brown-gpt2.train.bin ]] || { echo "dp_scaling: data/brown-gpt2 missing (run scripts/main.sh or trident data prepare)" >&2; exit 1; }
((warmup < steps)) || { echo "dp_scaling: WARMUP ($warmup) must be < STEPS ($steps)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

train() {  # NAME NPROC SETS...
  local name="$1" nproc="$2"
  shift 2
  local dir="$tmp/$name"
  rm -rf "$dir"
  "$build/trident" launch --nproc-per-node "$nproc" --master-port 0 -- \
    "$build/trident" train --config configs/gpt-small-brown.toml --set training.steps="$steps" \
    --set training.warmup_steps=0 --set training.eval_interval=0 --set training.threads=1 \
    --set training.peak_tflops=1 --set logging.progress=false --set logging.dir="$dir" "$@" > "$dir.log" 2>&1 ||
    { echo "dp_scaling: $name failed:" >&2; tail -20 "$dir.log" >&2; exit 1; }
  # mean tokens/s and grad_sync_s over the steps after warm-up
  awk -v w="$warmup" -F'[,:}]' '{
      for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i+1); if ($i ~ /"tokens_per_s"$/) t = $(i+1); if ($i ~ /"grad_sync_s"$/) g = $(i+1) }
      if (s > w) { n++; ts += t; gs += g }
    } END { printf "%.1f %.5f\n", ts / n, gs / n }' "$dir/metrics.jsonl"
}

# Two independent dp = 1 runs of half the global batch, side by side: per
# process the same work as a dp = 2 rank, with no communication at all. Their
# summed tokens/s is what dp = 2 can reach on this machine, whose two cores
# share caches and memory bandwidth.
side_by_side() {
  train side_a 1 --set parallel.dp=1 --set training.global_batch_size=8 > "$tmp/side_a.out" & local a=$!
  train side_b 1 --set parallel.dp=1 --set training.global_batch_size=8 > "$tmp/side_b.out" & local b=$!
  wait "$a" || exit 1
  wait "$b" || exit 1
  cat "$tmp/side_a.out" "$tmp/side_b.out" | awk '{ t += $1; g += $2 } END { printf "%.1f %.5f\n", t, g / 2 }'
}

: > "$tmp/results"
for rep in $(seq "$reps"); do
  echo "dp1 $(train dp1 1 --set parallel.dp=1)" >> "$tmp/results"
  echo "dp2_overlap $(train dp2on 2 --set parallel.dp=2 --set parallel.overlap_grad_reduce=true)" >> "$tmp/results"
  echo "dp2_no_overlap $(train dp2off 2 --set parallel.dp=2 --set parallel.overlap_grad_reduce=false)" >> "$tmp/results"
  echo "side_by_side $(side_by_side)" >> "$tmp/results"
  echo "dp_scaling: round $rep/$reps done" >&2
done

median() { sort -g | awk '{a[NR] = $1} END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
col() { awk -v k="$1" -v c="$2" '$1 == k { print $c }' "$tmp/results" | median; }
t1=$(col dp1 2) t2=$(col dp2_overlap 2) t3=$(col dp2_no_overlap 2) t4=$(col side_by_side 2)
g2=$(col dp2_overlap 3) g3=$(col dp2_no_overlap 3)
{
  echo "# dp scaling: gpt-small-brown, 1 thread per rank, global batch 16 x 128 tokens, $steps steps ($warmup warm-up left out), $reps interleaved rounds (medians)"
  echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')  machine: $(nproc) cores  load before: $load_before  after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "layout              tokens/s   exposed grad-sync s/step"
  printf "dp1                 %8.1f   %.5f\n" "$t1" "$(col dp1 3)"
  printf "dp2 overlap on      %8.1f   %.5f\n" "$t2" "$g2"
  printf "dp2 overlap off     %8.1f   %.5f\n" "$t3" "$g3"
  printf "2 x dp1 side by side %7.1f   (no communication: the ceiling for dp2 here)\n" "$t4"
  awk -v a="$t1" -v b="$t2" -v c="$t3" 'BEGIN { printf "speed-up dp2/dp1: %.2fx with overlap, %.2fx without (goal >= 1.7x)\n", b / a, c / a }'
  awk -v a="$t1" -v b="$t2" -v d="$t4" 'BEGIN { printf "ceiling (2 x dp1 side by side)/dp1: %.2fx; dp2 with overlap reaches %.0f%% of it\n", d / a, 100 * b / d }'
  echo "per-round raw (layout tokens/s grad-sync-s):"
  sed 's/^/  /' "$tmp/results"
} | tee "$out"
