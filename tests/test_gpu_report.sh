#!/usr/bin/env bash
# `make gpu-report` (bench/gpu_report.sh) without a GPU: it must stop at once with a clear message
# and write nothing; --dry-run must list every command of every part (the builds for the GPU, the
# parity suites, a GPU run of every model at fp32 and bf16 beside the CPU, the three benchmark
# parts at their precisions) within time limits that add up to the budget, and write nothing.
# On a stub GPU machine whose builds fail it must run every part, write the report, name each
# failed part and exit 1 (below). Uses build/train and build/obj/impl.o. Prints ok/FAIL lines and
# the runner's summary; KEEP_TMP=1 keeps its folder (the stub machine's report) for a look.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tests/lib.sh
. tests/lib.sh
scratch_tmp
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
check "--dry-run: the build for the GPU found (sm_90 without one), then every parity suite side by side" \
    has "CUDA_ARCH=-gencode arch=compute_90,code=sm_90" && has "cuda-all" && has "$ build/cuda/cuda_suites SUITE"
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

NVIDIA_SMI=false bash bench/gpu_report.sh --dry-run > "$tmp/dry_default.txt" 2>&1
check "--dry-run without --out: the report would go to bench/results/gpu_<date>/" \
    grep -q "report would go to bench/results/gpu_$(date +%Y-%m-%d)/" "$tmp/dry_default.txt"

# A GPU machine where the builds fail: a stub nvidia-smi that names a GPU, an nvcc and a python that
# fail, and for build/train-cuda the CPU trainer with the device options dropped (so the train part
# runs its whole table: the "GPU" losses equal the CPU's). Run in a copy of the repository (the
# report's build part may clear build/cuda) with build/train and tiny models. Every part must run,
# the report and seven logs be written, each failed part be named, the exit status be 1.
mkdir -p "$tmp/repo/build/obj" "$tmp/repo/build/cuda" "$tmp/bin"
git ls-files -z | xargs -0 cp --parents -t "$tmp/repo"
cp build/obj/impl.o build/train "$tmp/repo/build/" && mv "$tmp/repo/build/impl.o" "$tmp/repo/build/obj/" &&
    touch "$tmp/repo/build/obj/impl.o" "$tmp/repo/build/train"
echo "-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90" > "$tmp/repo/build/cuda/.arch"
printf '#!/bin/sh\ncase "$*" in *compute_cap*) echo 9.0 ;; *name,*) echo "Stub GPU, 0.0, 1 MiB" ;; *name*) echo "Stub GPU" ;; *) echo stub ;; esac\n' > "$tmp/bin/nvidia-smi"
printf '#!/bin/sh\necho "stub compiler: fails" >&2; exit 1\n' > "$tmp/bin/nvcc"
cp "$tmp/bin/nvcc" "$tmp/bin/python3"
stub_train_cuda "$tmp/repo/build/train-cuda"
chmod +x "$tmp/bin/"* "$tmp/repo/build/train-cuda"
t0=$(date +%s)
(cd "$tmp/repo" && NVIDIA_SMI="$tmp/bin/nvidia-smi" NVCC="$tmp/bin/nvcc" PYTHON="$tmp/bin/python3" GPU_REPORT_BUDGET=200 \
    GPU_REPORT_TRAIN_ARGS="--d-model 16 --heads 2 --layers 1 --d-ff 32 --seq-len 8 --batch 2 --steps 4 --log-every 2 --eval-every 4 --eval-batches 1 --seed 1 --sample 0" \
    bash bench/gpu_report.sh --out "$tmp/gr" > "$tmp/gr.txt" 2>&1)
rc=$?
secs=$(($(date +%s) - t0))
R=$tmp/gr/report.md
check "builds failing: exit status 1 (got $rc), within the budget ($secs s)" [ "$rc" -eq 1 ] && [ "$secs" -le 200 ]
nlogs=$(find "$tmp/gr" -name '[1-7]_*.log' 2>/dev/null | wc -l)
check "builds failing: report.md and one log per part ($nlogs of 7)" [ -s "$R" ] && [ "$nlogs" -eq 7 ]
closing=$(tail -n 1 "$tmp/gr.txt")
bad=""
for p in build test-cuda attention fw-sweep models; do
    grep -q "^| $p | .* | FAILED" "$R" || bad="$bad $p(table)"
    case " $closing " in *" $p=FAILED "*) ;; *) bad="$bad $p(closing line)" ;; esac
done
check "builds failing: every failed part marked FAILED in the table and the closing line${bad:+ (not:$bad)}" [ -z "$bad" ]
check "builds failing: the parts that could run passed (env, train)" \
    grep -q ' env=passed ' <<< " $closing " && grep -q ' train=passed ' <<< " $closing "
check "builds failing: the goals it could not measure counted as such" grep -qE "not measured: [1-9]" <<< "$closing"
nmodels=$(($(build/train --list-mixers | wc -l) + 1))
nrows=$(grep -cE '^\| [a-z_]+ \| [0-9.]+ / [0-9.]+ \| [0-9.]+ / [0-9.]+ \| 0\.0e\+00 \| .* \| fp32 = CPU; bf16 within 1% \|$' "$R")
check "the train table: a row per model with its losses and both checks ($nrows of $nmodels)" [ "$nrows" -eq "$nmodels" ]
check "the train goals: met by every model" grep -q "^| every model trains on the GPU with the CPU's losses .* | met | $nmodels of $nmodels models |" "$R"

# bad options
bash bench/gpu_report.sh --bogus > "$tmp/bad.txt" 2>&1
rc=$?
check "an unknown option is refused (status $rc) with its name" [ "$rc" -eq 2 ] && grep -q -- "--bogus" "$tmp/bad.txt"
bash bench/gpu_report.sh --dry-run --budget soon > "$tmp/bad.txt" 2>&1
rc=$?
check "a budget that is not a number is refused (status $rc)" [ "$rc" -eq 2 ] && grep -q "budget soon" "$tmp/bad.txt"
finish
