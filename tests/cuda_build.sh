#!/usr/bin/env bash
# The CUDA build must compile wherever nvcc is installed (CI has nvcc but no GPU): the header
# with METAFORMER_CUDA, for sm_90 plus PTX. Prints ok/FAIL lines and the runner's summary.
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
pass=0; fail=0
if [ ! -x "$NVCC" ]; then
    echo "skip nvcc not found: the real CUDA build is not checked on this machine"
    echo "0 passed, 0 failed"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf '%s\n' '#define METAFORMER_IMPLEMENTATION' '#define METAFORMER_CUDA' '#include "metaformer.h"' \
    'int main(void) { char why[256]; return mf_cuda_available(why, sizeof why) < 0; }' > "$tmp/build.cu"
if out=$("$NVCC" -std=c++14 -O2 -I. -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
        -Xcompiler -Wall,-Wextra -Werror all-warnings "$tmp/build.cu" -o "$tmp/build" 2>&1); then
    echo "ok   nvcc sm_90 + PTX build of metaformer.h with METAFORMER_CUDA"; pass=$((pass+1))
else
    echo "FAIL nvcc sm_90 + PTX build of metaformer.h with METAFORMER_CUDA"; printf '%s\n' "$out" | head -20; fail=$((fail+1))
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
