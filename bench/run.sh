#!/usr/bin/env bash
# bench/run.sh - `make bench`: SGEMM vs OpenBLAS, then a training step of every mixer, C vs PyTorch,
# side by side in one invocation. Writes the report to bench/results/cpu_<date>[_<header>].md
# (build/bench/ keeps the raw RESULT lines and the per-run logs).
#
#   bash bench/run.sh                  the library as it is (metaformer.h)
#   bash bench/run.sh --header git:HEAD   bench the committed header (or any file) instead of the
#                                      working tree's, from a temporary copy [BENCH_HEADER]
#   bash bench/run.sh --quick          1 repeat, short runs, no GEMM table, no profile (a smoke test)
# Options (or the environment variables in brackets):
#   --reps N [BENCH_REPS=3]            C / torch runs per mixer, interleaved; the table shows medians
#   --mixers "a b" [BENCH_MIXERS]      rows (see row_spec below; --rows too), default: every mixer of
#                                      the library (build/bench/bench_model --list-mixers) and compressive
#   --steps N [BENCH_STEPS=10] --warmup N [BENCH_WARMUP=2] --max-time S [BENCH_MAX_TIME=10]
#                                      per run: warm-up + timed steps, cut off after S seconds
#   --threads N [BENCH_THREADS=2]      threads for both sides (C OpenMP; torch intra-op + OpenBLAS)
#   --no-gemm-table [BENCH_GEMM_TABLE=0]   --no-profile [BENCH_PROFILE=0]
#   --no-fw-sweep [BENCH_FW_SWEEP=0]   skip the fast-weights kernel sweep (recurrent vs chunkwise vs the
#                                      seed's PyTorch loop, T = 128 .. 2048; about 2 minutes)
#   --perf [BENCH_PERF=1]              also `perf record` one short C run per mixer (top symbols)
#   --no-torch2 [BENCH_TORCH2=0]       no PyTorch 2.x column (else bench/torch2_venv.sh installs the current
#                                      2.x from PyPI into build/venv-torch once, ~4.4 GB, and it runs beside
#                                      Debian's torch 1.13: eager, and torch.compile in a second row)
#   --ops-only                         `make bench-ops`: only the per-op breakdown (C next to torch.profiler),
#                                      report bench/results/cpu_<date>_ops.md
#   --no-compile [BENCH_COMPILE=0]     no torch.compile row; [BENCH_COMPILE_TIMEOUT=300] s per compiled run
#                                      (compile included; a row whose compile takes longer shows "-")
#   [BENCH_C_WAIT_POLICY=default]      OMP_WAIT_POLICY of the C runs: "default" = libgomp's own (its
#                                      one OpenMP pool spins briefly between parallel regions, as a
#                                      program normally runs); PASSIVE makes every region pay a
#                                      futex wake-up - use it only on a machine loaded by other jobs
#   --out FILE                         report path;   --build-only   build, then stop
#   [PYTHON=/usr/bin/python3]   [CC=gcc]   [BENCH_NO_APT=1]
#
# PyTorch 2.x (PyPI's wheel: MKL for BLAS, oneDNN, its own libgomp) runs with OMP_NUM_THREADS=N
# MKL_NUM_THREADS=N and the C runs' wait policy (libgomp's default): MKL and ATen share that one OpenMP
# pool, so there are no two pools to keep apart. Its torch.compile row: Inductor's C++ backend (g++);
# the compile (the first warm-up steps) is not timed, its time is in the raw lines (first_step_ms).
# The goal columns compare C with the faster of the two eager PyTorch columns.
# Fairness settings for PyTorch (printed in the report): torch.set_num_threads(N), OMP_NUM_THREADS=N,
# OPENBLAS_NUM_THREADS=N, OMP_WAIT_POLICY=PASSIVE (OpenMP workers sleep while OpenBLAS's pthreads
# run, so the two pools do not fight), BLAS = OpenBLAS (checked in the torch process itself), and
# OPENBLAS_CORETYPE = whichever OpenBLAS kernel set gives the best 2048^3 sgemm here (OpenBLAS
# 0.3.21 does not know Sapphire/Emerald Rapids and falls back to SSE3 "Prescott" kernels; the peak
# and PyTorch both get the best one). FP32 peak = the best GFLOP/s of one 2048^3 OpenBLAS sgemm
# with N threads measured in this run (several times, interleaved with the model runs).
set -u
cd "$(dirname "$0")/.." || exit 1

