#!/usr/bin/env bash
# The start-up of a CPU process with and without libtorch's CUDA libraries
# (NOTE [CUDA on demand] in parallel/cuda_runtime.h): `trident-torch --help`
# as built (libtorch_cpu only; libtrident_cuda.so is not loaded without an
# NVIDIA driver) against the same command with libtrident_cuda.so preloaded
# (LD_PRELOAD), which brings libtorch_cuda, c10_cuda, the CUDA runtime, NCCL
# and their static registrations in as linking them did. The two alternate,
# ROUNDS times each; we report the medians of wall time, user and system CPU
# seconds, minor page faults and the peak resident set. Builds nothing.
#
# Usage: benchmarks/startup.sh [BUILD_DIR]    (default: build)
# Environment: ROUNDS (20), OUT (benchmarks/results/startup.txt)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}"
rounds="${ROUNDS:-20}"
out="${OUT:-benchmarks/results/startup.txt}"
exe="$build/trident-torch" cuda="$build/libtrident_cuda.so"
source benchmarks/bench_common.sh
bench_need startup "$exe" /usr/bin/time
[[ -f $cuda ]] || { echo "startup: $cuda not found; build it: cmake --build $build" >&2; exit 1; }
bench_workdir

for r in $(seq 1 "$rounds"); do
  /usr/bin/time -f "cpu-only %e %U %S %R %M" -a -o "$work/times" "$exe" --help > /dev/null
  LD_PRELOAD="$(realpath "$cuda")" /usr/bin/time -f "with-cuda %e %U %S %R %M" -a -o "$work/times" "$exe" --help > /dev/null
done

mkdir -p "$(dirname "$out")"
python3 - "$work/times" "$rounds" "$load_start" > "$work/summary.txt" <<'PY'
import statistics, sys, datetime, subprocess
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 6 and f[0] in ("cpu-only", "with-cuda"):
        rows.setdefault(f[0], []).append([float(x) for x in f[1:]])
cols = ["wall s", "user s", "sys s", "minor faults", "peak RSS MB"]
med = {k: [statistics.median(r[i] for r in v) for i in range(5)] for k, v in rows.items()}
for k in med: med[k][4] /= 1024.0
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"# benchmarks/startup.sh: trident-torch --help, {sys.argv[2]} rounds alternating; medians")
print(f"date: {datetime.datetime.utcnow():%Y-%m-%dT%H:%M:%SZ}; commit: {commit}; load before: {sys.argv[3]}")
print(f"{'':32s}" + "".join(f"{c:>14s}" for c in cols))
names = {"cpu-only": "as built (libtorch_cpu)", "with-cuda": "libtrident_cuda.so preloaded"}
for k in ("cpu-only", "with-cuda"):
    print(f"{names[k]:32s}" + "".join(f"{x:14.3f}" if i < 3 else f"{x:14.0f}" for i, x in enumerate(med[k])))
a, b = med["cpu-only"], med["with-cuda"]
print(f"saved per process: {b[0] - a[0]:.3f} s wall, {b[1] + b[2] - a[1] - a[2]:.3f} s CPU, "
      f"{b[3] - a[3]:.0f} minor faults, {b[4] - a[4]:.0f} MB resident")
PY
cat "$work/summary.txt"
cp "$work/summary.txt" "$out"
echo "wrote $out"
