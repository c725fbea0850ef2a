#!/usr/bin/env bash
# The CUDA build must compile wherever nvcc is installed (CI has nvcc but no GPU), for sm_90 plus
# PTX, with warnings as errors: the header with METAFORMER_CUDA, every CUDA parity suite
# (tests/test_cuda*.cpp as CUDA, what `make test-cuda` runs on a GPU) and examples/train.c with the
# CUDA backend (what `make train-cuda` builds). Nothing is run: the kernels are checked on the
# emulator by build/tests/test_cuda. Prints ok/FAIL lines and the runner's summary.
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CC=${CC:-cc}
pass=0; fail=0
if [ ! -x "$NVCC" ]; then
    echo "skip nvcc not found: the real CUDA build is not checked on this machine"
    echo "0 passed, 0 failed"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ARCH="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
WFLAGS="-Xcompiler -Wall,-Wextra -Werror all-warnings"
printf '%s\n' '#define METAFORMER_IMPLEMENTATION' '#define METAFORMER_CUDA' '#include "metaformer.h"' \
    'int main(void) { char why[256]; return mf_cuda_available(why, sizeof why) < 0; }' > "$tmp/build.cu"

# the builds run in parallel; each writes its log and status. Every CUDA parity suite
# (tests/test_cuda*.cpp except the emulator's own test) is what `make test-cuda` runs on a GPU.
names=("nvcc sm_90 + PTX build of metaformer.h with METAFORMER_CUDA"
       "nvcc sm_90 + PTX build of examples/train.c with the CUDA backend (make train-cuda)")
( "$NVCC" -std=c++14 -O2 -I. $ARCH $WFLAGS "$tmp/build.cu" -o "$tmp/build" -lcublas > "$tmp/1.log" 2>&1; echo $? > "$tmp/1.rc" ) &
( "$NVCC" -std=c++14 -O2 $ARCH $WFLAGS -c examples/metaformer_cuda.cu -o "$tmp/impl.o" > "$tmp/2.log" 2>&1 &&
  "$CC" -std=c99 -O2 -Wall -Wextra -pedantic -Werror -DMETAFORMER_IMPLEMENTATION_DONE -c examples/train.c -o "$tmp/train.o" >> "$tmp/2.log" 2>&1 &&
  "$NVCC" "$tmp/train.o" "$tmp/impl.o" -o "$tmp/train-cuda" -lcublas >> "$tmp/2.log" 2>&1; echo $? > "$tmp/2.rc" ) &
i=2
for suite in tests/test_cuda*.cpp; do
    [ "$suite" = tests/test_cuda_emu.cpp ] && continue
    i=$((i+1)); names+=("nvcc sm_90 + PTX build of $suite (make test-cuda)")
    ( "$NVCC" -x cu -std=c++14 -O2 -I. -Itests $ARCH $WFLAGS "$suite" -o "$tmp/suite$i" -lcublas > "$tmp/$i.log" 2>&1; echo $? > "$tmp/$i.rc" ) &
done
wait
for j in $(seq 1 $i); do
    if [ "$(cat "$tmp/$j.rc" 2>/dev/null)" = 0 ]; then
        echo "ok   ${names[$((j-1))]}"; pass=$((pass+1))
    else
        echo "FAIL ${names[$((j-1))]}"; head -20 "$tmp/$j.log"; fail=$((fail+1))
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
