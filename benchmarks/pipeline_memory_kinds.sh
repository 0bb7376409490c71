#!/usr/bin/env bash
# Measured peak activation bytes per pipeline rank of every schedule kind against
# the simulator's prediction: gpt-tiny, pp = 4, m = 16 (global batch 32 of micro-
# batches of 2), 2 steps, one process per rank on this machine. For each kind and
# rank: the executor's peak in-flight count and activation bytes (rank-R.json), the
# simulator's peak in-flight (`trident schedule --format json`), and rank 0's bytes
# relative to 1F1B's, measured and predicted (the simulated in-flight count over
# 1F1B's, a V or interleaved chunk counted as 1/v of a stage). zb-auto runs at the
# limits p and 2p (the zero-bubble paper's ZB-1p and ZB-2p).
#   benchmarks/pipeline_memory_kinds.sh [BUILD_DIR] [OUT]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$repo/build}" && pwd)"
out="${2:-$repo/benchmarks/results/pipeline_memory_kinds.txt}"
work="$(mktemp -d "${TMPDIR:-/tmp}/trident-memkinds-XXXXXX")"
trap 'rm -rf "$work"' EXIT
kinds=(gpipe 1f1b interleaved zb-h1 zb-h2 zb-auto:4 zb-auto:8 zb-v v-half v-min dualpipev)
{
  echo "# benchmarks/pipeline_memory_kinds.sh $build $out"
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg), gpt-tiny pp=4 m=16, 2 steps"
  echo "# memory units: one-chunk kinds count micro-batches of a stage, V kinds and interleaved chunk activations (1/v of a stage)"
  for entry in "${kinds[@]}"; do
    kind=${entry%%:*} limit=() sim_limit=() name=$kind
    if [[ $entry == *:* ]]; then
      limit=(--set schedule.memory_limit="${entry#*:}") sim_limit=(--memory-limit "${entry#*:}") name="$kind-${entry#*:}"
    fi
    v=1
    case $kind in interleaved|zb-v|v-half|v-min|dualpipev) v=2 ;; esac
    "$build/trident" launch --nproc-per-node 4 -- "$build/trident" train --config "$repo/configs/gpt-tiny.toml" \
      --set parallel.pp=4 --set training.steps=2 --set training.warmup_steps=0 --set training.global_batch_size=32 \
      --set schedule.kind=$kind --set schedule.chunks=$v "${limit[@]}" --set logging.dir="$work/$name" > "$work/$name.log" 2>&1 ||
      { echo "$name: run failed"; tail -5 "$work/$name.log"; continue; }
    sim=$("$build/trident" schedule --kind $kind -p 4 -m 16 -v $v "${sim_limit[@]}" --format json |
          python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["peak_inflight"])))')
    python3 - "$work/$name" "$name" "$sim" "$work/1f1b" "$v" <<'PY'
import json, sys
d, name, sim, base, v = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4], int(sys.argv[5])
rows = sorted((json.load(open(f"{d}/rank-{r}.json")) for r in range(4)), key=lambda s: s["pp"])
base0 = json.load(open(f"{base}/rank-0.json")) if name != "gpipe" else None
b0, i0 = (base0["peak_activation_bytes"], base0["peak_inflight"]) if base0 else (None, None)
for s in rows:
    r = s["pp"]
    rel = (f"  rank-0 bytes / 1f1b's {s['peak_activation_bytes'] / b0:.3f} (predicted {int(sim[0]) / v / i0:.3f})"
           if r == 0 and b0 else "")
    print(f"{name:12} rank {r}  in flight measured {s['peak_inflight']:3} simulated {sim[r]:>3}  "
          f"activation bytes {s['peak_activation_bytes']:>10}{rel}")
PY
  done
} > "$out"
cat "$out"
