#!/usr/bin/env bash
# bench/run_cuda.sh - `make bench-cuda`: on an NVIDIA GPU, a training step of every mixer and memory
# model, metaformer.h's CUDA backend (build/cuda/bench_model --device cuda) against PyTorch eager on
# the same GPU (bench/torch_*.py --device cuda, torch 2.x), side by side in one invocation; then the
# fused attention kernel against torch's scaled_dot_product_attention (T = 1024 .. 8192, dk 64) and
# the fast-weights chunkwise kernel against the recurrent one (T = 1024 .. 4096). Writes the report
# to bench/results/cuda_<date>.md (build/bench_cuda/ keeps the raw RESULT lines and the run logs).
#
# Options (or the environment variables in brackets):
#   --rows "a b" [BENCH_ROWS]      rows (see row_spec), default: every mixer of the library
#                                  (build/cuda/bench_model --list-mixers) and compressive
#   --reps N [BENCH_REPS=1]        C / torch runs per row, interleaved (a GPU is quiet: 1 is enough)
#   --steps N [BENCH_STEPS=10] --warmup N [BENCH_WARMUP=3] --max-time S [BENCH_MAX_TIME=20]
#   --tf32                         both sides let matmuls use TF32 tensor cores (default: exact fp32)
#   --no-attention  --no-fw-sweep  skip the kernel sweeps
#   --out FILE   --build-only      [PYTHON=python3] [NVCC=nvcc] [CUDA_ARCH="-gencode ..."]
# GPU config (issue #8): d_model 512, heads 8, layers 6, d_ff 2048, batch 16, vocab 65; seq_len 1024
# (softmax family, simple mixers, fast weights), 256 (feedback); XL memories the CPU bench's x 4.
set -u
cd "$(dirname "$0")/.." || exit 1

ROWS=${BENCH_ROWS:-}   # empty: default_rows, after the build
REPS=${BENCH_REPS:-1}
STEPS=${BENCH_STEPS:-10}
WARMUP=${BENCH_WARMUP:-3}
MAX_TIME=${BENCH_MAX_TIME:-20}
TF32=""
ATTN=1
FW_SWEEP=1
OUT=""
BUILD_ONLY=0
PY=${PYTHON:-python3}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ARCH=${CUDA_ARCH:-"-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"}
# shellcheck source=bench/common.sh
. bench/common.sh
own_option() { # the options of this script (the shared ones: parse_args in bench/common.sh)
    case "$1" in
    --tf32) TF32="--tf32"; ARG_USED=1 ;;
    --no-attention) ATTN=0; ARG_USED=1 ;;
    esac
}
parse_args own_option "$@"

T_START=$(date +%s)
BUILD=build/bench_cuda
mkdir -p "$BUILD" bench/results
[ -n "$OUT" ] || OUT="bench/results/cuda_$(date +%Y-%m-%d)$([ -n "$TF32" ] && echo _tf32).md"
RAW="$BUILD/raw.txt"; : > "$RAW"
REPORT="$BUILD/report.md"; : > "$REPORT"

# ---- build -------------------------------------------------------------------------------------
[ -x "$NVCC" ] || { say "make bench-cuda: nvcc not found (set NVCC=...): the CUDA benchmark needs the CUDA compiler"; exit 1; }
BINS="build/cuda/bench_model build/cuda/bench_attention build/cuda/bench_fw_sweep"
say "== building $BINS (nvcc)"
# shellcheck disable=SC2086
make -s NVCC="$NVCC" CUDA_ARCH="$ARCH" $BINS || { say "build failed"; exit 1; }
[ "$BUILD_ONLY" = 1 ] && { say "built: $BINS"; exit 0; }

# ---- is there a GPU, and torch with CUDA? ------------------------------------------------------
if ! build/cuda/bench_model --device cuda --seq 8 --batch 1 --layers 1 --steps 1 --warmup 0 > "$BUILD/probe.txt" 2>&1; then
    say "make bench-cuda: no usable CUDA GPU here: $(tail -n 1 "$BUILD/probe.txt")"
    say "(the CUDA benchmark needs an NVIDIA GPU; \`make bench\` measures the CPU)"
    exit 1
