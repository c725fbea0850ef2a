#!/usr/bin/env bash
# The CUDA builds must compile wherever nvcc is installed (CI has nvcc but no GPU), for sm_90 plus
# PTX, with warnings as errors, and with exactly the flags and rules of the GPU runs:
#   - `make gpu-prep` into a temporary folder: every binary of make cuda-all and make gpu-report
#     (train-cuda, the CUDA parity suites as one program and their MF_CUDA_DEBUG flavour, the GPU
#     benchmarks, build/train; train-mpi-cuda where mpicc is installed), through the Makefile's own
#     NVFLAGS and CFLAGS, so a break there fails here; the folder within its size limit, with its
#     manifest;
#   - examples/embed's CUDA build (`make -C examples/embed cuda`: the header with METAFORMER_CUDA
#     compiled by nvcc, a C program linked to it with cuBLAS), as a user builds it.
# Nothing is run: the kernels are checked on the emulator by build/tests/cuda_suites. Prints ok/FAIL
# lines and the runner's summary.
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
JOBS=${CUDA_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}
pass=0; fail=0
if [ ! -x "$NVCC" ]; then
    echo "skip nvcc not found: the real CUDA build is not checked on this machine"
    echo "0 passed, 0 failed"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ARCH="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
# this script may run inside `make test`: the builds below are make runs of their own
unset MAKEFLAGS MFLAGS MAKELEVEL
ok() { echo "ok   $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }

# the two builds run side by side, each on its share of the jobs; make -k goes on past a failure
mkdir -p "$tmp/embed"
make -k -j"$(( (JOBS + 1) / 2 ))" -C examples/embed cuda OUT="$tmp/embed" NVCC="$NVCC" CUDA_ARCH="$ARCH" \
    NVFLAGS="-std=c++14 -O2 $ARCH $(make -s print-NVWARN)" CFLAGS="-std=c99 -O2 -Wall -Wextra -pedantic -Werror" \
    > "$tmp/embed.log" 2>&1 &
GPU_PREP_JOBS=$JOBS make gpu-prep NVCC="$NVCC" GPU_PREP="$tmp/prep" GPU_PREP_OBJ="$tmp/obj" > "$tmp/prep.log" 2>&1
prep_rc=$?
wait
# the compiler's messages, without the command lines that make echoes
messages() { grep -v -e "^$NVCC " -e '^cc ' -e '^gcc ' -e '^mpicc ' -e '^mkdir ' -e '^make' "$1" | head -20; }

name="nvcc sm_90 + PTX build of examples/embed (make -C examples/embed cuda): metaformer.h with METAFORMER_CUDA in a C program"
if [ -x "$tmp/embed/embed-cuda" ]; then ok "$name"; else bad "$name"; messages "$tmp/embed.log"; fi
what() {
    case "$1" in
    train) echo "build/train, the CPU trainer beside the GPU runs" ;;
    train-cuda) echo "examples/train.c with the CUDA backend (make train-cuda)" ;;
    train-mpi-cuda) echo "examples/train.c with METAFORMER_CUDA, METAFORMER_NCCL and METAFORMER_MPI (make train-mpi-cuda)" ;;
    cuda/cuda_suites) echo "the CUDA parity suites, tests/cuda_suites.cpp (make test-cuda)" ;;
    cuda-debug/cuda_suites) echo "the CUDA parity suites with MF_CUDA_DEBUG and -lineinfo (the first run's fault attribution)" ;;
    cuda/bench_*) echo "bench/${1#cuda/}.c (make gpu-report, make bench-cuda)" ;;
    esac
}
for b in $(make -s print-GPU_PREP_BINS); do
    t=${b%\?}
    if [ -x "$tmp/prep/$t" ]; then ok "make gpu-prep: $t, $(what "$t")"
    elif [ "$t" != "$b" ] && ! command -v mpicc > /dev/null; then
        echo "skip make gpu-prep: $t: mpicc not found (apt-get install libopenmpi-dev openmpi-bin)"
    else bad "make gpu-prep: $t, $(what "$t")"; fi
done
if [ "$prep_rc" -eq 0 ] && grep -q '^commit: ' "$tmp/prep/MANIFEST.txt" 2> /dev/null; then
    ok "make gpu-prep: the folder with its manifest, within its size limit ($(du -sh "$tmp/prep" | cut -f1))"
else
    bad "make gpu-prep exited $prep_rc"; messages "$tmp/prep.log"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