HEADER=${BENCH_HEADER:-metaformer.h}
REPS=${BENCH_REPS:-3}
ROWS=${BENCH_MIXERS:-}   # empty: default_rows, after the build
STEPS=${BENCH_STEPS:-10}
WARMUP=${BENCH_WARMUP:-2}
MAX_TIME=${BENCH_MAX_TIME:-10}
THREADS=${BENCH_THREADS:-2}
GEMM_TABLE=${BENCH_GEMM_TABLE:-1}
PROFILE=${BENCH_PROFILE:-1}
FW_SWEEP=${BENCH_FW_SWEEP:-1}
PERF=${BENCH_PERF:-0}
PROF_STEPS=${BENCH_PROFILE_STEPS:-3}
TORCH2=${BENCH_TORCH2:-1}
COMPILE=${BENCH_COMPILE:-1}
COMPILE_TIMEOUT=${BENCH_COMPILE_TIMEOUT:-300}
BF16=${BENCH_BF16:-1}   # the bf16 table
OPS_ONLY=0
PY=${PYTHON:-/usr/bin/python3}
CC=${CC:-gcc}
OUT=""
BUILD_ONLY=0
# shellcheck source=bench/common.sh
. bench/common.sh
own_option() { # the options of this script (the shared ones: parse_args in bench/common.sh)
    case "$1" in
    --header) HEADER=${2-}; ARG_USED=2 ;;
    --quick) REPS=1; STEPS=3; WARMUP=1; MAX_TIME=5; GEMM_TABLE=0; PROFILE=0; FW_SWEEP=0; COMPILE=0; ARG_USED=1 ;;
    --threads) THREADS=${2-}; ARG_USED=2 ;;
    --no-gemm-table) GEMM_TABLE=0; ARG_USED=1 ;;
    --no-profile) PROFILE=0; ARG_USED=1 ;;
    --perf) PERF=1; ARG_USED=1 ;;
    --no-torch2) TORCH2=0; ARG_USED=1 ;;
    --no-compile) COMPILE=0; ARG_USED=1 ;;
    --no-bf16) BF16=0; ARG_USED=1 ;;
    --ops-only) REPS=0; GEMM_TABLE=0; FW_SWEEP=0; COMPILE=0; PROFILE=1; OPS_ONLY=1; ARG_USED=1 ;;
    esac
}
parse_args own_option "$@"

T_START=$(date +%s)
BUILD=build/bench
mkdir -p "$BUILD" bench/results
TAG=""
case "$HEADER" in   # a git revision is named by its hash: HEAD moves
git:*) TAG="_git-$(git rev-parse --short "${HEADER#git:}" 2>/dev/null || printf '%s' "${HEADER#git:}" | tr -c 'A-Za-z0-9.-' '-')" ;;
metaformer.h) ;;
*) TAG="_$(basename "$HEADER" .h | tr -c 'A-Za-z0-9.-' '-')" ;;
esac
[ "$OPS_ONLY" = 1 ] && TAG="${TAG}_ops"
[ -n "$OUT" ] || OUT="bench/results/cpu_$(date +%Y-%m-%d)${TAG}.md"
RAW="$BUILD/raw${TAG}.txt"
: > "$RAW"
REPORT="$BUILD/report${TAG}.md"
: > "$REPORT"


# ---- OpenBLAS ------------------------------------------------------------------------------
have_openblas() {
    printf '#include <cblas.h>\nint main(void){float a=1,b=1,c=0;cblas_sgemm(CblasRowMajor,CblasNoTrans,CblasNoTrans,1,1,1,1.0f,&a,1,&b,1,0.0f,&c,1);return c!=1;}\n' > "$BUILD/ob_check.c"
    $CC "$BUILD/ob_check.c" -o "$BUILD/ob_check" -lopenblas >/dev/null 2>&1 && "$BUILD/ob_check"
}
# a Debian package, where this runs as root with apt-get (BENCH_NO_APT=1: never)
apt_install() {
    if [ "$(id -u)" = 0 ] && [ -z "${BENCH_NO_APT:-}" ] && command -v apt-get >/dev/null; then
        say "== installing $1 (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >/dev/null 2>&1; }
    fi
}
OPENBLAS=1
have_openblas || apt_install libopenblas-dev
have_openblas || OPENBLAS=0
NOTES=()
[ "$OPENBLAS" = 1 ] || NOTES+=("OpenBLAS (libopenblas-dev) is not available and could not be installed (needs root and apt-get; BENCH_NO_APT set?): no GEMM table, no FP32 peak, no % of peak.")

TORCH=1
TORCH_WHY=""
# Debian's torch 1.13 (the first PyTorch column), installed where missing as OpenBLAS is
"$PY" -c 'import torch' >/dev/null 2>&1 || [ "$BUILD_ONLY" = 1 ] || [ "$PY" != /usr/bin/python3 ] || apt_install python3-torch
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then TORCH=0; TORCH_WHY="$PY cannot import torch (install python3-torch)"; NOTES+=("PyTorch: $TORCH_WHY; torch columns are empty."); fi
PY2=""
if [ "$TORCH2" = 1 ] && [ "$BUILD_ONLY" = 0 ]; then
    PY2=$(bash bench/torch2_venv.sh | tail -n 1)
    "$PY2" -c 'import torch' >/dev/null 2>&1 || { NOTES+=("PyTorch 2.x: bench/torch2_venv.sh could not install it (see its messages): no torch 2.x columns."); PY2=""; TORCH2=0; }
fi
[ "$TORCH2" = 1 ] || COMPILE=0

# ---- build ---------------------------------------------------------------------------------
# The header under test is staged when it is not the working tree's metaformer.h as is: from git
# (--header git:REV) or another file. bench_gemm.c
# includes "../metaformer.h", so a copy of it is staged next to the header too.
CFLAGS_B="-O3 -march=native -fopenmp"
HDR_DIR=.
GEMM_C=bench/bench_gemm.c
HDR_DESC="metaformer.h (working tree)"
if [ "$HEADER" != metaformer.h ]; then
    STAGE="$BUILD/stage${TAG}"
    rm -rf "$STAGE"; mkdir -p "$STAGE/bench"
    case "$HEADER" in
    git:*) git show "${HEADER#git:}:metaformer.h" > "$STAGE/metaformer.h" ||
               { say "cannot read metaformer.h at git revision ${HEADER#git:}"; exit 1; }
           HDR_DESC="metaformer.h at git ${HEADER#git:} ($(git rev-parse --short "${HEADER#git:}"))" ;;
    *)     cp "$HEADER" "$STAGE/metaformer.h" || exit 1; HDR_DESC="$HEADER"; [ "$HEADER" = metaformer.h ] && HDR_DESC="metaformer.h (working tree)" ;;
    esac
    cp bench/bench_gemm.c "$STAGE/bench/"
    HDR_DIR="$STAGE"; GEMM_C="$STAGE/bench/bench_gemm.c"
