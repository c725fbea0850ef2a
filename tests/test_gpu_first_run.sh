#!/usr/bin/env bash
# The prepared first GPU run, end to end on a stub GPU machine: bench/gpu_prep.sh packs stand-in
# binaries with their manifest (as make gpu-prep does after its build), then bench/gpu_first_run.sh
# runs from that folder in a copy of the repository. The stub machine: an nvidia-smi that names an
# H200, a compute-sanitizer that runs its program and reports what the test tells it, compilers
# that record any call (nothing may be compiled), no torch. The stand-in parity program has a suite
# that passes, one that fails and one that hangs; its debug flavour records that it ran; the
# trainer for the GPU is the CPU trainer with the device options dropped. Checked: nothing compiled,
# the hung suite cut at its limit, the failed one run again from the debug build, the sanitizer's
# error found, at most 8 files with summary.md, the time limits (the default ones through
# --dry-run: smoke within 3 minutes, the whole within 9), and the refusals (no prepared folder, a
# file that differs from its manifest, a folder over the size limit, a folder that is not empty).
# Uses build/train. Prints ok/FAIL lines and the runner's summary; KEEP_TMP=1 keeps the folder.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
scratch_tmp
not() { ! "$@"; }

# ---- the default time limits, through --dry-run -------------------------------------------------
NVIDIA_SMI=false bash bench/gpu_first_run.sh --dry-run "$tmp/dry" > "$tmp/dry.txt" 2>&1
rc=$?
check "--dry-run exits 0 (status $rc) and writes nothing" [ "$rc" -eq 0 ] && [ ! -e "$tmp/dry" ]
limit() { sed -n "s/^== part $1: .*(time limit \([0-9]*\) s)$/\1/p" "$tmp/dry.txt"; }
smoke=$(( $(limit env) + $(limit test-cuda) + $(limit sanitizer) + $(limit train) ))
check "--dry-run: the smoke parts (env, test-cuda, sanitizer, train) within 3 minutes ($smoke s)" [ "$smoke" -le 180 ]
budget=$(sed -n 's/.*cut to the budget of \([0-9]*\) s.*/\1/p' "$tmp/dry.txt")
check "--dry-run: the whole run within 9 minutes (the report's budget ${budget:-none} s + 15 s)" \
    [ -n "$budget" ] && [ $((budget + 15)) -le 540 ]
check "--dry-run: nothing built (no make, no nvcc), the benchmarks with --no-build" \
    not grep -qE '\$ (make |[^ ]*nvcc (-|[^-]))' <(grep -v 'nvcc --version$' "$tmp/dry.txt") && [ "$(grep -c 'run_cuda.sh .*--no-build' "$tmp/dry.txt")" -eq 3 ]
check "--dry-run: memcheck on every suite of the debug build, racecheck on attention" \
    grep -q "compute-sanitizer --tool memcheck .* build/cuda-debug/cuda_suites SUITE" "$tmp/dry.txt" &&
    grep -q "compute-sanitizer --tool racecheck .* build/cuda-debug/cuda_suites test_cuda_attention" "$tmp/dry.txt"

# ---- the stub machine ----------------------------------------------------------------------------
mkdir -p "$tmp/repo" "$tmp/bin" "$tmp/obj/cuda" "$tmp/obj/cuda-debug"
git ls-files -z | xargs -0 cp --parents -t "$tmp/repo"
printf '#!/bin/sh\ncase "$*" in *compute_cap*) echo 9.0 ;; *name,*) echo "NVIDIA H200, 570.00, 143771 MiB" ;; *name*) echo "NVIDIA H200" ;; *) echo stub ;; esac\n' > "$tmp/bin/nvidia-smi"
for c in nvcc cc gcc g++ c++; do # a compile is recorded (and fails); --version answers
    printf '#!/bin/sh\n[ "$1" = --version ] && { echo "stub %s"; exit 0; }\necho "%s $*" >> "%s/compiled"\nexit 1\n' "$c" "$c" "$tmp" > "$tmp/bin/$c"