fi
TORCH=1
TORCH_WHY=$("$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() and hasattr(torch, "set_default_device") else "torch %s, CUDA available: %s (needs torch >= 2.0 with CUDA)" % (torch.__version__, torch.cuda.is_available()))' 2>&1 | tail -n 1)
[ -z "$TORCH_WHY" ] || TORCH=0
NOTES=()
[ "$TORCH" = 1 ] || NOTES+=("PyTorch is not usable on the GPU ($TORCH_WHY): torch columns are empty.")

# ---- rows: "bench_model flags|PyTorch script and flags|config" (both sides' model sizes below) ----
SIZES="--d-model 512 --heads 8 --layers 6 --d-ff 2048 --batch 16 --vocab 65"
row_spec() {
    local labml="--pos none --act relu"
    case "$1" in
    sdpa|metric|quadratic|pool|identity)
        echo "--mixer $1 --seq 1024|bench/torch_ref.py --mixer $1 --seq 1024|T 1024" ;;
    relative)
        echo "--mixer relative $labml --seq 1024 --mem-len 256|bench/torch_xl.py --mixer relative --seq 1024 --mem-len 256|T 1024, mem 256" ;;
    compressive)
        echo "--mixer relative $labml --compressive --seq 1024 --mem-len 128 --c-mem-len 256 --rate 2|bench/torch_xl.py --mixer compressive --seq 1024 --mem-len 128 --c-mem-len 256 --rate 2|T 1024, mem 128, c_mem 256, c 2" ;;
    fast_weights|linear)
        echo "--mixer $1 $labml --seq 1024|bench/torch_fastweights.py --mixer $1 $labml --seq 1024|T 1024" ;;
    feedback|feedback_kv)
        echo "--mixer $1 $labml --seq 256|bench/torch_feedback.py --mixer $1 $labml --seq 256|T 256" ;;
    *) echo "" ;;
    esac
}
[ -n "$ROWS" ] || ROWS=$(default_rows build/cuda/bench_model)
for m in $ROWS; do [ -n "$(row_spec "$m")" ] || { say "bench/run_cuda.sh: unknown row $m"; exit 2; }; done

run_side() { # run_side c|torch ROW REP
    local log="$BUILD/last_$1.txt"
    # shellcheck disable=SC2046,SC2086
    if [ "$1" = c ]; then
        build/cuda/bench_model --device cuda $SIZES $(row_field "$2" 1) $TF32 --steps "$STEPS" --warmup "$WARMUP" \
            --max-time "$MAX_TIME" > "$log" 2>&1
    else
        [ "$TORCH" = 1 ] || return 0
        "$PY" $(row_field "$2" 2) --device cuda $SIZES $TF32 --steps "$STEPS" --warmup "$WARMUP" --max-time "$MAX_TIME" > "$log" 2>&1
    fi
    record_result "$log" "$2" "$3" "$1" gpu_mb
}
for r in $(seq 1 "$REPS"); do
    say "== repeat $r of $REPS"
    for m in $ROWS; do
        if [ $((r % 2)) = 1 ]; then run_side c "$m" "$r"; run_side torch "$m" "$r"; else run_side torch "$m" "$r"; run_side c "$m" "$r"; fi
    done
done