fi
GEMM_SRC="$HDR_DESC"
say "== building bench_model ($GEMM_SRC)"
HDR_SHA=$(sha1sum "$HDR_DIR/metaformer.h" | cut -c1-12)
if ! $CC $CFLAGS_B -I"$HDR_DIR" bench/bench_model.c -o "$BUILD/bench_model" -lm; then
    say "build of bench_model failed"
    exit 1
fi
if [ "$OPENBLAS" = 1 ]; then
    $CC $CFLAGS_B -DMF_BENCH_OPENBLAS -I"$HDR_DIR" bench/bench_model.c -o "$BUILD/bench_peak" -lopenblas -lm || OPENBLAS=0
    if [ "$GEMM_TABLE" = 1 ]; then   # the build line of bench/bench_gemm.c
        $CC $CFLAGS_B "$GEMM_C" -o build/bench_gemm -lopenblas -lm ||
            { NOTES+=("bench/bench_gemm.c did not build: no GEMM table."); GEMM_TABLE=0; }
    fi
fi
[ "$BUILD_ONLY" = 1 ] && { say "built: $BUILD/bench_model$([ "$OPENBLAS" = 1 ] && echo " $BUILD/bench_peak")$([ "$OPENBLAS" = 1 ] && [ "$GEMM_TABLE" = 1 ] && echo " build/bench_gemm")"; exit 0; }