done
printf '#!/bin/sh\necho "stub python: no torch" >&2; exit 1\n' > "$tmp/bin/python3"
cat > "$tmp/bin/compute-sanitizer" <<EOF
#!/usr/bin/env bash
# runs the program after the options; the suite "broken" has a memory error
while [ "\${1#--}" != "\$1" ]; do shift 2; done
case "\$*" in *hangs*) exec "\$@" ;; esac
"\$@" > /dev/null 2>&1
case "\$*" in *broken*) echo "========= Invalid __global__ read of size 4 bytes"; echo "========= ERROR SUMMARY: 1 error"; exit 99 ;; esac
echo "========= ERROR SUMMARY: 0 errors"
EOF
cat > "$tmp/obj/cuda/cuda_suites" <<'EOF'
#!/usr/bin/env bash
case "${1-}" in
--list) printf '%s\n' passes broken hangs ;;
passes) echo "ok   a check"; echo "1 passed, 0 failed" ;;
broken) echo "FAIL a check: the GPU gave 3, the CPU 2"; echo "0 passed, 1 failed"; exit 1 ;;
hangs) exec sleep 300 ;;
esac
EOF
cat > "$tmp/obj/cuda-debug/cuda_suites" <<EOF
#!/usr/bin/env bash
echo "debug \$*" >> "$tmp/debug_runs"
[ "\$1" = hangs ] && exec sleep 300
echo "FAIL \$1: op (shapes): CUDA kernel k failed"; echo "0 passed, 1 failed"; exit 1
EOF
stub_train_cuda "$tmp/obj/train-cuda"
for b in bench_model bench_attention bench_fw_sweep bench_reduce; do printf '#!/bin/sh\necho "stub: no result"; exit 1\n' > "$tmp/obj/cuda/$b"; done
cp build/train "$tmp/obj/train"
chmod +x "$tmp/bin/"* "$tmp/obj/train-cuda" "$tmp/obj/cuda/"* "$tmp/obj/cuda-debug/"*
BINS="$(make -s print-GPU_PREP_BINS)"
# the packing of make gpu-prep, its build a no-op (GPU_PREP_MAKE=true; the flags stamp kept)
pack() { # PREP [env...]
    local prep=$1
    shift
    printf '%s\n' "HOST_ARCH=-march=x86-64-v3 $(make -s print-NVFLAGS) $(make -s print-NVCC)" > "$tmp/obj/.flags"
    # shellcheck disable=SC2086
    env GPU_PREP_MAKE=true "$@" bash bench/gpu_prep.sh "$prep" "$tmp/obj" -march=x86-64-v3 $BINS
}
pack "$tmp/repo/build/gpu-prep" > "$tmp/prep.txt" 2>&1
rc=$?
M=$tmp/repo/build/gpu-prep/MANIFEST.txt
check "gpu_prep.sh packs the binaries (status $rc) with the commit and a SHA-256 each" \
    [ "$rc" -eq 0 ] && grep -q "^commit: $(git rev-parse HEAD)" "$M" && [ "$(grep -cE "^  [a-z/_-]+ [0-9]+ [0-9a-f]{64}$" "$M")" -eq 8 ]
check "gpu_prep.sh: the optional train-mpi-cuda left out with a note" grep -q "note: train-mpi-cuda was not built" "$tmp/prep.txt"
GPU_PREP_LIMIT_MB=0 pack "$tmp/small" > "$tmp/prep0.txt" 2>&1
rc=$?
check "gpu_prep.sh: a folder over its size limit fails (status $rc) and says what to do" \
    [ "$rc" -eq 1 ] && grep -q "over the 0 MiB .*CUDA_ARCH" <(tr '\n' ' ' < "$tmp/prep0.txt")

