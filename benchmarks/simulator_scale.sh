#!/usr/bin/env bash
# Simulator at planner scale: generate, validate and simulate big interleaved
# schedules with `trident schedule --format summary`, recording wall time and
# peak RSS (/usr/bin/time -v) next to the machine's load.
# Usage: benchmarks/simulator_scale.sh BUILD_DIR [REPS]; writes $OUT or
# benchmarks/results/simulator_scale.txt (the previous results stay in git).
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [REPS]}
reps=${2:-${REPS:-3}}
out=${OUT:-benchmarks/results/simulator_scale.txt}  # the doc test sets OUT (and REPS=1)
{
  echo "# trident schedule --format summary at scale ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GB", $2/1048576}' /proc/meminfo); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "# before this work (2026-11-30): p=256 m=2048 v=4 took 31 s and 2.9 GB; p=1024 m=8192 v=4 did not finish in 120 s"
  echo "# 2026-12-01 00:50 (libtorch loaded at start-up, 4 KB pages): p=1024 m=8192 v=4 12.5-15.5 s wall, 4.9-5.8 s CPU, 925 MB at load 8.5;"
  echo "#   the same binary at 03:16 (load 3.4): 5.3 s wall, 3.9 s user + 1.0 s sys, 947 MB; start-up alone 0.9 s, 165 MB;"
  echo "#   and at 04:11 (load 1.2): 3.8-4.9 s wall, 3.4-4.0 s user + 0.4-0.8 s sys, 947 MB; start-up alone 0.7 s"
  echo "# columns: p m v compute_actions wall_s user_s sys_s peak_rss_mb loadavg_1min_before | summary"
  # The first row is the binary's start-up alone (`trident` has no libtorch: launch/main.cpp NOTE [two executables]).
  for args in "-p 2 -m 2 -v 2" "-p 256 -m 2048 -v 4" "-p 1024 -m 8192 -v 4"; do
    for rep in $(seq "$reps"); do
      load=$(cut -d' ' -f1 /proc/loadavg)
      /usr/bin/time -v "$build/trident" schedule --kind interleaved $args --format summary > /tmp/sim_scale.out 2> /tmp/sim_scale.time
      wall=$(awk -F': ' '/Elapsed/ {n = split($2, t, ":"); s = 0; for (i = 1; i <= n; ++i) s = s * 60 + t[i]; print s}' /tmp/sim_scale.time)
      rss=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 / 1024}' /tmp/sim_scale.time)
      user=$(awk -F': ' '/User time/ {print $2}' /tmp/sim_scale.time)
      sys=$(awk -F': ' '/System time/ {print $2}' /tmp/sim_scale.time)
      set -- $args
      echo "$2 $4 $6 $((2 * $2 * $4 * $6)) $wall $user $sys $rss $load | $(cat /tmp/sim_scale.out)"
    done
  done
} | tee "$out"