# ---- environments of the runs
TORCH_ENV=(env OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" OMP_WAIT_POLICY=PASSIVE)
C_WAIT=${BENCH_C_WAIT_POLICY:-default}
if [ "$C_WAIT" = default ]; then C_ENV=(env -u OMP_WAIT_POLICY OMP_NUM_THREADS="$THREADS")
else C_ENV=(env OMP_NUM_THREADS="$THREADS" OMP_WAIT_POLICY="$C_WAIT"); fi
TORCH2_ENV=("${C_ENV[@]}" MKL_NUM_THREADS="$THREADS")

# ---- OpenBLAS kernels and the FP32 peak ----------------------------------------------------
PEAKS="$BUILD/peaks${TAG}.txt"
: > "$PEAKS"
measure_peak() {   # one 2048^3 sgemm measurement (best of 7) with the chosen core
    [ "$OPENBLAS" = 1 ] || return 0
    "$BUILD/bench_peak" --peak 2048 --threads "$THREADS" | grep '^RESULT' | tee -a "$PEAKS" >/dev/null
}
CORETYPE=""
if [ "$OPENBLAS" = 1 ]; then
    say "== OpenBLAS kernels: autodetected vs forced"
    unset OPENBLAS_CORETYPE
    auto=$("$BUILD/bench_peak" --peak 2048 --threads "$THREADS" | grep '^RESULT')
    say "   autodetected: $(echo "$auto" | field core) $(echo "$auto" | field gflops) GFLOP/s"
    best_core=$(echo "$auto" | field core); best_gf=$(echo "$auto" | field gflops)
    CANDIDATES=""
    grep -qw avx512f /proc/cpuinfo && CANDIDATES="SkylakeX"   # (Cooperlake: the same SGEMM kernels)
    grep -qw avx2 /proc/cpuinfo && CANDIDATES="$CANDIDATES Haswell"
    for c in $CANDIDATES; do
        [ "$c" = "$(echo "$auto" | field core)" ] && continue
        r=$( (OPENBLAS_CORETYPE=$c "$BUILD/bench_peak" --peak 2048 --threads "$THREADS"
              OPENBLAS_CORETYPE=$c "$BUILD/bench_peak" --peak 2048 --threads "$THREADS") | grep '^RESULT' |
            awk '{for (i = 1; i <= NF; i++) if ($i ~ /^gflops=/) { split($i, a, "="); if (a[2] > b) { b = a[2]; l = $0 } } } END { print l }')
        say "   OPENBLAS_CORETYPE=$c: $(echo "$r" | field core) $(echo "$r" | field gflops) GFLOP/s"
        if awk -v a="$(echo "$r" | field gflops)" -v b="$best_gf" 'BEGIN{exit !(a > b * 1.1)}'; then
            best_core=$c; best_gf=$(echo "$r" | field gflops)
        fi
    done
    if [ "$best_core" != "$(echo "$auto" | field core)" ]; then
        CORETYPE=$best_core
        export OPENBLAS_CORETYPE=$best_core
        NOTES+=("OpenBLAS autodetects the '$(echo "$auto" | field core)' kernels on this CPU ($(echo "$auto" | field gflops) GFLOP/s at 2048^3); OPENBLAS_CORETYPE=$best_core is faster and is used for the peak, the GEMM table and PyTorch.")
    fi
    say "   using: ${OPENBLAS_CORETYPE:-autodetected}"
    measure_peak
fi

# ---- GEMM table ----------------------------------------------------------------------------
GEMM_OUT="$BUILD/gemm${TAG}.md"
: > "$GEMM_OUT"
if [ "$OPENBLAS" = 1 ] && [ "$GEMM_TABLE" = 1 ]; then
    say "== SGEMM: mf_sgemm vs OpenBLAS (build/bench_gemm)"
    "${C_ENV[@]}" build/bench_gemm | tee "$GEMM_OUT"
    g=$(grep -E '^\| 2048\^3 \| '"$THREADS"' \|' "$GEMM_OUT" | awk -F'|' '{gsub(/ /,"",$5); print $5}')
    [ -n "$g" ] && echo "RESULT impl=openblas source=bench_gemm n=2048 threads=$THREADS gflops=$g" >> "$PEAKS"
fi

# ---- torch configuration -------------------------------------------------------------------
TORCH_INFO=""
if [ "$TORCH" = 1 ]; then
    TORCH_INFO=$("${TORCH_ENV[@]}" "$PY" bench/torch_ref.py --threads "$THREADS" --info 2>&1 | head -n 1)
    say "== $TORCH_INFO"
    "${TORCH_ENV[@]}" "$PY" bench/torch_ref.py --threads "$THREADS" --info 2>/dev/null | grep -q 'openblas=1' ||
        NOTES+=("WARNING: the torch process does not have OpenBLAS loaded (see the torch line): its numbers use another BLAS.")
fi
TORCH2_INFO=""
if [ "$TORCH2" = 1 ]; then
    TORCH2_INFO=$("${TORCH2_ENV[@]}" "$PY2" bench/torch_ref.py --threads "$THREADS" --info 2>/dev/null | head -n 1)
    say "== $TORCH2_INFO"
fi

# ---- the benchmark rows -------------------------------------------------------------------
# shellcheck source=bench/cpu_rows.sh
. bench/cpu_rows.sh   # row_spec: the rows (bench/ab.sh reads the same file)
[ -n "$ROWS" ] || ROWS="$(default_rows "$BUILD/bench_model") small"
for m in $ROWS; do [ -n "$(row_spec "$m")" ] || { say "bench/run.sh: unknown row $m"; exit 2; }; done

# ---- the model runs: C and torch interleaved per row, REPS times --------------------------
# (a RESULT line is relabelled with its row's name: the compressive row runs --mixer relative)
run_c() {
    # shellcheck disable=SC2046
    "${C_ENV[@]}" "$BUILD/bench_model" $(row_field "$1" 1) --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" \
        --max-time "$MAX_TIME" > "$BUILD/last_c.txt" 2>&1
    record_result "$BUILD/last_c.txt" "$1" "$2" "C    " rss_mb
}
run_torch() {
    [ "$TORCH" = 1 ] || return 0
    # shellcheck disable=SC2046
    "${TORCH_ENV[@]}" "$PY" $(row_field "$1" 2) --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" \
        --max-time "$MAX_TIME" > "$BUILD/last_torch.txt" 2>&1
    record_result "$BUILD/last_torch.txt" "$1" "$2" torch rss_mb
}
# PyTorch 2.x, eager and (COMPILE: once per row, in the first repeat) torch.compile; their RESULT lines
# are relabelled impl=torch2 / impl=torch2c
run_torch2() {
    [ "$TORCH2" = 1 ] || return 0
    # shellcheck disable=SC2046
    "${TORCH2_ENV[@]}" "$PY2" $(row_field "$1" 2) --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" \
        --max-time "$MAX_TIME" 2>&1 | sed 's/^RESULT impl=torch /RESULT impl=torch2 /' > "$BUILD/last_torch2.txt"
    record_result "$BUILD/last_torch2.txt" "$1" "$2" "torch2" rss_mb
    [ "$COMPILE" = 1 ] && [ "$2" = 1 ] || return 0
    # shellcheck disable=SC2046
    timeout "$COMPILE_TIMEOUT" "${TORCH2_ENV[@]}" "$PY2" $(row_field "$1" 2) --compile --steps "$STEPS" \
        --warmup "$((WARMUP > 2 ? WARMUP : 2))" --threads "$THREADS" --max-time "$MAX_TIME" 2>&1 |
        sed 's/^RESULT impl=torch /RESULT impl=torch2c /' > "$BUILD/last_torch2c.txt"
    record_result "$BUILD/last_torch2c.txt" "$1" "$2" "torch2 compiled" rss_mb
}
# bf16 (the MetaFormer rows): the C model in --precision bf16 on the CPU's bf16 kernel, and PyTorch 2.x
# eager under torch.autocast("cpu", dtype=torch.bfloat16); RESULT lines relabelled impl=cbf16 / torch2bf16
BF16_ROWS=""
if [ "$BF16" = 1 ] && [ "$HEADER" = metaformer.h ]; then
    for m in $ROWS; do case "$(row_field "$m" 2)" in bench/torch_ref.py*) BF16_ROWS="$BF16_ROWS $m" ;; esac; done
