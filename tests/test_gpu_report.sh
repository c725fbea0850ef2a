#!/usr/bin/env bash
# `make gpu-report` (bench/gpu_report.sh) without a GPU: it must stop at once with a clear message
# and write nothing; --dry-run must list every command of every part (the builds for the GPU, the
# parity suites, a GPU run of every model at fp32 and bf16 beside the CPU, the three benchmark
# parts at their precisions) within time limits that add up to the budget, and write nothing.
# Uses build/train (its --list-mixers). Prints ok/FAIL lines and the runner's summary.
set -u
cd "$(dirname "$0")/.." || exit 1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
check() { # NAME CONDITION...
    local name=$1
    shift
    if "$@"; then echo "ok   $name"; pass=$((pass+1)); else echo "FAIL $name"; fail=$((fail+1)); fi
}
has() { grep -qF -- "$1" "$tmp/dry.txt"; }

# no GPU: NVIDIA_SMI names a program that lists none
t0=$(date +%s)
NVIDIA_SMI=false bash bench/gpu_report.sh --out "$tmp/report" > "$tmp/nogpu.txt" 2>&1
rc=$?
check "no GPU: gpu_report.sh fails (exit status $rc)" [ "$rc" -ne 0 ]
check "no GPU: it says so and points to --dry-run" grep -q "no NVIDIA GPU here.*--dry-run" <(tr '\n' ' ' < "$tmp/nogpu.txt")
check "no GPU: within seconds, writing nothing" [ $(($(date +%s) - t0)) -le 5 ] && [ ! -e "$tmp/report" ]

# --dry-run: every command, nothing written
NVIDIA_SMI=false bash bench/gpu_report.sh --dry-run --out "$tmp/report" > "$tmp/dry.txt" 2>&1
rc=$?
check "--dry-run exits 0 (status $rc) and writes nothing" [ "$rc" -eq 0 ] && [ ! -e "$tmp/report" ]
check "--dry-run: the GPU, nvcc and torch versions" has "--query-gpu=compute_cap" && has "nvcc --version" && has "torch.__version__"
check "--dry-run: the build for the GPU found (sm_90 without one), then make test-cuda" \
    has "CUDA_ARCH=-gencode arch=compute_90,code=sm_90" && has "cuda-all" && has " test-cuda"
missing=""
for m in $(build/train --list-mixers) compressive; do
    opt="--mixer $m"; [ "$m" = compressive ] && opt="--compressive"
    for run in "build/train .* $opt .*--device cpu" "build/train-cuda .* $opt .*--device cuda >" \
               "build/train-cuda .* $opt .*--device cuda --precision bf16"; do
        grep -qE -- "$run" "$tmp/dry.txt" || missing="$missing [$run]"
    done
done
check "--dry-run: every model on the CPU, the GPU at fp32 and at bf16${missing:+ (missing:$missing)}" [ -z "$missing" ]
check "--dry-run: the model benchmark at fp32, bf16 and TF32 with a deadline" \
    grep -qE -- "run_cuda.sh --parts models --precision fp32,bf16,tf32 .*--deadline [0-9]+" "$tmp/dry.txt"
check "--dry-run: the attention and fast-weights benchmarks at fp32 and bf16" \
    grep -qE -- "run_cuda.sh --parts attention --precision fp32,bf16" "$tmp/dry.txt" &&
    grep -qE -- "run_cuda.sh --parts fw-sweep --precision fp32,bf16" "$tmp/dry.txt"
nparts=$(grep -c '^== part .*(time limit [0-9]* s)$' "$tmp/dry.txt")
check "--dry-run: seven parts, each with a time limit (found $nparts)" [ "$nparts" -eq 7 ]
budget=$(sed -n 's/.*cut to the budget of \([0-9]*\) s.*/\1/p' "$tmp/dry.txt")
check "--dry-run: the budget fits in 10 minutes (${budget:-none} s)" [ -n "$budget" ] && [ "$budget" -lt 600 ]

# bad options
bash bench/gpu_report.sh --bogus > "$tmp/bad.txt" 2>&1
rc=$?
check "an unknown option is refused (status $rc) with its name" [ "$rc" -eq 2 ] && grep -q -- "--bogus" "$tmp/bad.txt"
bash bench/gpu_report.sh --dry-run --budget soon > "$tmp/bad.txt" 2>&1
rc=$?
check "a budget that is not a number is refused (status $rc)" [ "$rc" -eq 2 ] && grep -q "budget soon" "$tmp/bad.txt"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
