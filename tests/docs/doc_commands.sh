#!/usr/bin/env bash
# Runs every command shown in the project's READMEs, its docs/ pages and its
# `trident --help` texts, as written, and fails naming the first one that does not exit 0.
#
# A command is a line (with its backslash continuations) of a ```sh block in
# README.md, every docs/*.md page, configs/README.md, schedules/README.md, benchmarks/README.md,
# launch/README.md or models/README.md; a block right after a line `<!-- doc-test: skip ... -->`
# is not run (the comment says why: the test suite itself, a real cluster).
# To keep the test short, training runs that do not set training.steps themselves
# get `--set training.steps=2` appended
# and the benchmark scripts read STEPS/ROUNDS/REPS/JSONL_MB (pipeline_prediction.sh: CASES; context_parallel.sh: SEQS,
# ATTN_SEQS) from the environment; their
# outputs go to a scratch directory, never over committed results (scripts/
# run from the repository, which they locate themselves; they write only
# ignored paths: build/, data/, runs/).
# PART (CTest runs one test per part): docs (README.md and the docs/ pages, in
# name order: most of the commands), benchmarks/README.md (the longest), or other
# (the other READMEs and the --help examples); without it every part runs. The
# commands of one part depend only on each other (a page's runs/ folders).
#   tests/docs/doc_commands.sh REPO_DIR [--list] [--part PART]
set -uo pipefail
repo="$(cd "${1:?usage: doc_commands.sh REPO_DIR [--list] [--part PART]}" && pwd)"
shift
list_only="" part=""
while (($#)); do
  case "$1" in
    --list) list_only=1 ;;
    --part) part="${2:?--part needs docs, benchmarks/README.md or other}"; shift ;;
    *) echo "doc_commands.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
pages=(README.md)
for page in "$repo"/docs/*.md; do
  [[ -f "$page" ]] && pages+=("docs/${page##*/}")
done
others=(configs/README.md schedules/README.md launch/README.md models/README.md)
docs=("${pages[@]}" configs/README.md schedules/README.md benchmarks/README.md launch/README.md models/README.md)
with_help=1
case "$part" in
  "") ;;
  docs) docs=("${pages[@]}") with_help=0 ;;
  benchmarks/README.md) docs=("$part") with_help=0 ;;
  other) docs=("${others[@]}") ;;
  *) echo "doc_commands.sh: --part '$part': expected docs, benchmarks/README.md or other" >&2; exit 2 ;;
esac

extract() {  # prints one command per line, continuations joined
  awk '
    /<!-- doc-test: skip/ { skip = 1; next }
    /^```sh[[:space:]]*$/ { inblock = 1; run = !skip; skip = 0; cmd = ""; next }
    /^```/ { if (inblock) { inblock = 0 } ; skip = 0; next }
    !inblock { if ($0 !~ /^[[:space:]]*$/) skip = 0; next }
    {
      if (!run) next
      line = $0
      sub(/[[:space:]]+#.*$/, "", line)          # trailing comment
      if (line ~ /^[[:space:]]*#/ || line ~ /^[[:space:]]*$/) next
      if (line ~ /\\[[:space:]]*$/) { sub(/\\[[:space:]]*$/, " ", line); cmd = cmd line; next }
      cmd = cmd line
      gsub(/[[:space:]]+/, " ", cmd)
      print cmd
      cmd = ""
    }' "$1"
}

scratch="$(mktemp -d "${TMPDIR:-/tmp}/trident-doc-XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
# The commands use repository-relative paths; run them in a scratch copy of
# the layout (links), so whatever they write lands in the scratch directory
# (data/ too: the benchmarks on gpt-small-brown read its prepared tokens).
for d in build configs scripts schedules launch node_modules .venv data tests; do
  [[ -e "$repo/$d" ]] && ln -s "$repo/$d" "$scratch/$d"
done
# benchmarks/ is copied, not linked: a benchmark that writes its results next to itself
# (benchmarks/results/) writes into the copy, never over the committed files.
cp -r "$repo/benchmarks" "$scratch/benchmarks"
export STEPS=2 ROUNDS=1 WARMUP=1 REPS=1 CASES="pp2-1f1b pp4-interleaved" JSONL_MB=4 SEQS=1024 ATTN_SEQS=256 OUT="$scratch/bench-out.txt"
# benchmarks/plan_vs_measured.sh trains 22 layouts; two (one per model family, both
# pipelined) show the script works end to end in a fifth of the time.
export ONLY='^(gpt-pp2-1f1b|llama-pp2-zbh1)$'
# benchmarks/op_counts.sh counts three presets, each against PyTorch twice; gpt-tiny shows it works.
export MODELS='^gpt-tiny$'

n=0
fail=0
for doc in "${docs[@]}"; do
  [[ -f "$repo/$doc" ]] || continue
  while IFS= read -r cmd; do
    [[ -z "$cmd" ]] && continue
    run="$cmd"
    # A command that sets its own step count (the resume demo's 20, gpt-tiny) runs as written.
    if [[ ("$run" == *"trident train"* || "$run" == scripts/main.sh*) && "$run" != *"training.steps="* ]]; then
      run="$run --set training.steps=2"
    fi
    n=$((n + 1))
    if [[ -n "$list_only" ]]; then
      echo "$doc: $run"
      continue
    fi
    echo "=== $doc: $run"
    start=$(date +%s)
    # scripts/ find the repository from their own path, so they run from it.
    dir="$scratch"
    [[ "$run" == scripts/* ]] && dir="$repo"
    if ! (cd "$dir" && timeout 600 bash -c "$run" < /dev/null > "$scratch/out.txt" 2>&1); then
      echo "FAILED ($doc): $run"
      tail -20 "$scratch/out.txt"
      fail=1
    else
      echo "    ok in $(( $(date +%s) - start )) s"
    fi
  done < <(extract "$repo/$doc")
done

# The examples printed by --help. The loop must run some: a --help text that
# stopped printing "example: " lines (or a subcommand list that came out empty)
# would otherwise pass by running nothing.
help_n=0
subs=0
((with_help)) && while IFS= read -r sub; do
  [[ -z "$sub" ]] && continue
  subs=$((subs + 1))
  ex="$("$repo/build/trident" $sub --help 2>&1 | sed -n 's/^example: //p')"
  while IFS= read -r cmd; do
    [[ -z "$cmd" ]] && continue
    run="$cmd"
    [[ "$run" == *"trident train"* && "$run" != *"training.steps="* ]] && run="$run --set training.steps=2"
    n=$((n + 1))
    help_n=$((help_n + 1))
    if [[ -n "$list_only" ]]; then echo "trident $sub --help: $run"; continue; fi
    echo "=== trident $sub --help: $run"
    if ! (cd "$scratch" && timeout 600 bash -c "$run" < /dev/null > "$scratch/out.txt" 2>&1); then
      echo "FAILED (trident $sub --help): $run"
      tail -20 "$scratch/out.txt"
      fail=1
    fi
  done <<< "$ex"
done < <("$repo/build/trident" --help | awk '/^  [a-z]/ {print $1}')

if (( n == 0 )); then echo "no commands found: the extractor is broken"; exit 1; fi
if ((with_help)) && (( help_n == 0 )); then
  echo "no --help example found in $subs subcommands of trident --help: the example extraction is broken"
  exit 1
fi
[[ -n "$list_only" ]] && exit 0
if (( fail )); then echo "some documented commands failed"; exit 1; fi
echo "all $n documented commands ran"