# ---- the run: short limits, the hung suite cut -----------------------------------------------------
run() { # DIR [args]
    (cd "$tmp/repo" && PATH="$tmp/bin:$PATH" NVIDIA_SMI="$tmp/bin/nvidia-smi" PYTHON="$tmp/bin/python3" NVCC="$tmp/bin/nvcc" \
        GPU_REPORT_LIMITS="env=10 test-cuda=16 sanitizer=12 train=60 attention=12 fw-sweep=12 models=70" \
        GPU_REPORT_TRAIN_ARGS="--d-model 16 --heads 2 --layers 1 --d-ff 32 --seq-len 8 --batch 2 --steps 4 --log-every 2 --eval-every 4 --eval-batches 1 --seed 1 --sample 0" \
        bash bench/gpu_first_run.sh "$@")
}
t0=$(date +%s)
run "$tmp/out" --budget 200 > "$tmp/run.txt" 2>&1
rc=$?
secs=$(($(date +%s) - t0))
S=$tmp/out/summary.md
check "the run ends with status 1 (a suite failed; got $rc) within its budget ($secs s of 200)" [ "$rc" -eq 1 ] && [ "$secs" -le 200 ]
check "nothing was compiled (no compiler called$([ -f "$tmp/compiled" ] && echo ": $(head -n 1 "$tmp/compiled")"))" [ ! -f "$tmp/compiled" ]
nfiles=$(find "$tmp/out" -type f | wc -l)
check "at most 8 plain files ($nfiles), summary.md and the seven logs" [ "$nfiles" -le 8 ] && [ -s "$S" ] &&
    [ "$(find "$tmp/out" -name '[1-7]_*.log' | wc -l)" -eq 7 ]
check "summary.md: the commit the binaries came from, the GPU, each part" \
    grep -q "^Binaries from make gpu-prep, commit $(git rev-parse HEAD)" "$S" && grep -q "NVIDIA H200" "$S" &&
    [ "$(grep -cE '^\| (env|test-cuda|sanitizer|train|attention|fw-sweep|models) \| ' "$S")" -eq 7 ]
T=$(find "$tmp/out" -name '*_test-cuda.log')
check "test-cuda: the failed suite and the hung one (cut at its limit) are failures, the other passes" \
    grep -q "^FAIL a check: the GPU gave 3" "$T" && grep -qE "^FAIL timeout .*cuda_suites hangs: exited with status 124" "$T" &&
    grep -qE "^1 passed, [2-9] failed$" "$T"
check "test-cuda: the failed suites again from the MF_CUDA_DEBUG build" \
    grep -q "^debug broken" "$tmp/debug_runs" && grep -q "^debug hangs" "$tmp/debug_runs" && not grep -q "^debug passes" "$tmp/debug_runs" &&
    grep -q "again with MF_CUDA_DEBUG" "$T"
check "the sanitizer part: the memory error found and named, the hung suite without a verdict, FAILED" \
    grep -q "^ERRORS *memcheck_broken: 1 error" "$S" && grep -q "^no verdict *memcheck_hangs" "$S" &&
    grep -q "^| sanitizer | .* | FAILED" "$S"
nmodels=$(($(build/train --list-mixers | wc -l) + 1))
nrows=$(grep -cE '^\| [a-z_]+ \| [0-9.]+ / [0-9.]+ \| .* \| fp32 = CPU; bf16 within 1% \|$' "$S")
check "the train part: a row per model from the installed binaries ($nrows of $nmodels), passed" \
    grep -q "^| train | .* | passed" "$S" && [ "$nrows" -eq "$nmodels" ]
check "the benchmark parts ran the installed stand-ins (no build) and failed for want of a result" \
    grep -q "^| attention | .* | FAILED" "$S" && not grep -q "building build/cuda" "$tmp/out/"*_attention.log

# ---- refusals --------------------------------------------------------------------------------------
mkdir -p "$tmp/full" && touch "$tmp/full/x"
run "$tmp/full" > "$tmp/full.txt" 2>&1
rc=$?
check "a folder that is not empty is refused (status $rc)" [ "$rc" -eq 2 ] && grep -q "is not empty" "$tmp/full.txt"
echo corrupt >> "$tmp/repo/build/gpu-prep/train-cuda"
GPU_REPORT_LIMITS="env=5" run "$tmp/out2" --budget 1 > "$tmp/corrupt.txt" 2>&1
check "a binary that differs from the manifest is named and not installed" \
    grep -q "not installed: train-cuda (its SHA-256 differs" "$tmp/corrupt.txt"
rm -rf "$tmp/repo/build/gpu-prep"
run "$tmp/out3" > "$tmp/noprep.txt" 2>&1
rc=$?
check "no prepared folder: refused at once (status $rc), naming make gpu-prep" [ "$rc" -eq 2 ] && grep -q "make gpu-prep" "$tmp/noprep.txt"
run > "$tmp/nodir.txt" 2>&1
rc=$?
check "no folder given: the usage (status $rc)" [ "$rc" -eq 2 ] && grep -q "usage: bash bench/gpu_first_run.sh DIR" "$tmp/nodir.txt"
finish
