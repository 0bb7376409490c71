#!/usr/bin/env bash
# The GPU check, in one call of the device machine (one H200, Python 3.12 with
# PyTorch 2.11.0+cu130, CMake, nvcc 13.0, no network), well inside 10 minutes:
#   1. configure and build `trident` the way scripts/setup.sh does here (CMake finds
#      libtorch through the python3's torch.utils.cmake_prefix_path, CUDA and NCCL
#      from its nvidia-* wheels or the machine's nvcc), with what that machine
#      lacks from DEPS (benchmarks/gpu/vendor.sh: toml++, nlohmann-json, Boost.Program_options,
#      Gloo's headers, the prepared Brown tokens) and no tests (GoogleTest is not
#      carried);
#   2. the device's bf16 matmul rate, measured with PyTorch (8192^3, random data);
#   3. tp = pp = dp = 1 bf16 training of MODEL (default configs/gpt2-1.3b.toml; a Llama
#      preset such as configs/llama-3.2-1b.toml trains on synthetic tokens)
#      on cuda for STEPS steps: tokens/s, and MFU against the matmul rate of
#      step 2 and against the one trident measures itself at start-up
#      (training.peak_tflops = 0);
#   4. gpt-tiny, llama-tiny and mixtral-tiny fp32 on cuda against the same binary's CPU
#      run (and gpt-tiny against DEPS/ref-tiny-cpu, the CPU machine's run, when present),
#      by `trident compare` (mixtral-tiny: the experts as at::_grouped_mm on the device
#      against one GEMM per expert on the CPU);
#   5. gpt-tiny, llama-tiny and mixtral-tiny bf16 on cuda under 1f1b and zb-h1: W deferred
#      after I on the device (the rank summary's deferred_weight_grads > 0) and zb-h1
#      bit-identical to 1f1b; mixtral-tiny's experts on the grouped GEMM's bf16 kernel, and
#      its step's host reads (the rank summary's count) no more than the CPU's: the loss,
#      the gradient norm and the MoE statistics, one each per logged step; its W actions
#      compute as many weight gradients as the CPU's (the experts' grouped GEMMs defer theirs);
#   6. context parallelism's ring merge (cp 2 and 4) on the device's attention kernels that
#      return the log-sum-exp, fp32 and bf16, against the whole sequence's attention.
# Results: OUTDIR/results-DATE.txt (the file to commit as
# benchmarks/gpu/results-DATE.txt) and up to 7 more files beside it.
#
# On the device tool: run benchmarks/gpu/vendor.sh here first, then
#   run(command="bash benchmarks/gpu/run.sh", carry=[".gpu-deps"], timeout_s=600)
# ($OUT is the folder that comes back), and commit $OUT/results-DATE.txt as
# benchmarks/gpu/results-DATE.txt.
#
# --cpu-rehearsal runs the same steps on a machine without a GPU, building with
# the project's .venv (scripts/setup.sh) as the device machine builds with its
# python3, with a small model for step 3 and the CPU for step 4, to test the
# script itself; its figures are no GPU results. --dry-run prints the commands only.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: benchmarks/gpu/run.sh [options]
  --out DIR         where results go (default: $OUT if set, else runs/gpu)
  --deps DIR        folder from benchmarks/gpu/vendor.sh (default: .gpu-deps)
  --build DIR       build folder (default: build-gpu, or build-gpu-rehearsal)
  --model CONFIG    model of the throughput run (default: configs/gpt2-1.3b.toml)
  --steps N         steps of the throughput run (default: 12; the first 2 are not timed)
  --mbs N           micro-batch size of the throughput run (default: 2)
  --gbs N           global batch size of the throughput run (default: 16)
  --recompute MODE  training.recompute of the throughput run (default: none)
  --tiny-steps N    steps of the gpt-tiny comparison (default: 20)
  --jobs N          build parallelism (default: nproc)
  --cpu-rehearsal   no GPU: the project's .venv, a small model, CPU only (tests the script)
  --dry-run         print the commands, run nothing
  -h, --help        this help
USAGE
}

repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$repo/runs/gpu}
deps=$repo/.gpu-deps
build=""
model=$repo/configs/gpt2-1.3b.toml
steps=12
mbs=2
gbs=16
recompute=none
tiny_steps=20
jobs=$(nproc 2>/dev/null || echo 2)
rehearsal=0
dry=0