# ---- the report --------------------------------------------------------------------------------
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
rep "# metaformer.h CUDA benchmark, $(date '+%Y-%m-%d %H:%M')"
rep ""
rep "Command: \`bash bench/run_cuda.sh${TF32:+ --tf32}\` (reps $REPS, steps $STEPS + $WARMUP warm-up, max $MAX_TIME s per run)."
rep "GPU: ${GPU:-unknown (no nvidia-smi)}; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs."
PREC="exact fp32 on both sides"; ALLOW=False
[ -n "$TF32" ] && { PREC="TF32 matmuls on both sides (cuBLAS and the attention kernel's tensor-core path)"; ALLOW=True; }
rep "C: $("$NVCC" --version | tail -n 1), the Makefile's NVFLAGS ($(make -s -p -n 2>/dev/null | sed -n 's/^NVFLAGS = //p' | head -n 1), CUDA_ARCH $ARCH); precision: $PREC."
[ "$TORCH" = 1 ] && rep "PyTorch: $("$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -n 1), eager, fp32 parameters, torch.backends.cuda.matmul.allow_tf32 = $ALLOW; sdpa/metric/quadratic attend through F.scaled_dot_product_attention."
rep "Config: $SIZES, dropout 0; sequence and memory lengths per row. MetaFormer mixers: learned positions, GELU; relative, compressive, fast_weights, linear, feedback: the seeds' models (no positions, ReLU FFN) against the seeds' PyTorch code."
rep "Step: forward + cross-entropy + backward + clip_grad_norm(1.0) + Adam (lr 1e-3) + zero_grad on random tokens, timed until the GPU is done (C: mf_item of the loss; torch: torch.cuda.synchronize())."
rep ""
rep "| row | config | C tok/s | torch tok/s | ratio | C TFLOP/s | C GPU MB | torch GPU MB | goal |"
rep "|---|---|---:|---:|---:|---:|---:|---:|---|"
table_row() { # ROW: its line of the table
    local m=$1 c_tok t_tok c_gf c_mb t_mb
    c_tok=$(raw_stat c "$m" tok_s median)
    t_tok=$(raw_stat torch "$m" tok_s median)
    c_gf=$(raw_stat c "$m" gflops median)
    c_mb=$(raw_stat c "$m" gpu_mb maxval)
    t_mb=$(raw_stat torch "$m" gpu_mb maxval)
    awk -v m="$m" -v cfg="$(row_field "$m" 3)" -v ct="$c_tok" -v tt="$t_tok" -v cg="$c_gf" -v cm="$c_mb" -v tm="$t_mb" \
        'function f(x, d) { return x == "" ? "-" : sprintf("%." d "f", x) }
        BEGIN {
            ratio = (ct != "" && tt != "" && tt > 0) ? ct / tt : ""
            goal = ratio == "" ? "-" : ratio >= 1 ? "met" : "NOT met"
            printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m, cfg, f(ct, 0), f(tt, 0), f(ratio, 2),
                   cg == "" ? "-" : sprintf("%.1f", cg / 1000), f(cm, 0), f(tm, 0), goal
        }'
}
table_rows table_row
rep ""
rep "tok/s: median over the runs of each side (each run: the median step). ratio = C / torch; goal (issue #8): ratio >= 1."
rep "TFLOP/s: the analytic model FLOPs of bench/bench_model.c's header (causal half of attention, backward = 2 x forward)."
rep "GPU MB: C = the most device memory the model and its steps held (cudaMemGetInfo, cuBLAS workspace included);"
rep "torch = torch.cuda.max_memory_reserved() (its caching allocator's holding; max_memory_allocated is in the raw lines)."
for n in "${NOTES[@]+"${NOTES[@]}"}"; do rep ""; rep "Note: $n"; done

# ---- the kernels alone -------------------------------------------------------------------------
verbatim() { rep '```'; "$@" 2>&1 | while IFS= read -r l; do rep "$l"; done; rep '```'; }
if [ "$ATTN" = 1 ]; then
    rep ""
    rep "## Attention: the fused kernel vs torch.nn.functional.scaled_dot_product_attention (B 4, H 8, dk 64, causal)"
    rep ""
    rep "Goal: at least PyTorch's SDPA TFLOP/s at the same precision (fp32 vs fp32, TF32 vs TF32). FLOPs as FlashAttention counts them."
    verbatim build/cuda/bench_attention --device cuda 4 8 64 1024 2048 4096 8192
    [ "$TORCH" = 1 ] && verbatim "$PY" bench/torch_sdpa.py --batch 4 --heads 8 --dk 64
fi
if [ "$FW_SWEEP" = 1 ]; then
    rep ""
    rep "## Fast weights: the recurrent vs the chunkwise kernel (forward + backward; goal: chunkwise >= 5x recurrent at T = 4096)"
    rep ""
    verbatim build/cuda/bench_fw_sweep --device cuda
fi
rep ""
rep "## Raw runs"
rep ""
rep '```'
while IFS= read -r l; do rep "$l"; done < "$RAW"
rep '```'
T_END=$(date +%s)
rep ""
if [ "$ALL_MET" = 1 ]; then rep "Goal met by every row."; else rep "Goal NOT met by every row (see the goal column)."; fi
rep "Runtime of this benchmark: $((T_END - T_START)) s."
cp "$REPORT" "$OUT"
say ""
say "report: $OUT"
