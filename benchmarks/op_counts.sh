#!/usr/bin/env bash
# Top-level ATen operations per training step, by phase (NOTE [operation
# counts] in core/op_count.h): `trident train` (the rank summary's aten_ops,
# the second step) against PyTorch eager (benchmarks/op_counts.py,
# torch.profiler, same rule) on gpt-tiny, llama-tiny and gpt-small-brown at
# tp = pp = dp = 1. On a GPU each operation is at least one kernel launch.
# Counts, not times: the machine's load does not change them. Builds nothing.
#
# Usage: benchmarks/op_counts.sh [BUILD_DIR]    (default: build)
# Environment: OUT (benchmarks/results/op_counts.txt), MODELS (an extended regex:
#   only the presets it matches; default all three; the documentation test counts gpt-tiny)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}"
out="${OUT:-benchmarks/results/op_counts.txt}"
trident="$build/trident" python=.venv/bin/python3
for b in "$trident" "$python"; do
  [[ -x "$b" ]] || { echo "op_counts: $b not found; build it: cmake --build $build --target trident" >&2; exit 1; }
done
data=data/brown-gpt2
[[ -f "$data.train.bin" ]] || { echo "op_counts: $data.train.bin not found (benchmarks/run_train_bench.sh prepares it)" >&2; exit 1; }
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
export OMP_NUM_THREADS=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# preset | trident --set overrides | op_counts.py arguments (the same sizes and batches)
rows=(
  "gpt-tiny||--arch gpt --layers 8 --hidden 64 --heads 8 --ffn 256 --seq 32 --vocab 256 --micro-batch 2 --global-batch 16"
  "llama-tiny||--arch llama --layers 8 --hidden 64 --heads 8 --kv-heads 4 --ffn 176 --seq 32 --vocab 256 --micro-batch 2 --global-batch 16"
  "gpt-small-brown|--set training.eval_interval=0|--arch gpt --layers 4 --hidden 128 --heads 4 --ffn 512 --seq 128 --vocab 50304 --micro-batch 4 --global-batch 16"
)
{
  echo "# top-level ATen operations per training step, by phase: trident train vs PyTorch eager"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores; load average at start: $load_start (counts do not depend on it)"
  echo "libtorch: $("$python" -c 'import torch; print(torch.__version__)') (PyPI torch in .venv)"
  echo "command: benchmarks/op_counts.sh $build"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- models parallel core runtime framework schedules || echo ' (+ local changes)')"
  echo "rule: an operation is counted when no other counted operation is running on its thread (core/op_count.h);"
  echo "      trident: the rank summary's aten_ops (step 2, tp = pp = dp = 1); PyTorch eager: benchmarks/op_counts.py"
  echo "      (step 2; torch.optim.AdamW and clip_grad_norm_ with foreach=True, and with their CPU default, a loop)"
  echo
  printf '%-16s %-22s %8s %8s %9s %9s %6s %8s\n' model contender forward backward grad_sync optimizer other total
} > "$work/table.txt"
counted=0
for row in "${rows[@]}"; do
  IFS='|' read -r preset sets pyargs <<< "$row"
  [[ -n "${MODELS:-}" && ! $preset =~ ${MODELS} ]] && continue
  counted=$((counted + 1))
  echo "op_counts: $preset" >&2
  # shellcheck disable=SC2086
  "$trident" train --config "configs/$preset.toml" --set training.steps=2 --set training.threads=1 \
    --set parallel.tp=1 --set parallel.pp=1 --set parallel.dp=1 --set logging.dir="$work/$preset" $sets \
    > "$work/$preset.log" 2>&1 || { tail -20 "$work/$preset.log" >&2; exit 1; }
  for opt in foreach loop; do
    # shellcheck disable=SC2086
    "$python" benchmarks/op_counts.py $pyargs --optimizer "$opt" 2> "$work/$preset-$opt.err" | tail -1 > "$work/$preset-$opt.json" ||
      { cat "$work/$preset-$opt.err" >&2; exit 1; }
  done
  python3 - "$work" "$preset" >> "$work/table.txt" <<'PYEOF'
import json, sys
work, preset = sys.argv[1], sys.argv[2]
t = json.load(open(f"{work}/{preset}/rank-0.json"))["aten_ops"]
rows = [("trident", t)] + [(f"eager ({o} AdamW)", json.load(open(f"{work}/{preset}-{o}.json"))) for o in ("foreach", "loop")]
for name, c in rows:
    print(f"{preset:<16} {name:<22} {c['forward']:>8} {c['backward']:>8} {c['grad_sync']:>9} {c['optimizer']:>9} "
          f"{c['other']:>6} {c['total']:>8}")
PYEOF
done
((counted)) || { echo "op_counts: no preset matches MODELS='${MODELS:-}'" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
tee "$out" < "$work/table.txt"