need_value() { [[ $# -ge 2 && -n $2 && $2 != --* ]] || { echo "run.sh: $1 needs a value" >&2; usage >&2; exit 2; }; }
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: $1 must be a positive integer, got '$2'" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) need_value "$@"; out=$2; shift 2 ;;
    --deps) need_value "$@"; deps=$2; shift 2 ;;
    --build) need_value "$@"; build=$2; shift 2 ;;
    --model) need_value "$@"; model=$2; shift 2 ;;
    --steps) need_value "$@"; positive "$1" "$2"; steps=$2; shift 2 ;;
    --mbs) need_value "$@"; positive "$1" "$2"; mbs=$2; shift 2 ;;
    --gbs) need_value "$@"; positive "$1" "$2"; gbs=$2; shift 2 ;;
    --recompute) need_value "$@"; recompute=$2; shift 2 ;;
    --tiny-steps) need_value "$@"; positive "$1" "$2"; tiny_steps=$2; shift 2 ;;
    --jobs) need_value "$@"; positive "$1" "$2"; jobs=$2; shift 2 ;;
    --cpu-rehearsal) rehearsal=1; shift ;;
    --dry-run) dry=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case $recompute in none | full | selective) ;; *) echo "run.sh: --recompute must be none, full or selective, got '$recompute'" >&2; exit 2 ;; esac
(( gbs % mbs == 0 )) || { echo "run.sh: --gbs ($gbs) must be a multiple of --mbs ($mbs)" >&2; exit 2; }
(( steps >= 3 )) || { echo "run.sh: --steps must be at least 3 (the first 2 are not timed), got $steps" >&2; exit 2; }
[[ -f $model ]] || { echo "run.sh: --model $model: no such file" >&2; exit 2; }
if [[ $dry -eq 0 ]]; then
  [[ -e $deps/include/toml++/toml.h && -e $deps/include/nlohmann/json.hpp && -e $deps/lib/libboost_program_options.a ]] ||
    { echo "run.sh: $deps lacks toml++, nlohmann-json or Boost.Program_options: run benchmarks/gpu/vendor.sh first" >&2; exit 2; }
  [[ -e $deps/data/brown-gpt2.train.bin ]] || { echo "run.sh: $deps/data lacks brown-gpt2: rerun vendor.sh" >&2; exit 2; }
  deps=$(cd "$deps" && pwd)
fi
if [[ -z $build ]]; then
  build=$repo/build-gpu
  [[ $rehearsal -eq 0 ]] || build=$repo/build-gpu-rehearsal
fi
device=cuda
[[ $rehearsal -eq 1 ]] && device=cpu
day=$(date -u +%F)
work=$repo/runs/gpu-work
results=$out/results-$day.txt

run() {  # echo a command; run it unless --dry-run
  echo "+ $*"
  [[ $dry -eq 1 ]] || "$@"
}
note() { echo "$*"; [[ $dry -eq 1 ]] || echo "$*" >> "$results"; }

mkdir -p "$out"
failed=0  # the exit status: 1 when a step failed (the results file says which)
[[ $dry -eq 1 ]] || { mkdir -p "$work"; : > "$results"; }
t_start=$(date +%s)
title="# Trident GPU check (benchmarks/gpu/run.sh), $(date -u +%FT%TZ)"
[[ $rehearsal -eq 0 ]] || title+=" -- CPU REHEARSAL: no GPU figures"
note "$title"
note "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"

python=python3  # the device machine's, which holds PyTorch
[[ $rehearsal -eq 0 ]] || python=$repo/.venv/bin/python3

# The CUDA toolkit: nvcc on PATH, else where GPU machines keep it ($CUDA_HOME,
# $CUDA_PATH, /usr/local/cuda); CMake (cmake/TorchFromPython.cmake) takes the
# nvcc on PATH when the python's wheels lack one.
if ! command -v nvcc > /dev/null; then
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    if [[ -n $d && -x $d/bin/nvcc ]]; then
      export PATH=$d/bin:$PATH
      break
    fi
  done
fi
note "nvcc: $(command -v nvcc || echo 'none (the python's nvidia-* wheels must bring it)')"

# --- 0. what the machine has
if [[ $dry -eq 0 ]]; then
  {
    uname -a; nproc
    command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    command -v nvcc > /dev/null && nvcc --version | tail -2
    cmake --version | head -1
    c++ --version | head -1
    "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 || true
  } > "$out/env.txt" 2>&1
  note "machine: $(grep -m1 -i 'h200\|h100\|nvidia' "$out/env.txt" || echo 'no GPU listed'); $(grep -m1 '^torch' "$out/env.txt" || echo 'no python torch')"
fi

# --- 1. configure and build
cmake_args=(-S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTRIDENT_BUILD_TESTS=OFF -DTRIDENT_VENDOR_DIR="$deps"
            -DTRIDENT_PYTHON="$python")
