#!/usr/bin/env bash
# bench/gpu_report.sh - `make gpu-report [GPU_REPORT_DIR=DIR]`: the CUDA backend on a real
# NVIDIA GPU, in one command and under 10 minutes. Its parts, one after another, each under its own
# time limit (a hang ends its part, not the report; a failing part does not stop the next):
#   env        the GPU (nvidia-smi), nvcc, torch, the CPU
#   build      every nvcc build for the GPU found (its compute capability from nvidia-smi
#              --query-gpu=compute_cap, else sm_90): `make cuda-all` (the parity suites, train-cuda,
#              the GPU benchmarks) and build/train for the CPU
#   test-cuda  the CPU-vs-GPU parity suites on the GPU (make test-cuda's program): each suite in a
#              process of its own, side by side, each under a time limit; a suite that fails is run
#              again from the MF_CUDA_DEBUG build (build/cuda-debug/cuda_suites) where there is one,
#              which names the op, its shapes and the kernel of a fault
#   train      a short build/train-cuda run of every model (build/train --list-mixers, and
#              compressive) at fp32 and at bf16, beside build/train on the CPU (same options, seed,
#              data: a generated text); the losses side by side
#   attention  bench/run_cuda.sh --parts attention: the fused attention kernel vs PyTorch's
#              scaled_dot_product_attention kernels, T 1024-8192, dk 64, fp32 and bf16
#   fw-sweep   bench/run_cuda.sh --parts fw-sweep: fast weights, chunkwise vs recurrent, fp32 and bf16;
#              the column reductions of the backward (bench_reduce)
#   models     bench/run_cuda.sh --parts models: every model vs PyTorch eager on the same GPU at
#              fp32 and bf16 (torch.autocast) row by row, then TF32: tokens/s, peak GPU memory and where the
#              C step's time goes (the op profiler, by kind of op); last, as it takes the time that
#              is left (the runs the budget leaves out are listed)
# and writes DIR/report.md (a summary table of the parts, the goals checked against the
# numbers, then each part's results) and one log per part, DIR/<n>_<part>.log: eight plain files.
# With --prebuilt (bench/gpu_first_run.sh) nothing is compiled: the binaries under build/ are the
# ones make gpu-prep built elsewhere, and the build part gives its place to
#   sanitizer  compute-sanitizer --tool memcheck on every suite of the MF_CUDA_DEBUG build, side by
#              side, and --tool racecheck on the attention suite (a suite still running at the
#              limit gives no verdict; an error found fails the part)
# while env also shows the prepared folder's manifest and each binary's shared libraries (ldd).
#
#   bash bench/gpu_report.sh [--out DIR] [--dry-run] [--budget S] [--prebuilt]
#     --out DIR     the folder (default bench/results/gpu_<date>/; make: GPU_REPORT_DIR=DIR)
#     --dry-run     print every command it would run, with each part's time limit; runs, builds and
#                   writes nothing (works without a GPU)
#     --budget S    seconds for the whole report (default 570, GPU_REPORT_BUDGET): a part's limit
#                   is cut to what is left, and a part with under 10 s left is skipped
#   [NVCC=nvcc] [PYTHON=the first of python3, /opt/torch/.venv/bin/python3, /usr/bin/python3 that
#   imports torch] [NVIDIA_SMI=nvidia-smi] [COMPUTE_SANITIZER=compute-sanitizer] [GPU_REPORT_JOBS=nproc]
#   [GPU_PREP=build/gpu-prep] [GPU_REPORT_LIMITS="part=seconds ..."]
# Without a GPU it stops at once (exit 1) and says so.
set -u
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.." || exit 1
# under `make gpu-report`: the make runs below are make runs of their own (no jobserver of the outer one)
unset MAKEFLAGS MFLAGS MAKELEVEL

DRY=0
PREBUILT=${GR_PREBUILT:-0}
DIR=""
BUDGET=${GPU_REPORT_BUDGET:-570}
PART=""   # internal: --part ID runs one part (the script calls itself under timeout)
while [ $# -gt 0 ]; do
    case "$1" in
    --dry-run) DRY=1; shift ;;
    --prebuilt) PREBUILT=1; shift ;;
    --out|--budget|--part)
        [ $# -ge 2 ] || { echo "bench/gpu_report.sh: $1 needs a value" >&2; exit 2; }
        case "$1" in --out) DIR=$2 ;; --budget) BUDGET=$2 ;; --part) PART=$2 ;; esac
        shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "bench/gpu_report.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$BUDGET" in ''|*[!0-9]*) echo "bench/gpu_report.sh: --budget $BUDGET: a number of seconds" >&2; exit 2 ;; esac