fi
run_bf16() {
    case " $BF16_ROWS " in *" $1 "*) ;; *) return 0 ;; esac
    # shellcheck disable=SC2046
    "${C_ENV[@]}" "$BUILD/bench_model" $(row_field "$1" 1) --precision bf16 --steps "$STEPS" --warmup "$WARMUP" \
        --threads "$THREADS" --max-time "$MAX_TIME" 2>&1 | sed 's/^RESULT impl=c /RESULT impl=cbf16 /' > "$BUILD/last_cbf16.txt"
    record_result "$BUILD/last_cbf16.txt" "$1" "$2" "C bf16" rss_mb
    [ "$TORCH2" = 1 ] || return 0
    # shellcheck disable=SC2046
    "${TORCH2_ENV[@]}" "$PY2" $(row_field "$1" 2) --precision bf16 --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" \
        --max-time "$MAX_TIME" 2>&1 | sed 's/^RESULT impl=torch /RESULT impl=torch2bf16 /' > "$BUILD/last_torch2bf16.txt"
    record_result "$BUILD/last_torch2bf16.txt" "$1" "$2" "torch2 bf16" rss_mb
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$REPS"); do
    say "== repeat $r of $REPS"
    for m in $ROWS; do
        if [ $((r % 2)) = 1 ]; then run_c "$m" "$r"; run_torch "$m" "$r"; run_torch2 "$m" "$r"; run_bf16 "$m" "$r"
        else run_bf16 "$m" "$r"; run_torch2 "$m" "$r"; run_torch "$m" "$r"; run_c "$m" "$r"; fi
    done
    measure_peak
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the report ----------------------------------------------------------------------------
PEAK=$(grep -h '^RESULT' "$PEAKS" | field gflops | maxval)
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
rep "# metaformer.h CPU benchmark, $(date '+%Y-%m-%d %H:%M')"
rep ""
rep "Command: \`bash bench/run.sh$([ "$HEADER" = metaformer.h ] || echo " --header $HEADER")\` (reps $REPS, steps $STEPS + $WARMUP warm-up, max $MAX_TIME s per run, $THREADS threads)."
rep "Machine: $CPU, $(nproc) CPUs, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo); load average $LOAD_BEFORE before, $LOAD_AFTER after (other jobs share this machine)."
rep "C: $($CC --version | head -n 1), $CFLAGS_B; header: $GEMM_SRC (sha1 $HDR_SHA at build time)."
[ -n "$TORCH_INFO" ] && rep "PyTorch (Debian): $TORCH_INFO"
[ -n "$TORCH2_INFO" ] && rep "PyTorch (PyPI, build/venv-torch): $TORCH2_INFO"
rep "C environment: OMP_NUM_THREADS=$THREADS$([ "$C_WAIT" = default ] || echo " OMP_WAIT_POLICY=$C_WAIT"), mf_set_threads($THREADS). PyTorch 1.13 environment: OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE${CORETYPE:+ OPENBLAS_CORETYPE=$CORETYPE}, torch.set_num_threads($THREADS). PyTorch 2.x environment: the C runs' plus MKL_NUM_THREADS=$THREADS, torch.set_num_threads($THREADS)."
rep "Config: d_model 256, heads 8, layers 4, d_ff 1024, batch 8, vocab 65, dropout 0; sequence and memory lengths per row. MetaFormer mixers: learned positions, GELU, biases, pool_size 3 causal; relative/compressive/fast_weights/feedback: the seeds' models (no positions, ReLU FFN) against the seeds' PyTorch code (bench/torch_xl.py, torch_fastweights.py, torch_feedback.py)."
rep "Step: forward + cross-entropy + backward + clip_grad_norm(1.0) + Adam (lr 1e-3) + zero_grad, random tokens."
if [ -n "$PEAK" ]; then
    rep "FP32 peak: $PEAK GFLOP/s = best OpenBLAS sgemm 2048^3, $THREADS threads, core ${OPENBLAS_CORETYPE:-autodetected}, over $(grep -c '^RESULT' "$PEAKS") measurements in this run."