command -v ninja > /dev/null && cmake_args+=(-G Ninja)
t0=$(date +%s)
if [[ $dry -eq 1 ]]; then
  run cmake "${cmake_args[@]}"
  run cmake --build "$build" --target trident -j "$jobs"
else
  { run cmake "${cmake_args[@]}" && run cmake --build "$build" --target trident -j "$jobs"; } > "$out/build.log" 2>&1 ||
    { note "build: FAILED (see build.log)"; tail -40 "$out/build.log"; exit 1; }
  note "build: $(grep -m1 'Trident: libtorch' "$out/build.log" | sed 's/^-- //') in $(( $(date +%s) - t0 )) s"
fi
trident=$build/trident

# --- 2. the device's bf16 matmul rate, measured by PyTorch in this run
matmul_tflops=""
if [[ $rehearsal -eq 0 && $dry -eq 0 ]]; then
  matmul_tflops=$(python3 - <<'PY'
import torch, time
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3): a @ b
torch.cuda.synchronize()
rates = []
for _ in range(5):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10): a @ b
    e.record(); torch.cuda.synchronize()
    rates.append(2 * n**3 * 10 / (s.elapsed_time(e) / 1e3) / 1e12)
print(f"{sorted(rates)[2]:.1f}")
PY
)
  note "bf16 matmul (PyTorch, 8192^3, random data, median of 5 x 10): $matmul_tflops TFLOP/s"
elif [[ $dry -eq 1 ]]; then
  echo "+ python3 <bf16 matmul rate, 8192^3>"
fi

# summary FILE SKIP: mean tokens/s, TFLOP/s and trident's MFU over steps after SKIP, and trident's peak
summary() {
  python3 - "$1" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r["step"] > int(sys.argv[2])]
n = len(rows)
tok = sum(r["tokens_per_s"] for r in rows) / n
tfl = sum(r["tflops"] for r in rows) / n
mfu = sum(r["mfu"] for r in rows) / n
st = sum(r["step_time_s"] for r in rows) / n
print(f"{n} {tok:.1f} {tfl:.3f} {mfu:.4f} {st:.4f} {tfl / mfu if mfu > 0 else 0:.2f} {rows[-1]['loss']:.4f}")
PY
}

# --- 3. tp = pp = dp = 1 bf16 throughput
big_dir=$work/big
big_args=(train --config "$model" --set parallel.tp=1 --set parallel.pp=1 --set parallel.dp=1
  --set parallel.sequence_parallel=false --set parallel.backend=auto --set schedule.kind=1f1b
  --set training.device="$device" --set training.precision=bf16 --set training.recompute="$recompute"
  --set training.steps="$steps" --set training.micro_batch_size="$mbs" --set training.global_batch_size="$gbs"
  --set training.peak_tflops=0 --set training.eval_interval=0 --set training.warmup_steps=1
  --set logging.dir="$big_dir" --set logging.progress=false)
# A GPT model reads the Brown tokens (GPT-2 BPE); a Llama preset has its own vocabulary
# (128,256 for Llama 3) and trains on its synthetic tokens.
if grep -Eq '^arch *= *"llama"' "$model"; then
  big_args+=(--set data.source=synthetic)
else
  big_args+=(--set data.source=file --set data.path="$deps/data/brown-gpt2")
fi
if [[ $rehearsal -eq 1 ]]; then  # a model this machine trains in seconds, through the same overrides
  big_args+=(--set model.layers=2 --set model.hidden=64 --set model.heads=4 --set model.ffn_hidden=256
    --set model.seq_len=64 --set training.threads=1)
  grep -Eq '^arch *= *"llama"' "$model" && big_args+=(--set model.kv_heads=2 --set model.vocab_size=512 \
    --set data.synthetic_tokens=20000)
fi
t0=$(date +%s)
if [[ $dry -eq 1 ]]; then
  run timeout 420 "$trident" "${big_args[@]}"