NVSMI=${NVIDIA_SMI:-nvidia-smi}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
JOBS=${GPU_REPORT_JOBS:-$(nproc 2>/dev/null || echo 4)}
WORK=build/gpu_report   # inputs and the benchmark reports before they go into report.md
# the parts: id, time limit (s), title
# (the model benchmark last: it stops starting runs 60 s before its limit, so it takes what is left)
PARTS=(env build test-cuda train attention fw-sweep models)
declare -A LIMIT=([env]=30 [build]=200 [test-cuda]=120 [train]=90 [attention]=80 [fw-sweep]=50 [models]=300)
declare -A TITLE=([env]="GPU, driver, nvcc, torch" [build]="nvcc builds for this GPU (make cuda-all)"
                  [test-cuda]="make test-cuda: CPU-vs-GPU parity suites" [train]="every model trained on the GPU (fp32, bf16) beside the CPU"
                  [models]="every model vs PyTorch eager: fp32, bf16, TF32" [attention]="fused attention vs scaled_dot_product_attention"
                  [fw-sweep]="fast weights: chunkwise vs recurrent"
                  [sanitizer]="compute-sanitizer: memcheck on every suite, racecheck on attention")
# prebuilt: the smoke parts (env to train) fit in 3 minutes, the benchmarks take the rest
if [ "$PREBUILT" = 1 ]; then
    PARTS=(env test-cuda sanitizer train attention fw-sweep models)
    LIMIT[env]=10; LIMIT[test-cuda]=70; LIMIT[sanitizer]=40; LIMIT[train]=60
fi
# GPU_REPORT_LIMITS="part=S ...": other time limits (tests/test_gpu_first_run.sh makes them short)
for kv in ${GPU_REPORT_LIMITS:-}; do
    [[ $kv =~ ^[a-z-]+=[0-9]+$ ]] || { echo "bench/gpu_report.sh: GPU_REPORT_LIMITS: $kv is not PART=SECONDS" >&2; exit 2; }
    [ -n "${TITLE[${kv%%=*}]:-}" ] || { echo "bench/gpu_report.sh: GPU_REPORT_LIMITS: no part ${kv%%=*}" >&2; exit 2; }
    LIMIT[${kv%%=*}]=${kv#*=}
done
SUITES=build/cuda/cuda_suites DEBUG_SUITES=build/cuda-debug/cuda_suites
PREP=${GPU_PREP:-build/gpu-prep}
SANITIZER=${COMPUTE_SANITIZER:-compute-sanitizer}
say() { printf '%s\n' "$*"; }

# the words of a command as a shell reads them back (quotes only where needed)
quoted() {
    local a out=""
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./=:,@%+-]+$ ]]; then out+="$a "; else out+="'${a//\'/\'\\\'\'}' "; fi
    done
    printf '%s' "${out% }"
}
# x [-o FILE] CMD...: run a command (its output to FILE, else to the part's log), or in a dry run
# print it. Every command of the report goes through x, so --dry-run lists them all.
x() {
    local out=""
    [ "$1" = -o ] && { out=$2; shift 2; }
    if [ "$DRY" = 1 ]; then say "  \$ $(quoted "$@")${out:+ > $out}"; return 0; fi
    say "\$ $(quoted "$@")"
    if [ -n "$out" ]; then "$@" > "$out" 2>&1; else "$@" 2>&1; fi
}

