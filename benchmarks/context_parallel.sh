#!/usr/bin/env bash
# Context parallelism's memory and time (docs/context-parallelism.md, "Long sequences: context
# parallelism"). Two tables:
#  1. training: llama-tiny cut to 2 layers, one sequence per step (mbs = gbs = 1),
#     at seq_len 1K..16K for cp 1, 2, 4 under each parallel.cp_comm kind: the
#     activation bytes rank 0 keeps per micro-batch (rank-0.json's
#     peak_activation_bytes, the host allocator's count: NOTE [rank summary]),
#     their ratio to cp 1's, the median step time of steps 2..3 and the seconds
#     rank 0 spent in its cp group's communication (cp_comm_s);
#  2. attention alone (bench_cp_attention): one layer's forward + backward,
#     8 heads, 4 key/value heads, head dim 64, cp 1 against cp 2's kinds over
#     two rank processes, with the ring's exposed transfer time.
# cp = 4 runs 4 ranks on this machine's 2 cores: its times measure contention,
# its bytes do not depend on it.
# Usage: benchmarks/context_parallel.sh [BUILD_DIR]   (default build); writes
#   benchmarks/results/context_parallel.txt (or $OUT). SEQS / ATTN_SEQS override
#   the lengths (e.g. SEQS="1024 2048" for a quick look).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}" out="${OUT:-benchmarks/results/context_parallel.txt}"
seqs="${SEQS:-1024 2048 4096 8192 16384}" attn_seqs="${ATTN_SEQS:-1024,2048,4096,8192}"
for b in trident trident-torch benchmarks/bench_cp_attention; do
  [[ -x $build/$b ]] || { echo "context_parallel: $build/$b not found" >&2; exit 1; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
rows=""
for seq in $seqs; do
  base=""
  for run in "1 p2p" "2 p2p" "2 all_gather" "2 a2a" "4 p2p" "4 all_gather" "4 a2a"; do
    read -r cp kind <<< "$run"
    dir="$tmp/s$seq-cp$cp-$kind" log="$tmp/s$seq-cp$cp-$kind.log"
    sets=(--set model.layers=2 --set model.seq_len="$seq" --set training.micro_batch_size=1
          --set training.global_batch_size=1 --set training.steps=3 --set training.eval_interval=0
          --set training.threads=1 --set training.peak_tflops=1 --set logging.progress=false
          --set parallel.cp="$cp" --set logging.dir="$dir")
    [[ $cp == 1 ]] || sets+=(--set parallel.cp_comm="$kind")
    "$build/trident" launch --nproc-per-node "$cp" -- "$build/trident" train --config configs/llama-tiny.toml \
      "${sets[@]}" > "$log" 2>&1 || { echo "context_parallel: seq $seq cp $cp $kind failed:" >&2; tail -20 "$log" >&2; exit 1; }
    row=$(python3 - "$dir" "$seq" "$cp" "$kind" "$base" <<'PY'
import json, statistics, sys
d, seq, cp, kind, base = sys.argv[1:6]
s = json.load(open(d + "/rank-0.json"))
steps = [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()]
t = statistics.median(r["step_time_s"] for r in steps[1:])
b = s["peak_activation_bytes"] / s["peak_inflight"]
ratio = b / float(base) if base else 1.0
print("%6s %3s %-10s %12d %7.3f %9.3f %9.3f" % (seq, cp, kind, b, ratio, t, s["cp_comm_s"]))
PY
)
    [[ -n $base ]] || base=$(awk '{print $4}' <<< "$row")
    rows+="$row"$'\n'
  done
done
attn=$("$build/benchmarks/bench_cp_attention" --seqs "$attn_seqs" --reps 2)
{
  echo "# context parallelism: llama-tiny (2 layers, 8 heads, 4 kv heads, hidden 64), one sequence per step"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: benchmarks/context_parallel.sh $build   (2 cores: cp 4's times are 4 ranks on 2 cores)"
  echo "# columns: seq cp kind activation_bytes_per_microbatch ratio_to_cp1 step_s cp_comm_s(rank 0)"
  printf "%s" "$rows"
  echo "#"
  echo "# attention alone, forward + backward of one layer (8 heads, 4 kv heads, head dim 64, batch 1, one thread"
  echo "# per rank): ms per pass, the slower rank's; exposed_ms = the ring's waits for its transfers per pass"
  echo "# command: $build/benchmarks/bench_cp_attention --seqs $attn_seqs --reps 2"
  printf "%s\n" "$attn"
} | tee "$out"
