#!/usr/bin/env bash
# The waits the executor's groups add to each generator's list (NOTE [group waits]
# in schedules/group_waits.h): `trident schedule --format summary` times the list a
# run executes under the executor's rules (grouped_step_time) beside the simulator's
# step (step_time), both at the default costs (F 1, B 2, W 1 per full stage, no
# latency). Counts, not times: the figures do not depend on the machine. Builds nothing.
#
# Usage: benchmarks/group_waits.sh [BUILD_DIR]    (default: build)
# Environment: OUT (benchmarks/results/group_waits.txt).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}"
out="${OUT:-benchmarks/results/group_waits.txt}"
trident="$build/trident"
source benchmarks/bench_common.sh
bench_need group_waits "$trident"
{
  echo "# the executor's grouped step against the simulator's, costs F 1, B 2, W 1 per full stage, no latency"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command: benchmarks/group_waits.sh $build"
  echo "commit: $(git rev-parse --short HEAD)"
  echo "grouped: trident schedule --format summary's grouped_step_time (the list as a run executes it);"
  echo "simulated: its step_time (each compute waits for its own input only); excess = grouped / simulated - 1"
  echo
  printf '%-12s %3s %3s %3s %9s %10s %7s\n' kind p m v simulated grouped excess
  for kind in gpipe 1f1b interleaved zb-h1 zb-h2 zb-v v-half v-min dualpipev; do  # the generators' kinds
    for p in 2 4 8; do
      for m in 8 16 32; do
        v=1
        case "$kind" in interleaved | zb-v | v-half | v-min | dualpipev) v=2 ;; esac
        [[ $kind == dualpipev && $m -lt $((2 * p)) ]] && continue
        [[ $kind == interleaved && $m -lt $p ]] && continue
        json=$("$trident" schedule --kind "$kind" -p "$p" -m "$m" -v "$v" --format summary)
        python3 - "$kind" "$p" "$m" "$v" "$json" <<'PY'
import json, sys
kind, p, m, v, text = sys.argv[1:]
s = json.loads(text)
g, u = s["grouped_step_time"], s["step_time"]
print(f"{kind:<12} {p:>3} {m:>3} {v:>3} {u:>9g} {g:>10g} {g / u - 1:>7.1%}")
PY
      done
    done
  done
} > "$out"
cat "$out"
