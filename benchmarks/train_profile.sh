#!/usr/bin/env bash
# One micro-batch of gpt-small-brown, Trident's model against the libtorch loop's
# (bench_train_profile --reps), and the LM head's GEMMs against the 1024^3 matmul
# rate (--gemm), one thread, under the allocator policy both training runs use.
# Usage: benchmarks/train_profile.sh [BUILD_DIR]   (default: build; REPS from the
#   environment, default 7); writes benchmarks/results/train_profile.txt (or $OUT).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}" reps="${REPS:-7}" out="${OUT:-benchmarks/results/train_profile.txt}"
bin="$build/benchmarks/bench_train_profile"
[[ -x $bin ]] || { echo "train_profile: $bin not found (cmake --build $build --target bench_train_profile)" >&2; exit 1; }
export OMP_NUM_THREADS=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
body=$("$bin" --reps "$reps"; "$bin" --gemm)
mkdir -p "$(dirname "$out")"
{
  echo "# one gpt-small-brown micro-batch (4 x 128 tokens): Trident vs the libtorch loop's model, 1 thread"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores; load average at start: $load_start, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: benchmarks/train_profile.sh $build (REPS=$reps)"
  echo "commit: $(git rev-parse --short HEAD)"
  echo
  echo "$body"
} | tee "$out"