fi
rep ""
rep "| row | config | C tok/s | torch 1.13 tok/s | torch 2.x tok/s | ratio (faster) | C GFLOP/s | % of peak | C peak RSS MB | torch peak RSS MB (1.13 / 2.x) | MFLOP/token | goal |"
rep "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
table_row() { # ROW: its line of the table, and the torch.compile line under it
    local m=$1 c_tok t_tok t2_tok t2c_tok c_gf c_rss t_rss t2_rss t2c_rss t2c_first mft
    c_tok=$(raw_stat c "$m" tok_s median)
    t_tok=$(raw_stat torch "$m" tok_s median)
    t2_tok=$(raw_stat torch2 "$m" tok_s median)
    t2c_tok=$(raw_stat torch2c "$m" tok_s median)
    t2c_first=$(raw_stat torch2c "$m" first_step_ms median)
    c_gf=$(raw_stat c "$m" gflops median)
    c_rss=$(raw_stat c "$m" rss_mb maxval)
    t_rss=$(raw_stat torch "$m" rss_mb maxval)
    t2_rss=$(raw_stat torch2 "$m" rss_mb maxval)
    t2c_rss=$(raw_stat torch2c "$m" rss_mb maxval)
    mft=$(raw_stat c "$m" mflop_tok head -n 1)
    awk -v m="$m" -v cfg="$(row_field "$m" 4)" -v gx="$(row_field "$m" 3)" -v ct="$c_tok" -v tt="$t_tok" -v t2="$t2_tok" \
        -v t2c="$t2c_tok" -v t2cf="$t2c_first" -v cg="$c_gf" -v cr="$c_rss" -v tr="$t_rss" -v tr2="$t2_rss" -v tr2c="$t2c_rss" \
        -v pk="$PEAK" -v mft="$mft" -v compile="$COMPILE" 'function f(x, d) { return x == "" ? "-" : sprintf("%." d "f", x) }
        BEGIN {
            best = (tt != "" && (t2 == "" || tt + 0 > t2 + 0)) ? tt : t2          # the faster eager PyTorch
            rmin = (tr != "" && (tr2 == "" || tr + 0 < tr2 + 0)) ? tr : tr2       # its smaller peak RSS
            ratio = (ct != "" && best != "" && best > 0) ? ct / best : ""
            pct = (cg != "" && pk != "" && pk > 0) ? 100 * cg / pk : ""
            # goal: C tok/s >= min(gx x the faster torch, the tok/s of 80% of peak), peak RSS <= half
            speed = (ratio != "" && ratio >= gx) || (pct != "" && pct >= 80)
            mem = cr != "" && rmin != "" && cr + 0 <= 0.5 * rmin
            if (ct == "" || (ratio == "" && pct == "")) goal = "-"
            else goal = (speed && mem) ? "met" : "NOT met (" (speed ? "" : "speed") (speed || mem ? "" : ", ") (mem ? "" : "memory") ")"
            printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s |\n", m, cfg, f(ct, 0), f(tt, 0), f(t2, 0),
                   f(ratio, 2), f(cg, 1), f(pct, 1), f(cr, 0), f(tr, 0), f(tr2, 0), f(mft, 2), goal
            if (compile == 1)
                printf "| %s, torch.compile | compile %s s, not timed | %s | | %s | %s | | | | - / %s | | (not a goal) |\n", m,
                       t2cf == "" ? "-" : sprintf("%.0f", t2cf / 1000), f(ct, 0), f(t2c, 0),
                       (ct != "" && t2c != "" && t2c > 0) ? sprintf("%.2f", ct / t2c) : "-", f(tr2c, 0)
        }'
}
table_rows table_row
rep ""
if [ -n "$BF16_ROWS" ]; then
    KERNEL=$(grep -h -o 'precision=bf16[a-z0-9-]*' "$RAW" | head -n 1 | sed 's/precision=//')
    rep "bf16, the same rows and runs: C --precision bf16 (${KERNEL:-no run}: the CPU's bf16 kernel; $(grep -o 'avx512_bf16\|amx_bf16\|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')in /proc/cpuinfo) against PyTorch 2.x eager under torch.autocast(\"cpu\", dtype=torch.bfloat16). Goals (#38): C bf16 >= 1.5x PyTorch's bf16 autocast and >= 2x C fp32; fastest torch = the fastest of its fp32 (1.13, 2.x), bf16 and compiled columns above."
    rep ""
    rep "| row | C fp32 tok/s | C bf16 tok/s | C bf16 / C fp32 | torch 2.x bf16 tok/s | C bf16 / torch bf16 | fastest torch tok/s | C bf16 / fastest torch | goal |"
    rep "|---|---:|---:|---:|---:|---:|---:|---:|---|"
    for m in $BF16_ROWS; do
        awk -v m="$m" -v cf="$(raw_stat c "$m" tok_s median)" -v cb="$(raw_stat cbf16 "$m" tok_s median)" \
            -v tb="$(raw_stat torch2bf16 "$m" tok_s median)" -v t1="$(raw_stat torch "$m" tok_s median)" \
            -v t2="$(raw_stat torch2 "$m" tok_s median)" -v tc="$(raw_stat torch2c "$m" tok_s median)" \
            'function f(x, d) { return x == "" ? "-" : sprintf("%." d "f", x) }
             function r(a, b) { return (a != "" && b != "" && b > 0) ? a / b : "" }
             BEGIN {
                 best = ""; n = split(t1 " " t2 " " tb " " tc, v, " ")
                 for (i = 1; i <= n; i++) if (v[i] != "" && (best == "" || v[i] + 0 > best + 0)) best = v[i]
                 a = r(cb, cf); b = r(cb, tb); c = r(cb, best)
                 goal = (a == "" || b == "") ? "-" : (a >= 2 && b >= 1.5) ? "met" : "NOT met (" (b >= 1.5 ? "" : "vs torch bf16") (a >= 2 || b >= 1.5 ? "" : ", ") (a >= 2 ? "" : "vs C fp32") ")"
                 printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m, f(cf, 0), f(cb, 0), f(a, 2), f(tb, 0), f(b, 2), f(best, 0), f(c, 2), goal
             }' >> "$REPORT"
    done
    rep ""
    if [ -x build/bench_bf16 ] || make -s build/bench_bf16 > /dev/null 2>&1; then
        rep "The products alone (build/bench_bf16 and bench/torch_mm.py, 2048-token training-step shapes of d_model 512 / d_ff 2048 and 2048^3; the bf16 peak next to the FP32 peak above):"
        rep ""
        "${C_ENV[@]}" build/bench_bf16 --threads "$THREADS" >> "$REPORT"
        rep ""
        [ "$TORCH2" = 1 ] && "${TORCH2_ENV[@]}" "$PY2" bench/torch_mm.py --threads "$THREADS" >> "$REPORT"
        rep ""
    fi