# ---- the parts (each runs as `gpu_report.sh --part ID` under timeout; its output is its log) ----
part_env() {
    x "$NVSMI"
    x "$NVSMI" --query-gpu=name,compute_cap,driver_version,memory.total,clocks.max.sm --format=csv
    x "$NVCC" --version
    x "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU:", torch.cuda.is_available() and torch.cuda.get_device_name(0))'
    x nproc
    x uname -srm
    x cc --version
    [ "$PREBUILT" = 1 ] || return 0
    # the prepared binaries: what they were built from, and whether their libraries load here
    x cat "$PREP/MANIFEST.txt"
    local f bad=0
    for f in $(prebuilt_files); do
        x ldd "build/$f"
        [ "$DRY" = 1 ] || ! ldd "build/$f" 2>&1 | grep -q 'not found' || { say "build/$f: a shared library is missing (above)"; bad=1; }
    done
    return "$bad"
}
# the files of the prepared folder, from its manifest
prebuilt_files() {
    if [ "$DRY" = 1 ] && [ ! -f "$PREP/MANIFEST.txt" ]; then say train-cuda; return; fi
    awk '/^files:/ { f = 1; next } f && NF == 3 { print $1 }' "$PREP/MANIFEST.txt"
}
# run_side_by_side DIR LIMIT PREFIX SUITE...: each "PREFIX SUITE" in a process of its own, all at
# once, each under the limit (tests/run.sh --one keeps its output and status), then the runner's
# report of them in the order given; its exit status
run_side_by_side() {
    local dir=$1 lim=$2 prefix=$3 s logs=()
    shift 3
    if [ "$DRY" = 1 ]; then
        say "  (side by side, each under timeout $lim s:)"
        for s in "$@"; do say "  \$ $prefix $s"; done
        return 0
    fi
    mkdir -p "$dir"
    for s in "$@"; do
        logs+=("$dir/$s.log")
        OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} bash tests/run.sh --one "$dir/$s.log" "timeout -k 2 $lim $prefix $s" &
    done
    wait
    bash tests/run.sh --report "${logs[@]}"
}
# the suites of the program, or "SUITE" in a dry run without it
suite_names() {
    if [ "$DRY" = 1 ] && [ ! -x "$SUITES" ]; then say SUITE; return; fi
    "$SUITES" --list
}

part_build() {
    # objects built for another GPU are rebuilt (make does not know the flags); -k: a target that
    # fails to build leaves the others to the parts that use them
    if [ "$DRY" = 0 ] && [ "$(cat build/cuda/.arch 2>/dev/null)" != "$ARCH" ]; then
        x rm -rf build/cuda build/train-cuda
        mkdir -p build/cuda && printf '%s\n' "$ARCH" > build/cuda/.arch
    fi
    x make -k -j"$JOBS" NVCC="$NVCC" CUDA_ARCH="$ARCH" cuda-all
}

