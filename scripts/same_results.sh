#!/usr/bin/env bash
# Runs the same gpt-tiny layouts with two builds and demands bit-identical
# per-step losses and gradient norms (`trident compare --rtol 0`): the check
# for a change meant to alter no arithmetic (a refactoring, a move of code).
#
#   scripts/same_results.sh run  BIN_DIR OUT_DIR   train every layout with BIN_DIR/trident into OUT_DIR
#   scripts/same_results.sh diff OLD_DIR NEW_DIR   compare two such OUT_DIRs layout by layout
#
# BIN_DIR holds `trident` and `trident-torch` (a copy of build/ before the change, say).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

# name | ranks | --set overrides (the regression matrix's kinds of row, and each precision/recompute mode)
layouts() {
  cat <<'ROWS'
ref|1|
bf16|1|training.precision=bf16
recompute_full|1|training.recompute=full
recompute_selective|1|training.recompute=selective
tp2|2|parallel.tp=2
dp2_zero1|2|parallel.dp=2 parallel.zero=1
pp2_zbv|2|parallel.pp=2 schedule.kind=zb-v schedule.chunks=2
pp2_dualpipev|2|parallel.pp=2 schedule.kind=dualpipev schedule.chunks=2
pp4_1f1b|4|parallel.pp=4 schedule.kind=1f1b
pp2dp2_uneven|4|parallel.pp=2 parallel.dp=2 schedule.kind=zb-h1 parallel.zero=1 parallel.pipeline_layers=[3,5]
3d_gpipe|8|parallel.tp=2 parallel.pp=2 parallel.dp=2 schedule.kind=gpipe parallel.overlap_grad_reduce=true
3d_1f1b_zero1|8|parallel.tp=2 parallel.pp=2 parallel.dp=2 schedule.kind=1f1b parallel.zero=1 parallel.overlap_grad_reduce=false
3d_interleaved_zero1|8|parallel.tp=2 parallel.pp=2 parallel.dp=2 schedule.kind=interleaved schedule.chunks=2 parallel.zero=1
3d_zbh1_sp|8|parallel.tp=2 parallel.pp=2 parallel.dp=2 schedule.kind=zb-h1 parallel.sequence_parallel=true
ROWS
}

case "${1:-}" in
  run)
    bin=$(cd "$2" && pwd); out=$3; mkdir -p "$out"
    layouts | while IFS='|' read -r name nproc sets; do
      args=(train --config "$here/configs/gpt-tiny.toml" --set training.steps=20 --set "logging.dir=$out/$name"
            --set logging.progress=false --set training.peak_tflops=1 --set training.micro_batch_size=4)
      for s in $sets; do args+=(--set "$s"); done
      if [ "$nproc" -gt 1 ]; then
        "$bin/trident" launch --nproc-per-node "$nproc" --master-port 0 -- "$bin/trident" "${args[@]}" > "$out/$name.txt" 2>&1
      else
        "$bin/trident" "${args[@]}" > "$out/$name.txt" 2>&1
      fi || { echo "$name: training failed, see $out/$name.txt" >&2; exit 1; }
      echo "$name: trained"
    done ;;
  diff)
    status=0
    while IFS='|' read -r name _ _; do
      if "$here/build/trident" compare "$2/$name" "$3/$name" --rtol 0 > /dev/null; then echo "$name: bit-identical"
      else echo "$name: DIFFERS"; status=1; fi
    done < <(layouts)
    exit $status ;;
  *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