fi
rep "tok/s and GFLOP/s: median over the $REPS runs of each side (each run: the median step). ratio = C / the faster of the two eager PyTorch columns."
rep "torch.compile rows: PyTorch 2.x, torch.compile(model) (Inductor, C++ for the CPU), one run per row (the first repeat), ratio = C / compiled; the compile (first warm-up steps, the time in the config column) is not timed. \"-\": the run failed or took longer than ${COMPILE_TIMEOUT} s with its compile (build/bench/last_torch2c.txt has the last log)."
rep "GFLOP/s = analytic model FLOPs per token x tokens/s: every matmul of the model math at 2*m*n*k, backward = 2 x forward;"
rep "attention QK^T and PV counted for the CAUSAL half only (T(T+1)/2 query-key pairs); metric/quadratic count p, the per-head p M"
rep "(2 dk^2 per head and token, as the C mixer computes it) and E; pool/identity count the FFN and the head only."
rep "Recomputation (the flash backward) is not counted. % of peak = C GFLOP/s / FP32 peak."
rep "The families' counts (relative position term, compressor and reconstruction loss, fast-weight state updates, feedback"
rep "memory projections) are spelled out in the header of bench/bench_model.c."
rep "Peak RSS: getrusage(RUSAGE_SELF).ru_maxrss of each process, max over runs. The torch process's includes the interpreter and"
rep "libtorch: $(grep "impl=torch " "$RAW" | field rss_base_mb | median) MB (1.13) / $(grep "impl=torch2 " "$RAW" | field rss_base_mb | median) MB (2.x) after \`import torch\`, before the model."
rep "goal: C tok/s >= min(k x the faster PyTorch's tok/s, the tok/s of 80% of peak) with k = 2.2 (MetaFormer mixers),"
rep "3 (relative, compressive), 10 (fast_weights, feedback, feedback_kv; linear 5), and C peak RSS <= half the smaller PyTorch peak RSS."
rep "CPU time / wall time of the timed steps (median over all runs; $THREADS = every thread had a CPU): C $(grep "impl=c " "$RAW" | field cpu_util | median), torch 1.13 $(grep "impl=torch " "$RAW" | field cpu_util | median), torch 2.x $(grep "impl=torch2 " "$RAW" | field cpu_util | median)."
for n in "${NOTES[@]+"${NOTES[@]}"}"; do rep ""; rep "Note: $n"; done
if [ -s "$GEMM_OUT" ]; then rep ""; rep "## SGEMM ($GEMM_SRC)"; rep ""; while IFS= read -r l; do rep "$l"; done < "$GEMM_OUT"; fi
rep ""
rep "## Raw runs"
rep ""
rep '```'
while IFS= read -r l; do rep "$l"; done < "$RAW"
grep -h '^RESULT' "$PEAKS" | while IFS= read -r l; do rep "$l"; done
rep '```'

# ---- fast weights: the kernels alone over sequence lengths ---------------------------------
if [ "$FW_SWEEP" = 1 ]; then
    rep ""
    rep "## Fast weights kernels: recurrent vs chunkwise (C) vs the seed's token loop (PyTorch), T = 128 .. 2048"
    rep ""
    rep "Forward + backward of the delta-rule op alone at the bench model's attention (H 8, dk 32, DPFP nu 1), 8192 tokens per"
    rep "run (B = 8192 / T). The library picks recurrent below T = 16 and chunks of 16 from there (chunk_size 0)."
    rep '```'
    if $CC $CFLAGS_B -I"$HDR_DIR" bench/bench_fw_sweep.c -o "$BUILD/bench_fw_sweep" -lm; then
        "${C_ENV[@]}" "$BUILD/bench_fw_sweep" --threads "$THREADS" 2>&1 | while IFS= read -r l; do rep "$l"; done
    else rep "bench/bench_fw_sweep.c did not build"; fi
    if [ "$TORCH" = 1 ]; then
        "${TORCH_ENV[@]}" "$PY" bench/torch_fastweights.py --threads "$THREADS" --reps 1 --sweep "128 256 512 1024 2048" 2>&1 |
            grep -v '^INFO\|^torch ' | while IFS= read -r l; do rep "$l"; done
    fi
    rep '```'
fi

