#!/usr/bin/env bash
# Expert parallelism's cost here (README.md, "Expert parallelism"): mixtral-tiny on
# 2 ranks as dp 2 with every expert on each rank (ep 1) and with the experts split
# over the two (ep 2, NOTE [expert grid]), ROUNDS rounds alternating the two, each
# STEPS steps: the median step time over the steps after the first two (one at STEPS 2), and the
# seconds per step rank 0 spent in its expert-parallel group's all-to-alls
# (rank-0.json's ep_comm_s over the run's steps: the dispatch and combine, and
# their counts' exchange, each waited for where it is issued: nothing hides them
# yet, schedule.overlap_moe is not built).
# Usage: benchmarks/expert_parallel.sh [BUILD_DIR]   (default build); ROUNDS (3) and
#   STEPS (12) from the environment; writes benchmarks/results/expert_parallel.txt (or $OUT).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}" rounds="${ROUNDS:-3}" steps="${STEPS:-12}" out="${OUT:-benchmarks/results/expert_parallel.txt}"
[[ -x $build/trident ]] || { echo "expert_parallel: $build/trident not found" >&2; exit 1; }
(( steps >= 2 )) || { echo "expert_parallel: STEPS must be at least 2, got $steps" >&2; exit 1; }
skip=$(( steps >= 3 ? 2 : 1 ))  # the first steps warm up
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
rows=""
for round in $(seq "$rounds"); do
  for ep in 1 2; do
    dir="$tmp/r$round-ep$ep" log="$tmp/r$round-ep$ep.log"
    "$build/trident" launch --nproc-per-node 2 -- "$build/trident" train --config configs/mixtral-tiny.toml \
      --set parallel.dp=2 --set parallel.ep=$ep --set training.steps="$steps" --set training.eval_interval=0 \
      --set training.threads=1 --set logging.progress=false --set logging.dir="$dir" > "$log" 2>&1 ||
      { echo "expert_parallel: round $round ep $ep failed:" >&2; tail -20 "$log" >&2; exit 1; }
    rows+=$(python3 - "$dir" "$round" "$ep" "$skip" <<'PY'
import json, statistics, sys
d, rnd, ep, skip = sys.argv[1:5]
steps = [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()]
s = json.load(open(d + "/rank-0.json"))
t = statistics.median(r["step_time_s"] for r in steps[int(skip):])
print("%5s %3s %9.4f %9.4f %6.1f%%" % (rnd, ep, t, s["ep_comm_s"] / len(steps), 100 * s["ep_comm_s"] / len(steps) / t))
PY
)$'\n'
  done
done
{
  echo "# expert parallelism: configs/mixtral-tiny.toml (8 experts, top 2) on 2 ranks (dp 2), 1 thread each"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: ROUNDS=$rounds STEPS=$steps benchmarks/expert_parallel.sh $build"
  echo "# columns: round ep median_step_s(steps 3..) all_to_all_s_per_step(rank 0) share_of_step"
  printf "%s" "$rows"
  python3 - <<PY
rows = [l.split() for l in """$rows""".strip().splitlines()]
import statistics
for ep in ("1", "2"):
    t = statistics.median(float(r[2]) for r in rows if r[1] == ep)
    print("# ep %s: median step %.4f s over the rounds" % (ep, t))
t1 = statistics.median(float(r[2]) for r in rows if r[1] == "1")
t2 = statistics.median(float(r[2]) for r in rows if r[1] == "2")
print("# ep 2 / ep 1 step time: %.3f" % (t2 / t1))
PY
} | tee "$out"
