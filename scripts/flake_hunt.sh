#!/usr/bin/env bash
# Runs the suite (or a part of it) several times with a CPU hog beside it and
# lists every test that failed in any round: a test that fails once under load
# is a bug to find (in the test or in Trident), never a retry.
#   scripts/flake_hunt.sh [--rounds N] [--hogs H] [--capabilities LIST] [--out FILE] [-- CTEST_ARGS...]
#     --rounds N   rounds (default 5)
#     --capabilities LIST  the instruction sets the rounds compute with, one round after
#                  another in turn (default native), comma-separated: native (what libtorch
#                  picks on this CPU), default, avx2, avx512. A forced one sets ATen's
#                  ATEN_CPU_CAPABILITY, MKL's MKL_ENABLE_INSTRUCTIONS and oneDNN's
#                  ONEDNN_MAX_CPU_ISA together (NOTE [forced capabilities]); one this CPU
#                  lacks is refused before any round runs
#     --hogs H     busy processes beside the tests (default 1: one of the 2 cores)
#     --out FILE   results file (default benchmarks/results/flake_hunt.txt); each hunt is
#                  appended to it, so the file keeps every hunt's rounds
#     --keep-cache keep build/regression-cache between rounds (default: removed
#                  before each round, so every round trains every regression
#                  run again instead of reading the first round's results)
#     CTEST_ARGS   what to run, passed to ctest (default: every test, -j3, as scripts/test.sh's
#                  second pass runs them), e.g. -- -L '^unit$' -j2
# Needs a built tree (scripts/setup.sh). Each round's ctest log is kept beside
# the results file's name (FILE.round-K.log) until the next hunt.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=5 hogs=1 out="$repo/benchmarks/results/flake_hunt.txt" keep_cache=0 capabilities=native
while (($#)); do
  case "$1" in
    --rounds) rounds="${2:?--rounds needs a number}"; shift 2 ;;
    --hogs) hogs="${2:?--hogs needs a number}"; shift 2 ;;
    --out) out="${2:?--out needs a file}"; shift 2 ;;
    --keep-cache) keep_cache=1; shift ;;
    --capabilities) capabilities="${2:?--capabilities needs a list}"; shift 2 ;;
    --) shift; break ;;
    *) echo "flake_hunt.sh: unknown argument '$1' (see the header of scripts/flake_hunt.sh)" >&2; exit 2 ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "flake_hunt.sh: --rounds $rounds: expected an integer >= 1" >&2; exit 2; }
[[ $hogs =~ ^[0-9]+$ ]] || { echo "flake_hunt.sh: --hogs $hogs: expected an integer >= 0" >&2; exit 2; }
# NOTE [forced capabilities]
# CPUs round differently because each library dispatches by instruction set: ATen's own
# kernels (reductions, softmax, elementwise) by ATEN_CPU_CAPABILITY, MKL's GEMMs by the
# processor (MKL_ENABLE_INSTRUCTIONS caps it), oneDNN by its ISA (ONEDNN_MAX_CPU_ISA caps
# it). Capping all three makes this machine sum as a CPU of that generation does, so an
# exactness test can be proven on Intel and AMD, with and without AVX-512, from one machine.
# A cap above what the CPU has would run instructions it lacks: refused.
IFS=, read -r -a caps <<< "$capabilities"
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo)
for c in "${caps[@]}"; do
  case "$c" in
    native|default) ;;
    avx2) [[ " $cpu_flags " == *" avx2 "* ]] || { echo "flake_hunt.sh: --capabilities avx2: this CPU has no AVX2" >&2; exit 2; } ;;
    avx512) [[ " $cpu_flags " == *" avx512f "* && " $cpu_flags " == *" avx512bw "* && " $cpu_flags " == *" avx512vl "* && " $cpu_flags " == *" avx512dq "* ]] ||
              { echo "flake_hunt.sh: --capabilities avx512: this CPU has no AVX-512 (F, BW, VL, DQ)" >&2; exit 2; } ;;
    *) echo "flake_hunt.sh: --capabilities: unknown capability '$c' (expected native, default, avx2 or avx512)" >&2; exit 2 ;;
  esac
done
# The environment of a round computing as capability $1 (native: none forced).
capability_env() {
  case "$1" in
    native) echo "" ;;
    default) echo "ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41" ;;
    avx2) echo "ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2" ;;
    avx512) echo "ATEN_CPU_CAPABILITY=avx512 MKL_ENABLE_INSTRUCTIONS=AVX512 ONEDNN_MAX_CPU_ISA=AVX512_CORE" ;;
  esac
}
cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
cpu_id="$cpu_model (family $(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), model $(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')$([[ " $cpu_flags " == *" avx512f "* ]] && echo ', AVX-512' || echo ', no AVX-512'))"
ctest_args=("$@")
((${#ctest_args[@]})) || ctest_args=(-j3)
[[ -f $repo/build/CTestTestfile.cmake ]] || { echo "flake_hunt.sh: no build/ with tests: run scripts/setup.sh first" >&2; exit 2; }

hog_pids=()
stop_hogs() { ((${#hog_pids[@]})) && kill "${hog_pids[@]}" 2>/dev/null; hog_pids=(); }
trap stop_hogs EXIT
mkdir -p "$(dirname "$out")"
{
  echo "# scripts/flake_hunt.sh: each round runs ctest ${ctest_args[*]} with $hogs busy process(es) beside it"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ) (start); commit: $(git -C "$repo" rev-parse --short HEAD)$(git -C "$repo" diff --quiet HEAD -- . ':!benchmarks/results' || echo ' (with uncommitted changes)')"
  echo "machine: $(nproc) cores, $cpu_id"
  echo "capabilities: ${caps[*]}, one round after another"
  echo "regression cache: $( ((keep_cache)) && echo 'kept between rounds (--keep-cache)' || echo 'removed before each round')"
} >> "$out"
total_failed=0
for ((r = 1; r <= rounds; r++)); do
  # NOTE [reference cache] (tests/regression/regression_util.h): a cached run is
  # read, not trained; a round that read them would not be a round of the suite.
  ((keep_cache)) || rm -rf "$repo/build/regression-cache"
  for ((h = 0; h < hogs; h++)); do
    (while :; do :; done) &
    hog_pids+=($!)
  done
  log="$out.round-$r.log"
  cap=${caps[$(((r - 1) % ${#caps[@]}))]}
  read -r -a cap_env <<< "$(capability_env "$cap")"
  start=$(date +%s)
  set +e
  (cd "$repo/build" && env "${cap_env[@]}" ctest --output-on-failure --timeout 600 "${ctest_args[@]}") > "$log" 2>&1
  set -e
  stop_hogs
  secs=$(($(date +%s) - start))
  ran=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  failed=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (\(.*\))$/\1 (\2)/p' "$log" | sort -u)
  nfail=0
  [[ -n $failed ]] && nfail=$(printf '%s\n' "$failed" | wc -l)
  total_failed=$((total_failed + nfail))
  echo "round $r ($cap${cap_env:+: ${cap_env[*]}}; $cpu_id): ${ran:-no} tests in ${secs} s, $nfail failed${failed:+: $(printf '%s' "$failed" | paste -sd ';' | sed 's/;/; /g')}" | tee -a "$out"
  if [[ -z $ran ]]; then
    echo "flake_hunt.sh: round $r ran no tests (see $log)" >&2
    exit 1
  fi
done
echo "end: $(date -u +%Y-%m-%dT%H:%M:%SZ); $total_failed failure(s) in $rounds round(s)" | tee -a "$out"
((total_failed == 0))
