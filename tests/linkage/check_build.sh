#!/usr/bin/env bash
# What the build links, checked on the binary itself (CTest: BuildLinks, label unit):
#   1. NOTE [CUDA on demand] (parallel/cuda_runtime.h): build/trident-torch links libtorch_cpu
#      and none of libtorch's CUDA libraries, NCCL or the CUDA runtime; build/libtrident_cuda.so
#      links them all, directly (NEEDED) and resolved by the loader (ldd), and libtorch is the
#      pinned 2.11.0 (tests/torch_unit/test_cuda_runtime.cpp loads the library and checks what
#      its loading registers);
#   2. NOTE [Gloo headers] (parallel/torch.cmake): the binary defines no code of Gloo's own
#      (only std containers of shared_ptrs to Gloo types) and needs no Gloo symbol from
#      outside, so the Debian headers it parsed never lay out or run Gloo code;
#   3. `trident train` names the libtorch version and the build's CUDA version at start;
#   4. NOTE [checked before libtorch] (launch/main.cpp): `trident` checks train's arguments and
#      config itself, printing trident-torch's very message for a bad one, and hands a good one on.
# Usage: tests/linkage/check_build.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 src=$2
exe=$build/trident-torch
cuda=$build/libtrident_cuda.so
failed=0
fail() { echo "FAIL: $*"; failed=1; }

needed=$(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
grep -qx libtorch_cpu.so <<< "$needed" || fail "$exe does not link libtorch_cpu.so directly (NEEDED: $(echo $needed))"
for lib in libnccl.so.2 libtorch_cuda.so libc10_cuda.so libcudart.so.13 libtorch.so; do
  grep -qx "$lib" <<< "$needed" && fail "$exe links $lib, which only $cuda may link (NOTE [CUDA on demand])"
done
[[ -f $cuda ]] || fail "$cuda was not built"
cuda_needed=$(readelf -d "$cuda" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for lib in libnccl.so.2 libtorch_cuda.so libc10_cuda.so libcudart.so.13 libtorch_cpu.so; do
  grep -qx "$lib" <<< "$cuda_needed" || fail "$cuda does not link $lib directly (NEEDED: $(echo $cuda_needed))"
done
for f in "$exe" "$cuda"; do
  ldd_out=$(ldd "$f")
  grep -q 'not found' <<< "$ldd_out" && fail "ldd $f: $(grep 'not found' <<< "$ldd_out")"
done
for lib in libnccl.so.2 libtorch_cuda.so libc10_cuda.so libcudart.so.13 libcublas.so.13; do
  grep -q "$lib => /" <<< "$ldd_out" || fail "ldd $cuda does not resolve $lib"
done
echo "links: $(grep -oE '(libnccl|libtorch_cuda|libc10_cuda|libcudart)[^ ]* => [^ ]*' <<< "$ldd_out" | tr '\n' ';')"

# 2. Gloo: defined symbols naming gloo:: must be std containers of shared_ptr<gloo::...>.
own=$(nm -C --defined-only "$exe" | grep 'gloo::' | grep -vE ' std::(vector|__shared_ptr|shared_ptr|_Sp_)[^ ]*<std::shared_ptr<gloo::' )
[[ -z $own ]] || fail "the binary defines Gloo code compiled from the headers it parsed: $own"
undefined=$(nm -C -u "$exe" | grep 'gloo::')
[[ -z $undefined ]] || fail "the binary needs Gloo symbols from outside: $undefined"

# 3. The start-up line.
line=$("$build/trident" train --config "$src/configs/gpt-tiny.toml" --set training.steps=1 \
       --set logging.dir="$(mktemp -d)" 2>&1 | grep -m1 '^trident train:')
torch_version=$(sed -n 's/^torch==//p' "$src/requirements.txt")  # the pinned version
grep -q "libtorch $torch_version, CUDA 13.0 build" <<< "$line" ||
  fail "trident train's first line does not name libtorch $torch_version and CUDA 13.0: '$line'"
echo "start line: $line"

# 4. `trident` alone, in a folder without trident-torch: a bad config ends there, with exit 2 and the
#    message trident-torch prints; --help is answered there; a good config goes on to trident-torch,
#    which is missing here.
alone=$(mktemp -d)
trap 'rm -rf "$alone"' EXIT
cp "$build/trident" "$alone/trident"
bad=(train --config "$src/configs/gpt-tiny.toml" --set parallel.ep=3)
got=$("$alone/trident" "${bad[@]}" 2>&1); rc=$?
want=$("$exe" "${bad[@]}" 2>&1)
[[ $rc == 2 && $got == "$want" && $got == *"parallel.ep = 3"* ]] ||
  fail "trident without trident-torch beside it, on a bad config: exit $rc, '$got' (trident-torch: '$want')"
"$alone/trident" train --help 2>&1 | grep -q '^usage: trident train' || fail "trident train --help without trident-torch"
got=$("$alone/trident" train --config "$src/configs/gpt-tiny.toml" --set training.steps=1 2>&1); rc=$?
[[ $rc == 1 && $got == *"cannot run $alone/trident-torch"* ]] ||
  fail "trident without trident-torch beside it, on a good config: exit $rc, '$got' (expected: cannot run it)"
echo "checked before libtorch: $("$alone/trident" "${bad[@]}" 2>&1 | cut -c1-80)..."
exit $failed
