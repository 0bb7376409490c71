#!/usr/bin/env bash
# Simulator at planner scale: generate, validate and simulate big interleaved
# schedules with `trident schedule --format summary`, recording wall time and
# peak RSS (/usr/bin/time -v) next to the machine's load.
# Usage: benchmarks/simulator_scale.sh BUILD_DIR [REPS] [BASELINE_DIR]; writes $OUT or
# benchmarks/results/simulator_scale.txt (the previous results stay in git).
# BUILD_DIR (and BASELINE_DIR, or $BASELINE) is a directory holding `trident`.
# With a baseline, every repetition runs both binaries back to back, so the two
# are measured at the same moment (which goes first alternates), and the
# summary gives the median of the per-repetition wall-time ratios baseline / build.
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [REPS] [BASELINE_DIR]}
reps=${2:-${REPS:-3}}
baseline=${3:-${BASELINE:-}}
out=${OUT:-benchmarks/results/simulator_scale.txt}  # the doc test sets OUT (and REPS=1)
[ -x "$build/trident" ] || { echo "$0: no executable $build/trident" >&2; exit 2; }
[ -z "$baseline" ] || [ -x "$baseline/trident" ] || { echo "$0: no executable $baseline/trident" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bins=build
[ -z "$baseline" ] || bins="build baseline"

# one_run LABEL DIR ARGS...: prints one row of the table
one_run() {
  local label=$1 dir=$2; shift 2
  local load wall rss user sys
  load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -v "$dir/trident" schedule --kind interleaved "$@" --format summary > "$tmp/out" 2> "$tmp/time"
  wall=$(awk -F': ' '/Elapsed/ {n = split($2, t, ":"); s = 0; for (i = 1; i <= n; ++i) s = s * 60 + t[i]; print s}' "$tmp/time")
  rss=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 / 1024}' "$tmp/time")
  user=$(awk -F': ' '/User time/ {print $2}' "$tmp/time")
  sys=$(awk -F': ' '/System time/ {print $2}' "$tmp/time")
  echo "$label $2 $4 $6 $((2 * $2 * $4 * $6)) $wall $user $sys $rss $load | $(cat "$tmp/out")"
}

{
  echo "# trident schedule --format summary at scale ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo "# command: $0 $build $reps${baseline:+ $baseline}"
  echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GB", $2/1048576}' /proc/meminfo); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "# build: $build/trident${baseline:+; baseline: $baseline/trident}"
  echo "# columns: binary p m v compute_actions wall_s user_s sys_s peak_rss_mb loadavg_1min_before | summary"
  # The first size is the binary's start-up alone (`trident` has no libtorch: launch/main.cpp NOTE [two executables]).
  for args in "-p 2 -m 2 -v 2" "-p 256 -m 2048 -v 4" "-p 1024 -m 8192 -v 4"; do
    for rep in $(seq "$reps"); do
      # alternate which binary goes first, so neither always gets the cold run
      order=$bins; [ $((rep % 2)) = 1 ] || order=$(echo $bins | awk '{for (i = NF; i > 0; --i) printf "%s ", $i}')
      for b in $order; do
        if [ "$b" = build ]; then one_run build "$build" $args; else one_run baseline "$baseline" $args; fi
      done
    done
  done | tee "$tmp/rows"
  # Summary per size and binary: medians over the repetitions, and (with a
  # baseline) the median of the per-repetition wall ratios baseline / build.
  awk '
    function median(a, n,   i, j, t) {
      for (i = 2; i <= n; ++i) for (j = i; j > 1 && a[j - 1] > a[j]; --j) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { key = $2 " " $3 " " $4; if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
      k = key SUBSEP $1; n[k]++; wall[k, n[k]] = $6; user[k, n[k]] = $7; rss[k, n[k]] = $9 }
    END {
      print "# summary: p m v binary median_wall_s median_user_s median_peak_rss_mb [median ratio of wall baseline/build]"
      for (i = 1; i <= nk; ++i) {
        key = order[i]
        for (b = 0; b < 2; ++b) {
          lab = b ? "baseline" : "build"; k = key SUBSEP lab; if (!(k in n)) continue
          delete w; delete u; delete r
          for (j = 1; j <= n[k]; ++j) { w[j] = wall[k, j]; u[j] = user[k, j]; r[j] = rss[k, j] }
          line = sprintf("# %s %s %g %g %g", key, lab, median(w, n[k]), median(u, n[k]), median(r, n[k]))
          # the j-th baseline run against the j-th build run (same repetition); +0.005 s, half
          # of /usr/bin/time resolution, keeps start-up-only rows (0 s) finite
          if (b) { delete q; for (j = 1; j <= n[k]; ++j) q[j] = (wall[k, j] + 0.005) / (wall[key SUBSEP "build", j] + 0.005); line = line sprintf(" %.2f", median(q, n[k])) }
          print line
        }
      }
    }' "$tmp/rows"
} | tee "$out"
