#!/usr/bin/env bash
# Data-parallel scaling on gpt-small-brown, one thread per rank: tokens/s of
# dp = 2 against dp = 1 (goal >= 1.7x on this 2-core machine), and the
# exposed gradient-reduction time per step (finish_grad_sync: what the
# backward did not hide) with overlap_grad_reduce on and off, and the ceiling
# the machine allows: two dp = 1 runs of half the batch side by side. The layouts run
# interleaved REPS times, so machine noise hits them alike; each run gives its
# mean tokens/s and grad-sync time (first WARMUP steps left out). Speed-ups are
# the median over rounds of the per-round ratios (each ratio from runs of the
# same round, i.e. the same moment); tokens/s and grad-sync are medians of the
# per-run means.
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
    --set training.peak_tflops=1 --set logging.progress=false --set logging.log_interval=1 --set logging.dir="$dir" "$@" > "$dir.log" 2>&1 ||
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
  echo "$rep dp1 $(train dp1 1 --set parallel.dp=1)" >> "$tmp/results"
  echo "$rep dp2_overlap $(train dp2on 2 --set parallel.dp=2 --set parallel.overlap_grad_reduce=true)" >> "$tmp/results"
  echo "$rep dp2_no_overlap $(train dp2off 2 --set parallel.dp=2 --set parallel.overlap_grad_reduce=false)" >> "$tmp/results"
  echo "$rep side_by_side $(side_by_side)" >> "$tmp/results"
  echo "dp_scaling: round $rep/$reps done" >&2
done

median() { sort -g | awk '{a[NR] = $1} END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
col() { awk -v k="$1" -v c="$2" '$2 == k { print $c }' "$tmp/results" | median; }
# ratio LAYOUT: tokens/s of LAYOUT over dp1's in the same round, one line per round
ratio() { awk -v k="$1" '$2 == "dp1" { base[$1] = $3 } $2 == k { r[$1] = $3; if ($1 > n) n = $1 }
  END { for (i = 1; i <= n; ++i) printf "%.4f\n", r[i] / base[i] }' "$tmp/results"; }
rounds() { ratio "$1" | awk '{ printf "%s%.2fx", (NR > 1 ? ", " : ""), $1 }'; }
t1=$(col dp1 3) t2=$(col dp2_overlap 3) t3=$(col dp2_no_overlap 3) t4=$(col side_by_side 3)
g2=$(col dp2_overlap 4) g3=$(col dp2_no_overlap 4)
r2=$(ratio dp2_overlap | median) r3=$(ratio dp2_no_overlap | median) r4=$(ratio side_by_side | median)
# dp2 with overlap against the side-by-side ceiling, per round
rc=$(awk '$2 == "dp2_overlap" { a[$1] = $3 } $2 == "side_by_side" { b[$1] = $3 }
  END { for (i in a) printf "%.4f\n", a[i] / b[i] }' "$tmp/results" | median)  # order irrelevant: a median
{
  echo "# dp scaling: gpt-small-brown, 1 thread per rank, global batch 16 x 128 tokens, $steps steps ($warmup warm-up left out), $reps interleaved rounds"
  echo "# command: REPS=$reps STEPS=$steps WARMUP=$warmup $0 $build"
  echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC')  machine: $(nproc) cores  load before: $load_before  after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# tokens/s and grad-sync: medians of the per-run means; speed-ups: medians of the per-round ratios"
  echo "layout              tokens/s   exposed grad-sync s/step"
  printf "dp1                 %8.1f   %.5f\n" "$t1" "$(col dp1 4)"
  printf "dp2 overlap on      %8.1f   %.5f\n" "$t2" "$g2"
  printf "dp2 overlap off     %8.1f   %.5f\n" "$t3" "$g3"
  printf "2 x dp1 side by side %7.1f   (no communication: the ceiling for dp2 here)\n" "$t4"
  printf "speed-up dp2/dp1 (median of per-round ratios): %.2fx with overlap (rounds: %s), %.2fx without (rounds: %s) (goal >= 1.7x)\n" \
    "$r2" "$(rounds dp2_overlap)" "$r3" "$(rounds dp2_no_overlap)"
  printf "ceiling (2 x dp1 side by side)/dp1 (median of per-round ratios): %.2fx (rounds: %s); dp2 with overlap reaches %.0f%% of it (median per round)\n" \
    "$r4" "$(rounds side_by_side)" "$(awk -v x="$rc" 'BEGIN { print 100 * x }')"
  echo "per-round raw (round layout tokens/s grad-sync-s):"
  sed 's/^/  /' "$tmp/results"
} | tee "$out"
