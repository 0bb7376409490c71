#!/usr/bin/env bash
# Tests of benchmarks/gpu/run.sh on a machine without a GPU.
#   tests/gpu_script.sh args REPO       argument errors, and --dry-run's commands
#   tests/gpu_script.sh rehearsal REPO WORK   vendor.sh, then run.sh --cpu-rehearsal:
#       a second build against the vendored toml++, nlohmann-json, Boost and Gloo headers, the same training
#       and comparison steps on the CPU, and a results file without failures.
set -uo pipefail
mode=${1:?usage: gpu_script.sh args|rehearsal REPO [WORK]}
repo=$(cd "${2:?REPO}" && pwd)
script=$repo/benchmarks/gpu/run.sh
fail=0
check() {  # check NAME EXPECTED_STATUS PATTERN -- command...
  local name=$1 want=$2 pattern=$3
  shift 4
  local out status
  out=$("$@" 2>&1)
  status=$?
  if [[ $status -ne $want ]]; then
    echo "FAIL $name: exit $status, expected $want"; echo "$out" | tail -5; fail=1
  elif ! grep -q -- "$pattern" <<< "$out"; then
    echo "FAIL $name: output lacks '$pattern'"; echo "$out" | tail -5; fail=1
  else
    echo "ok   $name"
  fi
}
case $mode in
  args)
    check unknown-arg 2 "unknown argument '--bogus'" -- "$script" --bogus
    check missing-value 2 "--steps needs a value" -- "$script" --steps
    check bad-steps 2 "--steps must be a positive integer, got 'x'" -- "$script" --steps x
    check few-steps 2 "--steps must be at least 3" -- "$script" --steps 2
    check bad-recompute 2 "--recompute must be none, full or selective" -- "$script" --recompute some
    check gbs-mbs 2 "--gbs (10) must be a multiple of --mbs (4)" -- "$script" --mbs 4 --gbs 10
    check no-model 2 "no such file" -- "$script" --model /nonexistent.toml
    check no-deps 2 "run benchmarks/gpu/vendor.sh first" -- "$script" --deps /nonexistent --out "$(mktemp -d)"
    check help 0 "--cpu-rehearsal" -- "$script" --help
    check dry-python 0 "TRIDENT_PYTHON=python3" -- "$script" --dry-run --out "$(mktemp -d)"
    check dry-vendor 0 "TRIDENT_VENDOR_DIR=" -- "$script" --dry-run --out "$(mktemp -d)"
    check dry-train 0 "training.device=cuda --set training.precision=bf16" -- "$script" --dry-run --out "$(mktemp -d)"
    check dry-model 0 "configs/gpt2-1.3b.toml" -- "$script" --dry-run --out "$(mktemp -d)"
    check dry-cp-attention 0 "benchmarks/gpu/cp_attention.py cuda" -- "$script" --dry-run --out "$(mktemp -d)"
    check dry-compare 0 "compare .*tiny-cpu .*tiny-dev --keys loss --rtol 1e-4" -- "$script" --dry-run --out "$(mktemp -d)"
    check dry-mixtral 0 "configs/mixtral-tiny.toml --set training.steps=4 --set training.device=cuda --set training.precision=bf16" \
      -- "$script" --dry-run --out "$(mktemp -d)"
    check vendor-args 2 "usage" -- "$repo/benchmarks/gpu/vendor.sh" --bogus
    # nvcc where GPU machines keep it when PATH has none: $CUDA_HOME, then /usr/local/cuda.
    fake=$(mktemp -d)
    mkdir -p "$fake/cuda/bin" "$fake/bin"
    printf '#!/bin/sh\necho fake nvcc\n' > "$fake/cuda/bin/nvcc"
    chmod +x "$fake/cuda/bin/nvcc"
    for tool in bash git date dirname nproc cat grep sed mkdir python3 basename tail cp env; do
      p=$(command -v "$tool") && ln -sf "$p" "$fake/bin/$tool"
    done
    check nvcc-cuda-home 0 "nvcc: $fake/cuda/bin/nvcc" -- env PATH="$fake/bin" CUDA_HOME="$fake/cuda" \
      "$script" --dry-run --out "$(mktemp -d)"
    rm -rf "$fake"
    ;;
  rehearsal)
    work=${3:?WORK}
    rm -rf "$work"
    mkdir -p "$work"
    check vendor 0 "" -- "$repo/benchmarks/gpu/vendor.sh" "$work/deps"
    check rehearsal 0 "total:" -- env -u OUT "$script" --cpu-rehearsal --deps "$work/deps" --build "$work/build" \
      --out "$work/out" --steps 3 --tiny-steps 3 --jobs 2
    results=$(ls "$work"/out/results-*.txt 2>/dev/null | head -1)
    if [[ -z $results ]]; then
      echo "FAIL no results file in $work/out"; fail=1
    else
      cat "$results"
      for want in "build: Trident: libtorch 2.11.0" "CUDA 13.0" "NCCL " "throughput run: gpt2-1.3b.toml (shrunk" "tokens/s" \
                  "MFU against trident's start-up matmul peak" "loss within rtol 1e-4: PASS" \
                  "grad_norm within rtol 1e-3: PASS" "CPU REHEARSAL" "llama-tiny fp32" \
                  "gpt-tiny bf16 on cpu, 4 steps" "llama-tiny bf16 on cpu, 4 steps" "equal 1f1b's bit for bit: PASS" \
                  "mixtral-tiny fp32" "mixtral-tiny bf16 on cpu, 4 steps" "mixtral-tiny bf16 on cpu, host reads per step"; do
        grep -q -- "$want" "$results" || { echo "FAIL results lack '$want'"; fail=1; }
      done
      ! grep -q "FAIL" "$results" || { echo "FAIL results report a failure"; fail=1; }
      # A failing step is reported, the rest still runs, and the exit status says so.
      printf '[model]\nbogus = 1\n' > "$work/bad.toml"
      check failing-step 1 "throughput run: FAILED" -- env -u OUT "$script" --cpu-rehearsal --deps "$work/deps" \
        --build "$work/build" --out "$work/out-bad" --model "$work/bad.toml" --steps 3 --tiny-steps 3 --jobs 2
      grep -q "loss within rtol 1e-4: PASS" "$work"/out-bad/results-*.txt ||
        { echo "FAIL the comparison did not run after a failed step"; fail=1; }
      # The rehearsal compares the CPU with itself: the very same doubles.
      "$work/build/trident" compare "$repo/runs/gpu-work/tiny-cpu" "$repo/runs/gpu-work/tiny-dev" --rtol 0 ||
        { echo "FAIL the rehearsal's two CPU runs differ"; fail=1; }
    fi
    ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
exit $fail