else
  rm -rf "$big_dir"
  # Bounded, so a hang still leaves time for step 4 and the results.
  if run timeout 420 "$trident" "${big_args[@]}" > "$out/train-big.log" 2>&1; then
    read -r n tok tfl mfu st peak loss < <(summary "$big_dir/metrics.jsonl" 2) || true
    shrunk=""
    [[ $rehearsal -eq 0 ]] || shrunk=" (shrunk for the rehearsal: 2 layers, hidden 64, seq 64)"
    note "throughput run: $(basename "$model")$shrunk bf16, tp=pp=dp=1, mbs $mbs, gbs $gbs, recompute $recompute, device $device"
    note "  $(grep -m1 'trident train:' "$out/train-big.log" | sed 's/--- effective.*//')"
    note "  mean over steps 3..$steps ($n steps): $tok tokens/s, $tfl TFLOP/s, step $st s, last loss $loss"
    note "  MFU against trident's start-up matmul peak ($peak TFLOP/s): $(python3 -c "print(f'{100*$mfu:.1f}')")%"
    if [[ -n $matmul_tflops ]]; then
      note "  MFU against the PyTorch bf16 matmul rate ($matmul_tflops TFLOP/s): $(python3 -c "print(f'{100*$tfl/$matmul_tflops:.1f}')")% (goal >= 50%)"
    fi
    cp "$big_dir/metrics.jsonl" "$out/metrics-big.jsonl"
  else
    note "throughput run: FAILED (exit $?), see train-big.log:"
    failed=1
    tail -5 "$out/train-big.log" | sed 's/^/  /' | tee -a "$results"
  fi
fi

# --- 4. gpt-tiny, llama-tiny and mixtral-tiny fp32: the device against the CPU (the same binary)
for family in gpt llama mixtral; do
tiny=(train --config "$repo/configs/$family-tiny.toml" --set training.steps="$tiny_steps" --set logging.progress=false)
if [[ $dry -eq 1 ]]; then
  run "$trident" "${tiny[@]}" --set logging.dir="$work/tiny-cpu"
  run "$trident" "${tiny[@]}" --set training.device="$device" --set logging.dir="$work/tiny-dev"
  run "$trident" compare "$work/tiny-cpu" "$work/tiny-dev" --keys loss --rtol 1e-4
else
  rm -rf "$work/tiny-cpu" "$work/tiny-dev"
  tiny_ok=1
  run timeout 180 "$trident" "${tiny[@]}" --set logging.dir="$work/tiny-cpu" >> "$out/tiny.log" 2>&1 || tiny_ok=0
  run timeout 180 "$trident" "${tiny[@]}" --set training.device="$device" --set logging.dir="$work/tiny-dev" >> "$out/tiny.log" 2>&1 || tiny_ok=0
  if [[ $tiny_ok -eq 1 ]]; then
    cp "$work/tiny-dev/metrics.jsonl" "$out/metrics-$family-tiny-$device.jsonl"
    note "$family-tiny fp32, $tiny_steps steps, $device against cpu (same binary):"
    # NOTE: different kernels (cuBLAS against the CPU's BLAS) sum in other
    # orders in every matmul, not only in reductions as TP/DP do (1e-5 there):
    # allowed 10x that on the loss and 100x on the gradient norm.
    for check in "loss 1e-4" "grad_norm 1e-3"; do
      read -r key rtol <<< "$check"
      if "$trident" compare "$work/tiny-cpu" "$work/tiny-dev" --keys "$key" --rtol "$rtol" > "$work/cmp.txt" 2>&1; then
        note "  $key within rtol $rtol: PASS ($(tail -1 "$work/cmp.txt"))"
      else
        note "  $key within rtol $rtol: FAIL ($(tail -1 "$work/cmp.txt"))"
        failed=1
      fi
      cat "$work/cmp.txt" >> "$out/tiny.log"
    done
    if [[ $family == gpt && -e $deps/ref-tiny-cpu/metrics.jsonl && $tiny_steps -eq 20 ]]; then
      r=PASS
      "$trident" compare "$deps/ref-tiny-cpu" "$work/tiny-dev" --keys loss --rtol 1e-4 > "$work/cmp.txt" 2>&1 ||
        { r=FAIL; failed=1; }
      note "  loss against the CPU machine's run (DEPS/ref-tiny-cpu) within rtol 1e-4: $r ($(tail -1 "$work/cmp.txt"))"
    fi
  else
    note "$family-tiny comparison: FAILED, see tiny.log:"
    failed=1
    tail -5 "$out/tiny.log" | sed 's/^/  /' | tee -a "$results"
  fi
fi
done