part_test-cuda() {
    local lim=$(($1 - 10)) s rc failed=()
    [ "$PREBUILT" = 1 ] || x make NVCC="$NVCC" CUDA_ARCH="$ARCH" "$SUITES" || return 1
    [ -x "$SUITES" ] || [ "$DRY" = 1 ] || { say "$SUITES is missing (make gpu-prep, or make $SUITES)"; return 1; }
    # the suites share the GPU; a failed one is run again from the debug build in the time left
    [ ! -x "$DEBUG_SUITES" ] || lim=$(( lim * 2 / 3 ))
    run_side_by_side "$WORK/suites" "$lim" "$SUITES" $(suite_names)
    rc=$?
    [ "$DRY" = 1 ] && { say "  (a failed suite again: $DEBUG_SUITES SUITE, in the time left)"; return 0; }
    for s in $(suite_names); do
        [ "$(sed -n 2p "$WORK/suites/$s.log" 2> /dev/null)" = 0 ] || failed+=("$s")
    done
    if [ ${#failed[@]} -gt 0 ] && [ -x "$DEBUG_SUITES" ]; then
        say ""
        say "== again with MF_CUDA_DEBUG (every launch checked; a fault names its op, shapes and kernel): ${failed[*]}"
        run_side_by_side "$WORK/suites_debug" "$(( $1 - 10 - lim ))" "$DEBUG_SUITES" "${failed[@]}" | sed 's/^\([0-9]* passed, [0-9]* failed\)$/debug build: \1/'
    fi
    return "$rc"
}

part_sanitizer() {
    local lim=$(($1 - 5)) s n=0 errs=0 nov=0 f
    command -v "$SANITIZER" > /dev/null || [ "$DRY" = 1 ] || { say "$SANITIZER not found: no sanitizer runs"; return 1; }
    [ -x "$DEBUG_SUITES" ] || [ "$DRY" = 1 ] || { say "$DEBUG_SUITES is missing (make gpu-prep)"; return 1; }
    if [ "$DRY" = 1 ]; then
        for s in $(suite_names); do say "  \$ timeout $lim $SANITIZER --tool memcheck --error-exitcode 99 $DEBUG_SUITES $s"; done
        say "  \$ timeout $lim $SANITIZER --tool racecheck --error-exitcode 99 $DEBUG_SUITES test_cuda_attention"
        say "  (all side by side)"
        return 0
    fi
    mkdir -p "$WORK/sanitizer"
    for s in $(suite_names); do
        timeout -k 2 "$lim" "$SANITIZER" --tool memcheck --error-exitcode 99 "$DEBUG_SUITES" "$s" > "$WORK/sanitizer/memcheck_$s.txt" 2>&1 &
    done
    timeout -k 2 "$lim" "$SANITIZER" --tool racecheck --error-exitcode 99 "$DEBUG_SUITES" test_cuda_attention > "$WORK/sanitizer/racecheck_test_cuda_attention.txt" 2>&1 &
    wait
    # the verdict of each run: the sanitizer's error summary, or none when the limit stopped it
    for f in "$WORK"/sanitizer/*.txt; do
        n=$((n + 1))
        s=$(grep -E 'ERROR SUMMARY: [0-9]+ error' "$f" | tail -n 1 | sed 's/.*ERROR SUMMARY: //')
        if grep -q 'Device not supported' "$f"; then # (seen under gVisor)
            say "no verdict  $(basename "$f" .txt): compute-sanitizer does not support the device on this machine"; nov=$((nov + 1))
        elif [ -z "$s" ]; then say "no verdict  $(basename "$f" .txt) (stopped at the $lim s limit or died: $(tail -n 1 "$f"))"; nov=$((nov + 1))
        elif [ "${s%% *}" = 0 ]; then say "clean       $(basename "$f" .txt): $s"
        else say "ERRORS      $(basename "$f" .txt): $s"; errs=$((errs + 1)); grep -m 20 -E '^=+ (Invalid|Race|Error|Uninit|    at|Saved host)' "$f"; fi
    done
    say "sanitizer: $n runs, $errs with errors, $nov without a verdict"
    [ "$errs" = 0 ]
}

# the options of each model in the train part: "name|options" (as tests/train_emu.sh)
model_options() {
    case "$1" in
    relative) echo "--mixer relative --mem-len 32" ;;
    compressive) echo "--compressive --mem-len 32 --c-mem-len 16 --compression-rate 2" ;;
    *) echo "--mixer $1" ;;
    esac
}
# the models: every mixer of the library, compressive after relative
train_models() {
    local m
    if [ "$DRY" = 1 ] && [ ! -x build/train ]; then say MIXER; return; fi # (a word: the callers split the list)
    for m in $(build/train --list-mixers); do
        say "$m"
        [ "$m" = relative ] && say compressive
    done
}
TRAIN_ARGS=${GPU_REPORT_TRAIN_ARGS:-"--d-model 128 --heads 4 --layers 2 --d-ff 256 --seq-len 64 --batch 8 --steps 40 --log-every 10 --eval-every 40 --eval-batches 4 --seed 1 --sample 0"}
part_train() {
    local m o
    [ "$DRY" = 1 ] || mkdir -p "$WORK/train"
    [ "$DRY" = 1 ] || awk 'BEGIN { srand(3); split("the king and queen of a land far away spoke to the people who listened", w, " ");
        for (i = 0; i < 6000; i++) printf "%s%s", w[int(rand() * 15) + 1], (i % 12 == 11 ? ".\n" : " ") }' > "$WORK/text.txt"
    say "(the CPU runs go side by side with the GPU runs, build/train --threads 4)"
    [ "$DRY" = 1 ] && [ ! -x build/train ] && say "(MIXER: each of build/train --list-mixers, built by the build part)"
    cpu_runs() {
        for m in $(train_models); do
            # shellcheck disable=SC2046,SC2086
            x -o "$WORK/train/${m}_cpu.txt" build/train "$WORK/text.txt" $(model_options "$m") $TRAIN_ARGS --device cpu --threads 4
        done
    }
    if [ "$DRY" = 1 ]; then cpu_runs; else cpu_runs & fi
    for m in $(train_models); do
        o=$(model_options "$m")
        # shellcheck disable=SC2086
        x -o "$WORK/train/${m}_fp32.txt" build/train-cuda "$WORK/text.txt" $o $TRAIN_ARGS --device cuda
        # shellcheck disable=SC2086
        x -o "$WORK/train/${m}_bf16.txt" build/train-cuda "$WORK/text.txt" $o $TRAIN_ARGS --device cuda --precision bf16
    done
    wait
    [ "$DRY" = 1 ] && return 0
    for m in $(train_models); do
        for o in cpu fp32 bf16; do say "==== $m $o"; cat "$WORK/train/${m}_$o.txt"; done
    done
    train_table > "$WORK/train.md"
    cat "$WORK/train.md"
    grep -q 'FAIL' "$WORK/train.md" && return 1
    return 0
}
# the losses of a train.c log: "step loss" per progress line, "valid loss" last
losses() {
    awk '/^step [0-9]+\/[0-9]+ +loss / { split($2, s, "/"); print s[1], $4 }
         /^step [0-9]+: valid loss / { v = $5 } END { if (v != "") print "valid", v }' "$1" 2> /dev/null
}
# the train part's table: per model the last training loss and the validation loss on the CPU, the
# GPU at fp32 and at bf16, the largest relative differences over every logged step
train_table() {
    local m
    say "| model | CPU loss / valid | GPU fp32 loss / valid | fp32 vs CPU, max rel. diff | GPU bf16 loss / valid | bf16 vs GPU fp32, max rel. diff | result |"
    say "|---|---:|---:|---:|---:|---:|---|"
    for m in $(train_models); do
        paste -d' ' <(losses "$WORK/train/${m}_cpu.txt") <(losses "$WORK/train/${m}_fp32.txt") <(losses "$WORK/train/${m}_bf16.txt") |
        awk -v m="$m" 'function rel(a, b) { d = a - b; d = d < 0 ? -d : d; return b == 0 ? (d > 0) : d / (b < 0 ? -b : b) }
            function pair(a, b) { return (a == "" ? "-" : a) " / " (b == "" ? "-" : b) }
            NF >= 2 { if ($1 == "valid") cv = $2; else cl = $2 }
            NF >= 4 && $1 == $3 { n++; if (rel($4, $2) > f) f = rel($4, $2)
                                  if ($1 == "valid") fv = $4; else fl = $4 }
            NF == 6 && $1 == $5 { if (rel($6, $4) > h) h = rel($6, $4)
                                  if ($1 == "valid") bv = $6; else bl = $6 }
            END {
                if (n == 0 || cv == "" || fv == "") { printf "| %s | %s | %s | - | %s | - | FAIL (a run did not finish: see the log) |\n", m, pair(cl, cv), pair(fl, fv), pair(bl, bv); exit }
                r = f <= 1e-3 ? "fp32 = CPU" : "FAIL (fp32 GPU differs from the CPU)"
                if (bv == "") r = r "; FAIL (the bf16 run did not finish: see the log)"
                else r = r (h <= 0.01 ? "; bf16 within 1%" : "; bf16 NOT within 1%")
                printf "| %s | %s | %s | %.1e | %s | %s | %s |\n", m, pair(cl, cv), pair(fl, fv), f,
                       pair(bv == "" ? "" : bl, bv), bv == "" ? "-" : sprintf("%.1e", h), r }'
    done
}

# a benchmark part: bench/run_cuda.sh, its report into the part's log and its goals into goals.md;
# the model runs stop starting 60 s before the part's limit
run_cuda_part() { # PARTS PRECISIONS LIMIT [options...]
    local parts=$1 precs=$2 limit=$3
    shift 3
    [ "$PREBUILT" = 1 ] && set -- --no-build "$@"
    x env PYTHON="$PY" NVCC="$NVCC" CUDA_ARCH="$ARCH" BENCH_KERNEL_LIMIT=$(((limit - 10) / 2)) bash bench/run_cuda.sh \
        --parts "$parts" --precision "$precs" --goals "$WORK/goals_$parts.md" --out "$WORK/$parts.md" "$@"
}
part_models() {
    local deadline=$(($1 - 60))
    [ "$deadline" -ge 1 ] || deadline=1
    run_cuda_part models fp32,bf16,tf32 "$1" --steps 6 --warmup 2 --max-time 6 --deadline "$deadline"
}
part_attention() { run_cuda_part attention fp32,bf16 "$1"; }
part_fw-sweep() { run_cuda_part fw-sweep fp32,bf16 "$1"; }

# ---- one part, run by the script itself under timeout ------------------------------------------
if [ -n "$PART" ]; then
    PY=$GR_PY; ARCH=$GR_ARCH
    "part_$PART" "$GR_LIMIT"
    exit $?
fi

# ---- is there a GPU? ---------------------------------------------------------------------------
GPU=$("$NVSMI" --query-gpu=name --format=csv,noheader 2> /dev/null | head -n 1)
if [ -z "$GPU" ]; then
    if [ "$DRY" = 0 ]; then
        say "make gpu-report: no NVIDIA GPU here (\`$NVSMI --query-gpu=name\` lists none): it needs a machine with an"
        say "NVIDIA GPU, its driver, nvcc and PyTorch 2.x with CUDA. \`bash bench/gpu_report.sh --dry-run\` prints what it would run."
        exit 1
    fi
    say "(dry run: no NVIDIA GPU here; the commands below are what a GPU machine would run, built for sm_90)"
fi
# the GPU's compute capability: "9.0" -> 90 (sm_90); anything else -> sm_90
CAP_DOT=$("$NVSMI" --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -n 1 | tr -d ' ')
CAP=${CAP_DOT//./}
case "$CAP" in [1-9][0-9]|[1-9][0-9][0-9]) ;; *) CAP=90 ;; esac
ARCH="-gencode arch=compute_$CAP,code=sm_$CAP -gencode arch=compute_$CAP,code=compute_$CAP"
# the Python with torch (on the GPU machines a plain python3 is the one that holds PyTorch)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    PY=python3
    if [ "$DRY" = 0 ]; then
        for p in python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
            if "$p" -c 'import torch' > /dev/null 2>&1; then PY=$p; break; fi
        done
    fi
fi
[ -n "$DIR" ] || DIR="bench/results/gpu_$(date +%Y-%m-%d)"
T_START=$(date +%s)

if [ "$DRY" = 1 ]; then
    say "make gpu-report --dry-run: the report would go to $DIR/ (report.md and one log per part); budget $BUDGET s$([ "$PREBUILT" = 1 ] && echo "; prebuilt binaries, nothing compiled")"
    say "  \$ $NVSMI --query-gpu=name --format=csv,noheader"
    say "  \$ $NVSMI --query-gpu=compute_cap --format=csv,noheader    -> CUDA_ARCH=\"$ARCH\""
    total=0
    for id in "${PARTS[@]}"; do
        say ""
        say "== part $id: ${TITLE[$id]} (time limit ${LIMIT[$id]} s)"
        "part_$id" "${LIMIT[$id]}"
        total=$((total + ${LIMIT[$id]}))
    done
    say ""
    say "time limits: $total s in all, cut to the budget of $BUDGET s as the parts go"
    exit 0
fi

mkdir -p "$DIR" "$WORK" || exit 1
rm -f "$WORK"/goals_*.md "$WORK"/*.md
declare -A STATUS SECS
n=0
for id in "${PARTS[@]}"; do
    n=$((n + 1))
    log="$DIR/${n}_$id.log"
    left=$((BUDGET - 10 - ($(date +%s) - T_START)))
    limit=${LIMIT[$id]}
    [ "$limit" -le "$left" ] || limit=$left
    if [ "$limit" -lt 10 ]; then
        STATUS[$id]="skipped (the budget of $BUDGET s was spent)"; SECS[$id]=0
        say "== part $id: skipped, out of time"
        continue
    fi
    say "== part $id: ${TITLE[$id]} (limit $limit s, log $log)"
    t0=$(date +%s)
    GR_PREBUILT=$PREBUILT GR_PY=$PY GR_ARCH=$ARCH GR_LIMIT=$limit timeout -k 5 "$limit" bash "$SELF" --part "$id" > "$log" 2>&1 < /dev/null
    rc=$?
    SECS[$id]=$(($(date +%s) - t0))
    case "$rc" in
    0) STATUS[$id]="passed" ;;
    124|137) STATUS[$id]="FAILED: stopped at its time limit ($limit s)" ;;
    *) STATUS[$id]="FAILED (exit status $rc)" ;;
    esac
    say "   ${STATUS[$id]} in ${SECS[$id]} s"
    tail -n 3 "$log" | sed 's/^/   | /'
done

# ---- the report --------------------------------------------------------------------------------
R="$DIR/report.md"
{
    say "# metaformer.h on a real GPU: \`$([ "$PREBUILT" = 1 ] && echo "bench/gpu_first_run.sh" || echo "make gpu-report")\`, $(date '+%Y-%m-%d %H:%M')"
    say ""
    say "GPU: $("$NVSMI" --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1), compute capability ${CAP_DOT:-unknown} (CUDA_ARCH \`$ARCH\`)."
    say "nvcc: $("$NVCC" --version 2>/dev/null | tail -n 1). PyTorch: $("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -n 1) ($PY)."
    say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs. Commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')."
    say "Total time: $(($(date +%s) - T_START)) s (budget $BUDGET s)."
    say ""
    say "## Parts"
    say ""
    say "| part | what | result | time | log |"
    say "|---|---|---|---:|---|"
    n=0
    for id in "${PARTS[@]}"; do
        n=$((n + 1))
        say "| $id | ${TITLE[$id]} | ${STATUS[$id]} | ${SECS[$id]} s | ${n}_$id.log |"
    done
    say ""
    say "## Goals, checked against the numbers below"
    say ""
    say "| goal | result | numbers |"
    say "|---|---|---|"
    tc=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$DIR"/*_test-cuda.log 2>/dev/null | tail -n 1)
    say "| make test-cuda passes on the GPU | $([ "${STATUS[test-cuda]}" = passed ] && echo met || echo "NOT met") | ${tc:-no summary line} |"
    if [ -f "$WORK/train.md" ]; then
        nm=$(($(grep -c '^| ' "$WORK/train.md") - 1)); nf=$(grep -c 'fp32 = CPU' "$WORK/train.md"); nb=$(grep -c 'bf16 within 1%' "$WORK/train.md")
        say "| every model trains on the GPU with the CPU's losses (fp32, 1e-3) | $([ "$nf" = "$nm" ] && echo met || echo "NOT met") | $nf of $nm models |"
        say "| bf16 training loss within 1% of fp32 ($(echo "$TRAIN_ARGS" | sed -n 's/.*--steps \([0-9]*\).*/\1/p') steps) | $([ "$nb" = "$nm" ] && echo met || echo "NOT met") | $nb of $nm models |"
    else
        say "| every model trains on the GPU with the CPU's losses | not measured | the train part did not finish |"
    fi
    for part in attention fw-sweep models; do
        if [ -s "$WORK/goals_$part.md" ]; then cat "$WORK/goals_$part.md"
        else say "| the $part goals | not measured | the $part part wrote none: see its log |"; fi
    done
    say ""
    say "## test-cuda"
    say ""
    say '```'
    grep -E '^(FAIL|==|[0-9]+ passed|debug build)' "$DIR"/*_test-cuda.log 2>/dev/null | head -n 60
    say '```'
    if [ "$PREBUILT" = 1 ]; then
        say ""
        say "## compute-sanitizer (the MF_CUDA_DEBUG build)"
        say ""
        say '```'
        grep -E '^(clean|ERRORS|no verdict|sanitizer:|[^ ]* not found|.* is missing)' "$DIR"/*_sanitizer.log 2>/dev/null | head -n 40
        say '```'
    fi
    say ""
    say "## Training on the GPU beside the CPU"
    say ""
    say "build/train (CPU) and build/train-cuda (GPU) with the same options and seed on a generated text: \`$TRAIN_ARGS\` plus each model's options."
    say ""
    cat "$WORK/train.md" 2>/dev/null || say "(no table: see the train part's log)"
    for part in attention fw-sweep models; do
        say ""
        if [ -f "$WORK/$part.md" ]; then sed -e 's/^# /## /' -e 's/^## Raw runs/### Raw runs/' "$WORK/$part.md"
        else say "## $part: no report (see its log)"; fi
    done
} > "$R"
say ""
say "report: $R"
goals_with() { awk -v s="| $1 |" '/^## / { in_goals = /^## Goals/ } in_goals && index($0, s) { n++ } END { print n + 0 }' "$R"; }
say "goals NOT met: $(goals_with "NOT met"), not measured: $(goals_with "not measured"); parts: $(for id in "${PARTS[@]}"; do printf '%s=%s ' "$id" "${STATUS[$id]%% *}"; done)"
for id in "${PARTS[@]}"; do [ "${STATUS[$id]}" = passed ] || exit 1; done
exit 0