# ---- op profile (C) and perf ---------------------------------------------------------------
# prof_bound ROW: how far the row's goal is from what its profiles allow. The goal k x asks for a C
# step of at most torch's step / k, or one at 80% of peak; set beside that what the C GEMM alone takes
# and the ratios two ideal cases would give: every other C op free, or the C GEMM as fast as torch's
# with the rest unchanged. torch's profiled step carries the profiler's overhead, which favours C.
prof_ms() { # IMPL KIND FILE: fwd + bwd ms of one kind in a profile's OPS lines
    grep "^OPS impl=$1 .* kind=$2 " "$3" | head -n 1 | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^(fwd|bwd)_ms=/) { sub(/^[a-z]+_ms=/, "", $i); s += $i; n++ } }
        END { if (n) print s }'
}
prof_bound() {
    local m=$1; local c=$BUILD/prof_$m.txt t=$BUILD/prof_torch_$m.txt
    awk -v k="$(row_field "$m" 3)" -v pct="$(awk -v g="$(raw_stat c "$m" gflops median)" -v p="$PEAK" \
            'BEGIN { if (g != "" && p != "" && p > 0) print 100 * g / p }')" \
        -v cg="$(prof_ms c gemm "$c")" -v cs="$(prof_ms c step "$c")" \
        -v tg="$(prof_ms torch gemm "$t")" -v ts="$(prof_ms torch step "$t")" '
        BEGIN {
            if (cg == "" || cs == "" || tg == "" || ts == "" || cg <= 0 || cs <= 0) exit
            s = sprintf("Bound: %sx needs a C step of at most %.1f ms (torch %.1f ms / %s)", k, ts / k, ts, k)
            if (pct != "") s = s sprintf(", or %.1f ms for 80%% of peak (this C step: %.1f ms at %.0f%%)", cs * pct / 80, cs, pct)
            s = s sprintf("; the C GEMM alone takes %.1f ms (torch %.1f ms). With every other C op free the ratio", cg, tg)
            s = s sprintf(" would be %.2fx; with the C GEMM as fast as torch'\''s and the rest as now, %.2fx.", ts / cg, ts / (cs - cg + tg))
            print s
        }'
}
if [ "$PROFILE" = 1 ]; then
    TP_PY=$PY; TP_ENV=("${TORCH_ENV[@]}"); TP_NAME="1.13 (Debian)"
    [ "$TORCH2" = 1 ] && { TP_PY=$PY2; TP_ENV=("${TORCH2_ENV[@]}"); TP_NAME="$(echo "$TORCH2_INFO" | cut -d: -f1 | sed 's/^torch //') (PyPI, eager)"; }
    rep ""
    rep "## Where the time of one training step goes: C (mf_set_profile) next to PyTorch $TP_NAME (torch.profiler)"
    rep ""
    rep "ms per step, the mean of $PROF_STEPS profiled steps (after the timed runs; one batch). Kinds: gemm = time inside the"
    rep "GEMM driver (C: the library's packed SGEMM called by linear / matmul; torch: aten::mm, addmm, bmm), matmul = the rest"
    rep "of the linear ops (C: nearly nothing, the bias is summed in the GEMM; torch: aten::sum, the bias gradients), mixer ="
    rep "the token mixer's own kernels (fused attention, softmax, pooling, fast-weight / feedback recurrences; their small"
    rep "per-tile products included), layernorm, elementwise (residual adds, GELU, dropout, scale), loss (cross-entropy),"
    rep "embedding, copy (C: permute / concat / slice; torch: copy_, cat, contiguous, ...), optimizer (clip_grad_norm, Adam,"
    rep "zero_grad), memset (C: zeroing activation gradients in the backward; torch: zero_ / fill_), glue = the step's wall"
    rep "time outside every timed op (C: model code between ops; torch: Python, the autograd engine, the profiler's own"
    rep "overhead, which also inflates its op times a little), step = the profiled step's wall time. Forward / backward:"
    rep "where the op ran (the optimizer's time is in the backward column). torch's kinds come from ATen op names"
    rep "(bench/torch_harness.py _KINDS), the C's from the library (mf_profile_entry.kind)."
    for m in $ROWS; do
        # shellcheck disable=SC2046
        "${C_ENV[@]}" "$BUILD/bench_model" $(row_field "$m" 1) --steps 1 --warmup 1 --threads "$THREADS" --max-time 1 \
            --profile "$PROF_STEPS" > "$BUILD/prof_$m.txt" 2>&1
        : > "$BUILD/prof_torch_$m.txt"
        if [ "$TORCH" = 1 ] || [ "$TORCH2" = 1 ]; then
            # shellcheck disable=SC2046
            "${TP_ENV[@]}" "$TP_PY" $(row_field "$m" 2) --steps 1 --warmup 1 --threads "$THREADS" --max-time 1 \
                --profile "$PROF_STEPS" > "$BUILD/prof_torch_$m.txt" 2>&1
        fi
        rep ""
        rep "### $m ($(row_field "$m" 4))"
        rep ""
        rep "| kind | C fwd | C bwd | C total | torch fwd | torch bwd | torch total | torch / C |"
        rep "|---|---:|---:|---:|---:|---:|---:|---:|"
        for k in gemm matmul mixer layernorm elementwise loss embedding copy optimizer memset glue step; do
            cl=$(grep "^OPS impl=c .* kind=$k " "$BUILD/prof_$m.txt" | head -n 1)
            tl=$(grep "^OPS impl=torch .* kind=$k " "$BUILD/prof_torch_$m.txt" | head -n 1)
            awk -v k="$k" -v cf="$(echo "$cl" | field fwd_ms)" -v cb="$(echo "$cl" | field bwd_ms)" \
                -v tf="$(echo "$tl" | field fwd_ms)" -v tb="$(echo "$tl" | field bwd_ms)" '
                function f(x) { return x == "" ? "-" : sprintf("%.2f", x) }
                BEGIN { ct = cf == "" ? "" : cf + cb; tt = tf == "" ? "" : tf + tb
                        if ((ct == "" || ct < 0.005) && (tt == "" || tt < 0.005)) exit
                        printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", k, f(cf), f(cb), f(ct), f(tf), f(tb), f(tt),
                               (ct != "" && tt != "" && ct > 0) ? sprintf("%.2f", tt / ct) : "-" }' | while IFS= read -r l; do rep "$l"; done
        done
        prof_bound "$m" | while IFS= read -r l; do rep ""; rep "$l"; done
        rep ""
        rep "<details><summary>C per op, torch top ATen ops</summary>"
        rep ""
        rep '```'
        sed -n '/^profile (ms/,/^OPS/p' "$BUILD/prof_$m.txt" | grep -v '^OPS' | while IFS= read -r l; do rep "$l"; done
        sed -n '/^torch.profiler/,/^OPS/p' "$BUILD/prof_torch_$m.txt" | grep -v '^OPS' | while IFS= read -r l; do rep "$l"; done
        rep '```'
        rep "</details>"
    done
fi
if [ "$PERF" = 1 ] && command -v perf >/dev/null; then
    rep ""
    rep "## perf: top symbols of one C run per mixer (self time)"
    for m in $ROWS; do
        # shellcheck disable=SC2046
        "${C_ENV[@]}" perf record -q -o "$BUILD/perf_$m.data" "$BUILD/bench_model" $(row_field "$m" 1) --steps 2 --warmup 1 \
            --threads "$THREADS" >/dev/null 2>&1
        rep ""
        rep "### $m"
        rep '```'
        perf report -i "$BUILD/perf_$m.data" --no-children --sort symbol --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -n 15 |
            while IFS= read -r l; do rep "$l"; done
        rep '```'
    done
fi
T_END=$(date +%s)
rep ""
if [ "$ALL_MET" = 1 ]; then rep "Goal met by every mixer."; else rep "Goal NOT met by every mixer (see the goal column)."; fi
rep "Runtime of this benchmark: $((T_END - T_START)) s."
cp "$REPORT" "$OUT"
say ""
say "report: $OUT"