# --- 5. both families in bf16 on the device, and zero-bubble's W deferral there: zb-h1
# defers each weight gradient from its I to its W (NOTE [I/W split]); on CUDA that needs the
# queue to reach the autograd engine's device thread. The rank summary counts what the W
# actions computed (0 if the I did it all), and zb-h1 must equal 1f1b bit for bit.
for family in gpt llama mixtral; do
  for kind in 1f1b zb-h1; do
    d=$work/defer-$family-$kind
    args=(train --config "$repo/configs/$family-tiny.toml" --set training.steps=4 --set training.device="$device"
          --set training.precision=bf16 --set schedule.kind="$kind" --set training.eval_interval=0
          --set logging.log_interval=1 --set logging.progress=false --set logging.dir="$d")
    if [[ $dry -eq 1 ]]; then
      run "$trident" "${args[@]}"
      continue
    fi
    rm -rf "$d"
    run timeout 180 "$trident" "${args[@]}" >> "$out/defer.log" 2>&1 || { note "$family-tiny bf16 $kind on $device: FAILED (see defer.log)"; failed=1; }
  done
  [[ $dry -eq 1 ]] && continue
  a=$work/defer-$family-1f1b b=$work/defer-$family-zb-h1
  [[ -e $a/metrics.jsonl && -e $b/rank-0.json ]] || continue
  n=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["deferred_weight_grads"])' "$b/rank-0.json")
  last=$(python3 -c 'import json, sys; r = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]; print("%.4f -> %.4f" % (r[0]["loss"], r[-1]["loss"]))' "$a/metrics.jsonl")
  r=PASS
  "$trident" compare "$a" "$b" --keys loss,grad_norm --rtol 0 > "$work/cmp.txt" 2>&1 || r=FAIL
  (( n > 0 )) || r=FAIL
  [[ $r == PASS ]] || failed=1
  note "$family-tiny bf16 on $device, 4 steps, loss $last; W deferral: zb-h1's W actions computed $n weight gradients" \
       "and its losses and norms equal 1f1b's bit for bit: $r"
  if [[ $family == mixtral ]]; then
    # NOTE [grouped experts]: the device's experts (one grouped GEMM per projection) defer their
    # weight gradients to the W as the CPU's per-expert GEMMs do: the same count on both.
    c=$work/defer-mixtral-zb-h1-cpu
    rm -rf "$c"
    run timeout 180 "$trident" train --config "$repo/configs/mixtral-tiny.toml" --set training.steps=4 \
      --set training.device=cpu --set training.precision=bf16 --set schedule.kind=zb-h1 --set training.eval_interval=0 \
      --set logging.log_interval=1 --set logging.progress=false --set logging.dir="$c" >> "$out/defer.log" 2>&1 || true
    r=FAIL
    if [[ -e $c/rank-0.json ]]; then
      nc=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["deferred_weight_grads"])' "$c/rank-0.json")
      [[ $nc == "$n" ]] && r=PASS
    fi
    [[ $r == PASS ]] || failed=1
    note "mixtral-tiny bf16 zb-h1: W actions computed $n weight gradients on $device, ${nc:-?} on the CPU" \
         "(the experts' grouped GEMMs defer theirs): $r"
    # NOTE [host reads]: an MoE step reads the loss, the norm and the MoE statistics once per
    # logged step, on every device; the grouped GEMM's offsets stay on the device.
    reads=$(python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["host_reads"], sort_keys=True))' "$b/rank-0.json")
    r=PASS
    python3 -c 'import json, sys
h = json.loads(sys.argv[1])
sys.exit(0 if set(h["logged_step"]) <= {"loss", "gradient norm", "moe stats"} and max(h["logged_step"].values()) == 1
         and not h["other_step"] else 1)' "$reads" || { r=FAIL; failed=1; }
    note "mixtral-tiny bf16 on $device, host reads per step $reads: $r"
  fi
done
# --- 6. context parallelism's ring merge on the device's own kernels (flash attention in bf16,
# the memory-efficient kernel in fp32, each returning its log-sum-exp): every rank of cp 2 and 4
# played in one process against causal SDPA over the whole sequence (benchmarks/gpu/cp_attention.py).
# Trident's ring runs its steps as explicit fp32 products on CUDA (NOTE [ring step kernels]); this
# checks the kernels a fused CUDA step would use, their log-sum-exp layouts included.
if [[ $dry -eq 1 ]]; then
  run "$python" "$repo/benchmarks/gpu/cp_attention.py" "$device"
else
  echo "+ timeout 120 $python $repo/benchmarks/gpu/cp_attention.py $device"
  timeout 120 "$python" "$repo/benchmarks/gpu/cp_attention.py" "$device" > "$work/cp_attention.txt" 2>&1 || failed=1
  while IFS= read -r line; do note "$line"; done < "$work/cp_attention.txt"
fi
note "total: $(( $(date +%s) - t_start )) s"
if [[ $dry -eq 0 ]]; then
  # On the device machine the results also land where they are committed.
  [[ $rehearsal -eq 1 ]] || cp "$results" "$repo/benchmarks/gpu/" 2>/dev/null || true
  echo "--- $results"
  cat "$results"
fi
exit $failed
