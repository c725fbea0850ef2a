#!/usr/bin/env bash
# The CUDA build must compile wherever nvcc is installed (CI has nvcc but no GPU), for sm_90 plus
# PTX, with warnings as errors: examples/embed's CUDA build (`make -C examples/embed cuda`: the
# header with METAFORMER_CUDA compiled by nvcc, a C program linked to it with cuBLAS),
# examples/train.c with the CUDA backend (what `make train-cuda` builds), the CUDA parity suites
# (tests/test_cuda*.cpp except the emulator's own test, as one program: tests/cuda_suites.cpp, what
# `make test-cuda` runs on a GPU) and the GPU benchmarks of bench/run_cuda.sh (make gpu-report, make
# bench-cuda).
# The targets are built by those Makefiles themselves, into a temporary folder, so what is checked
# is what a user gets. Nothing is run: the kernels are checked on the emulator by
# build/tests/cuda_suites. Prints ok/FAIL lines and the runner's summary.
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
WFLAGS="-Xcompiler -Wall,-Wextra -Werror all-warnings"
CWARN="-std=c99 -O2 -Wall -Wextra -pedantic -Werror"
# this script may run inside `make test`: the builds below are make runs of their own
unset MAKEFLAGS MFLAGS MAKELEVEL

names=("nvcc sm_90 + PTX build of examples/embed (make -C examples/embed cuda): metaformer.h with METAFORMER_CUDA in a C program"
       "nvcc sm_90 + PTX build of examples/train.c with the CUDA backend (make train-cuda)")
targets=("$tmp/embed/embed-cuda" "$tmp/train-cuda")
for b in bench_model bench_attention bench_fw_sweep bench_reduce; do
    names+=("nvcc sm_90 + PTX build of bench/$b.c (what make gpu-report and make bench-cuda run)")
    targets+=("$tmp/cuda/$b")
done
# the suites of make test-cuda, as its Makefile lists them
for t in $(make -s print-CUDA_SUITES BUILD="$tmp"); do
    names+=("nvcc sm_90 + PTX build of tests/$(basename "$t").cpp, the CUDA parity suites (make test-cuda)")
    targets+=("$t")
done
names+=("nvcc sm_90 + PTX build of tests/cuda_suites.cpp with -DMF_CUDA_DEBUG -lineinfo (build/cuda-debug/cuda_suites)")
targets+=("$tmp/cuda-debug/cuda_suites")

# the NCCL transport (METAFORMER_MPI + METAFORMER_NCCL): build/train-mpi-cuda, the library compiled by
# nvcc with mpi.h's include path from the MPI compiler wrapper, train.c by mpicc, linked with NCCL,
# cuBLAS and the MPI libraries (make train-mpi-cuda)
nccl_name="nvcc sm_90 + PTX build of examples/train.c with METAFORMER_CUDA, METAFORMER_NCCL and METAFORMER_MPI (make train-mpi-cuda)"
if command -v mpicc > /dev/null; then
    names+=("$nccl_name"); targets+=("$tmp/train-mpi-cuda")
else
    echo "skip $nccl_name: mpicc not found (apt-get install libopenmpi-dev openmpi-bin)"
fi

# the two builds run side by side, each on its share of the jobs; make -k goes on past a failure
mkdir -p "$tmp/embed"
make -k -j"$(( (JOBS + 1) / 2 ))" -C examples/embed cuda OUT="$tmp/embed" NVCC="$NVCC" CUDA_ARCH="$ARCH" \
    NVFLAGS="-std=c++14 -O2 $ARCH $WFLAGS" CFLAGS="$CWARN" > "$tmp/embed.log" 2>&1 &
make -k -j"$JOBS" BUILD="$tmp" NVCC="$NVCC" CUDA_ARCH="$ARCH" CFLAGS="$CWARN" \
    NVFLAGS="-std=c++14 -O2 $ARCH -Xcompiler -fopenmp $WFLAGS" "${targets[@]:1}" > "$tmp/root.log" 2>&1
wait
for j in "${!targets[@]}"; do
    if [ -x "${targets[$j]}" ]; then
        echo "ok   ${names[$j]}"; pass=$((pass+1))
    else
        echo "FAIL ${names[$j]}"; fail=$((fail+1))
        log=$tmp/root.log; [ "$j" -eq 0 ] && log=$tmp/embed.log
        # the compiler's messages, without the command lines that make echoes
        grep -v -e "^$NVCC " -e '^cc ' -e '^gcc ' -e '^mpicc ' -e '^mkdir ' -e '^make' "$log" | head -20
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
