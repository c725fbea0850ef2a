#!/usr/bin/env bash
# bench/gpu_prep.sh - `make gpu-prep`: every binary a first run on a GPU needs, built on this machine
# (nvcc, no GPU needed) so the GPU's minutes go to running, not compiling:
#   train                   the CPU trainer (the losses the GPU's are compared with)
#   train-cuda              examples/train.c with the CUDA backend
#   cuda/cuda_suites        every CUDA parity suite (make test-cuda)
#   cuda-debug/cuda_suites  the same with MF_CUDA_DEBUG and -lineinfo (fault attribution, sanitizers)
#   cuda/bench_*            the GPU benchmarks of make gpu-report
#   train-mpi-cuda          the NCCL trainer, where mpicc is installed
# The host code is built for a portable x86-64 level (GPU_PREP_HOST, default -march=x86-64-v3): this
# machine's own instructions (AVX-512, AMX) may not exist on the GPU's host. The builds use the
# Makefile's flags (NVFLAGS, CUDA_ARCH) and its rules, into OBJ; the binaries are copied into PREP
# at their paths under build/ (PREP/cuda/cuda_suites is build/cuda/cuda_suites there), with
# PREP/MANIFEST.txt: the commit, the flags, and each file's size and SHA-256. PREP must stay under
# GPU_PREP_LIMIT_MB (default 60) to travel with the working tree. (GPU_PREP_MAKE: the make that
# builds; tests/test_gpu_first_run.sh packs stand-ins with `true`.)
#
#   bash bench/gpu_prep.sh PREP OBJ HOST_ARCH BIN...    (BIN? : optional, left out when not built)
# Exit status 1 when a binary did not build or the folder is over the limit.
set -u
cd "$(dirname "$0")/.." || exit 1
[ $# -ge 4 ] || { echo "usage: bash bench/gpu_prep.sh PREP OBJ HOST_ARCH BIN... (make gpu-prep runs it)" >&2; exit 2; }
PREP=$1; OBJ=$2; HOST=$3; shift 3
LIMIT_MB=${GPU_PREP_LIMIT_MB:-60}
JOBS=${GPU_PREP_JOBS:-$(nproc 2>/dev/null || echo 2)}
# a make run of its own (under make gpu-prep, not the outer one's jobserver)
unset MAKEFLAGS MFLAGS MAKELEVEL

# objects built with other flags are built again (make does not know the flags)
stamp="HOST_ARCH=$HOST $(make -s print-NVFLAGS) $(make -s print-NVCC)"
if [ "$(cat "$OBJ/.flags" 2> /dev/null)" != "$stamp" ]; then
    rm -rf "$OBJ"
    mkdir -p "$OBJ" && printf '%s\n' "$stamp" > "$OBJ/.flags"
fi
targets=()
for b in "$@"; do targets+=("$OBJ/${b%\?}"); done
echo "== make gpu-prep: building ${#targets[@]} binaries into $OBJ (host code $HOST)"
${GPU_PREP_MAKE:-make} -k -j"$JOBS" BUILD="$OBJ" HOST_ARCH="$HOST" "${targets[@]}"
build_rc=$?

rm -rf "$PREP"
mkdir -p "$PREP" || exit 1
missing=()
for b in "$@"; do
    t=${b%\?}
    if [ -x "$OBJ/$t" ]; then
        mkdir -p "$PREP/$(dirname "$t")" && cp -p "$OBJ/$t" "$PREP/$t"
    elif [ "$t" = "$b" ]; then
        missing+=("$t")
    else
        echo "note: $t was not built (optional: its compiler or libraries are missing here)"
    fi
done

commit=$(git rev-parse HEAD 2> /dev/null || echo unknown)
git diff --quiet HEAD 2> /dev/null || commit="$commit + local changes"
{
    echo "# make gpu-prep: binaries for a first GPU run (bench/gpu_first_run.sh); paths are under build/"
    echo "commit: $commit"
    echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m), $(grep -m1 'model name' /proc/cpuinfo 2> /dev/null | cut -d: -f2 | sed 's/^ *//')"
    echo "host code: $HOST"
    echo "nvcc: $("$(make -s print-NVCC)" --version 2> /dev/null | tail -n 1)"
    echo "NVFLAGS: $(make -s print-NVFLAGS)"
    echo "files:"
    (cd "$PREP" && find . -type f ! -name MANIFEST.txt | sed 's|^\./||' | sort | while read -r f; do
        printf '  %s %s %s\n' "$f" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
    done)
} > "$PREP/MANIFEST.txt"

bytes=$(du -sb "$PREP" | cut -f1)
mb=$(( (bytes + 1048575) / 1048576 ))
echo "== $PREP: $(grep -c '^  ' "$PREP/MANIFEST.txt") files, $mb MiB (limit $LIMIT_MB MiB)"
fail=0
if [ ${#missing[@]} -gt 0 ]; then
    echo "make gpu-prep: FAILED to build ${missing[*]} (make exit status $build_rc; the compiler's messages are above)"
    fail=1
fi
if [ "$mb" -gt "$LIMIT_MB" ]; then
    echo "make gpu-prep: $PREP holds $mb MiB, over the $LIMIT_MB MiB that travel with the working tree:"
    echo "  build for fewer GPU architectures (CUDA_ARCH) or leave out a binary (GPU_PREP_BINS)"
    fail=1
fi
[ "$fail" = 0 ] && echo "make gpu-prep: ready; on the GPU machine: bash bench/gpu_first_run.sh DIR"
exit "$fail"
