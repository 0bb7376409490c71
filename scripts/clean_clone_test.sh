#!/usr/bin/env bash
# CI's run on a clean clone of this checkout's HEAD, timed, with its figures in a
# results file: the wall time (set-up included), the test count, the result and
# the 15 longest tests with their seconds.
#   scripts/clean_clone_test.sh [--out FILE] [--fresh] [--log FILE]
#     --out FILE  results file (default benchmarks/results/fresh_clone_test.txt)
#     --log FILE  also keep .ci/run's whole output (every test's time) there
#     --fresh     no pip cache and no ccache (PIP_NO_CACHE_DIR=1, CCACHE_DISABLE=1),
#                 as on a machine that never built Trident
# The clone is made in a temporary folder and removed afterwards.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/benchmarks/results/fresh_clone_test.txt" fresh=0 keep_log=""
while (($#)); do
  case "$1" in
    --out) out="${2:?--out needs a file}"; shift 2 ;;
    --fresh) fresh=1; shift ;;
    --log) keep_log="${2:?--log needs a file}"; shift 2 ;;
    *) echo "clean_clone_test.sh: unknown argument '$1' (expected --out FILE, --fresh or --log FILE)" >&2; exit 2 ;;
  esac
done
dir=$(mktemp -d /tmp/trident-clean.XXXXXX)
trap 'rm -rf "$dir"' EXIT
git clone -q "$repo" "$dir/src"
commit=$(git -C "$dir/src" rev-parse --short HEAD)
env_prefix=()
((fresh)) && env_prefix=(env PIP_NO_CACHE_DIR=1 CCACHE_DISABLE=1)
log="$dir/ci.log"
start=$(date +%s) start_text=$(date -u +%Y-%m-%dT%H:%M:%SZ)
set +e
(cd "$dir/src" && "${env_prefix[@]}" .ci/run) > "$log" 2>&1
status=$?
set -e
secs=$(($(date +%s) - start))
[[ -n $keep_log ]] && cp "$log" "$keep_log"
# CTest's lines: "  12/585 Test  #34: Name ........   Passed   12.34 sec"
tests=$(grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: ' "$log" || true)
count=$(printf '%s\n' "$tests" | grep -c 'Test' || true)
passed=$(printf '%s\n' "$tests" | grep -c ' Passed ' || true)
{
  echo "# CI=1 .ci/run on a clean clone (scripts/clean_clone_test.sh$( ((fresh)) && echo ' --fresh'))"
  echo "date: $start_text (start), $(date -u +%Y-%m-%dT%H:%M:%SZ) (end); commit: $commit"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), Debian packages already installed"
  echo "cache: $( ((fresh)) && echo 'none (no pip cache, no ccache)' || echo "pip's cache and ccache as this machine has them")"
  echo "end to end: $((secs / 60)) min $((secs % 60)) s (.ci/run exit status $status)"
  echo "ctest: $count tests, $passed passed"
  grep -E 'Total Test time \(real\)' "$log" | sed 's/^/  pass: /' || true
  echo "longest 15 tests (seconds; the unit pass two at a time, the others three):"
  printf '%s\n' "$tests" | sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/' | sort -rn | head -15 |
    awk '{printf "  %8.2f  %s\n", $1, $2}'
  if ((status != 0)); then
    echo "failures:"
    grep -E '^\s+[0-9]+ - ' "$log" | sed 's/^/ /' || true
    grep -E '^scripts/test.sh: ' "$log" || true
  fi
} > "$out"
cat "$out"
exit "$status"
