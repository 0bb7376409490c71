#!/usr/bin/env bash
# Prepares, on a machine with Debian's packages, what benchmarks/gpu/run.sh
# needs on the GPU machine, which has PyTorch 2.11 (its libtorch, CUDA and NCCL),
# CMake and nvcc but no network, no toml++, no nlohmann-json, no Boost and no Gloo headers:
#   DIR/include/toml++/                  toml++ headers (used header-only there)
#   DIR/include/nlohmann/                nlohmann-json headers (header-only), as Debian ships them
#   DIR/include/boost/                   the headers <boost/program_options.hpp> includes
#   DIR/lib/libboost_program_options.a   Debian's static Boost.Program_options
#   DIR/gloo-headers/gloo/               libgloo-dev's headers (NOTE [Gloo headers] in parallel/torch.cmake)
#   DIR/data/brown-gpt2.{train,val}.bin  the prepared Brown corpus (scripts/setup_data.sh)
#   DIR/ref-tiny-cpu/metrics.jsonl       gpt-tiny fp32 on this machine's CPU build (when build/trident exists)
#   DIR/MANIFEST.txt                     where each came from, with package versions
# GoogleTest is not carried: the GPU build is configured with TRIDENT_BUILD_TESTS=OFF.
# DIR (default .gpu-deps, ignored by git) is what the device tool's `carry` names.
set -euo pipefail
usage() { echo "usage: benchmarks/gpu/vendor.sh [DIR]   (default DIR: .gpu-deps in the repository)"; }
case "${1:-}" in -h | --help) usage; exit 0 ;; -*) usage >&2; exit 2 ;; esac
repo=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$repo/.gpu-deps}
[[ $# -le 1 ]] || { usage >&2; exit 2; }
for f in /usr/include/toml++/toml.h /usr/include/nlohmann/json.hpp /usr/include/boost/program_options.hpp \
         /usr/lib/x86_64-linux-gnu/libboost_program_options.a /usr/include/gloo/rendezvous/store.h; do
  [[ -e $f ]] || { echo "vendor.sh: $f is missing (scripts/setup.sh installs the packages)" >&2; exit 1; }
done
for f in "$repo/data/brown-gpt2.train.bin" "$repo/data/brown-gpt2.val.bin"; do
  [[ -e $f ]] || { echo "vendor.sh: $f is missing (run scripts/setup_data.sh)" >&2; exit 1; }
done

rm -rf "$dir"
mkdir -p "$dir/include" "$dir/lib" "$dir/data"
cp -r /usr/include/toml++ "$dir/include/"
cp -r /usr/include/nlohmann "$dir/include/"  # each header keeps its MIT licence line
# The header closure of <boost/program_options.hpp>, as the compiler sees it.
echo '#include <boost/program_options.hpp>' | c++ -std=c++17 -x c++ -M - |
  tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u |
  while read -r h; do
    mkdir -p "$dir/include/$(dirname "${h#/usr/include/}")"
    cp "$h" "$dir/include/${h#/usr/include/}"
  done
cp /usr/lib/x86_64-linux-gnu/libboost_program_options.a "$dir/lib/"
# Gloo's headers: PyPI's torch ships none (NOTE [Gloo headers] in parallel/torch.cmake).
mkdir -p "$dir/gloo-headers"
cp -r /usr/include/gloo "$dir/gloo-headers/"
cp "$repo/data/brown-gpt2.train.bin" "$repo/data/brown-gpt2.val.bin" "$dir/data/"
if [[ -x $repo/build/trident ]]; then
  "$repo/build/trident" train --config "$repo/configs/gpt-tiny.toml" --set training.steps=20 \
    --set logging.dir="$dir/ref-tiny-cpu" --set logging.progress=false > "$dir/ref-tiny-cpu.log" 2>&1
fi
{
  echo "made by benchmarks/gpu/vendor.sh on $(date -u +%FT%TZ)"
  for p in libtomlplusplus-dev nlohmann-json3-dev libboost-program-options1.74-dev libboost1.74-dev libgloo-dev; do
    dpkg-query -W -f '${Package} ${Version}\n' "$p" 2>/dev/null || echo "$p (version unknown)"
  done
  echo "boost headers: $(find "$dir/include/boost" -type f | wc -l) files"
  [[ -e $dir/ref-tiny-cpu/metrics.jsonl ]] && echo "ref-tiny-cpu: $repo/build/trident, gpt-tiny, 20 steps, fp32, cpu"
} > "$dir/MANIFEST.txt"
du -sh "$dir"
