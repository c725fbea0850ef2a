#!/usr/bin/env bash
# bench/run_cuda.sh - `make bench-cuda`: on an NVIDIA GPU, a training step of every mixer and memory
# model, metaformer.h's CUDA backend (build/cuda/bench_model --device cuda) against PyTorch eager on
# the same GPU (bench/torch_*.py --device cuda, torch 2.x), side by side in one invocation, at each
# precision asked for; then the fused attention kernel against torch's scaled_dot_product_attention
# (T = 1024 .. 8192, dk 64) and the fast-weights chunkwise kernel against the recurrent one
# (T = 1024 .. 4096). Writes the report to bench/results/cuda_<date>.md (build/bench_cuda/ keeps the
# raw RESULT lines, one file per precision, and the run logs). `make gpu-report` (bench/gpu_report.sh)
# runs each part of it under its own time limit.
#
# Options (or the environment variables in brackets):
#   --precision LIST [BENCH_PRECISION=fp32]  fp32, tf32, bf16 (comma or space separated): both sides at
#                                  each; fp32 and bf16 (the goals) row by row, tf32 after them. fp32: exact float32; tf32: matmuls on
#                                  the TF32 tensor cores; bf16: C mf_cuda_set_precision(MF_PREC_BF16),
#                                  torch fp32 parameters + torch.autocast(dtype=torch.bfloat16).
#                                  --tf32 = --precision tf32
#   --parts LIST                   models, attention, fw-sweep (default all three; --no-attention and
#                                  --no-fw-sweep drop one)
#   --rows "a b" [BENCH_ROWS]      rows (see row_spec), default: every mixer of the library
#                                  (build/cuda/bench_model --list-mixers) and compressive
#   --reps N [BENCH_REPS=1]        C / torch runs per row, interleaved (a GPU is quiet: 1 is enough)
#   --steps N [BENCH_STEPS=10] --warmup N [BENCH_WARMUP=3] --max-time S [BENCH_MAX_TIME=20]
#   --profile N [BENCH_PROFILE=2]  after its timed steps each fp32 and bf16 C run takes N steps under
#                                  the op profiler (mf_set_profile): the time per kind of op in the
#                                  report (where the GPU's time goes: GEMM, attention, LayerNorm, ...);
#                                  0: none
#   --deadline S                   start no model run S seconds after this script started (the rest
#                                  is listed as not run); each run is also stopped after max-time + 30 s
#   --goals FILE                   append the part's goals, checked, as Markdown table rows
#                                  "| goal | met / NOT met / not measured | numbers |"
#   --out FILE   --build-only      [PYTHON=python3] [NVCC=nvcc] [CUDA_ARCH="-gencode ..."]
#   --no-build                     run the binaries already under build/cuda/ (make gpu-prep's, on a
#                                  GPU machine without the time to compile): nothing is compiled
# Exit status 1 when the build failed, there is no GPU, or a run or a kernel benchmark gave no result
# (the report is written all the same and names them).
# GPU config: d_model 512, heads 8, layers 6, d_ff 2048, batch 16, vocab 65; seq_len 1024
# (softmax family, simple mixers, fast weights), 256 (feedback); XL memories the CPU bench's x 4.
set -u
cd "$(dirname "$0")/.." || exit 1

ROWS=${BENCH_ROWS:-}   # empty: default_rows, after the build
REPS=${BENCH_REPS:-1}
STEPS=${BENCH_STEPS:-10}
WARMUP=${BENCH_WARMUP:-3}
MAX_TIME=${BENCH_MAX_TIME:-20}
PROFILE=${BENCH_PROFILE:-2}
PRECS=${BENCH_PRECISION:-fp32}
PARTS="models attention fw-sweep"
ATTN=1
FW_SWEEP=1
DEADLINE=0
GOALS=""
OUT=""
BUILD_ONLY=0
NO_BUILD=0
PY=${PYTHON:-python3}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ARCH=${CUDA_ARCH:-"-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"}
# shellcheck source=bench/common.sh
. bench/common.sh
own_option() { # the options of this script (the shared ones: parse_args in bench/common.sh)
    case "$1" in
    --tf32) PRECS=tf32; ARG_USED=1 ;;
    --precision) PRECS=${2-}; ARG_USED=2 ;;
    --parts) PARTS=${2-}; ARG_USED=2 ;;
    --deadline) DEADLINE=${2-}; ARG_USED=2 ;;
    --profile) PROFILE=${2-}; ARG_USED=2 ;;
    --goals) GOALS=${2-}; ARG_USED=2 ;;
    --no-attention) ATTN=0; ARG_USED=1 ;;
    --no-build) NO_BUILD=1; ARG_USED=1 ;;
    esac
}
parse_args own_option "$@"
PRECS=$(echo "$PRECS" | tr ',' ' ' | xargs)
PARTS=$(echo "$PARTS" | tr ',' ' ' | xargs)
for p in $PRECS; do
    case "$p" in fp32|tf32|bf16) ;; *) say "bench/run_cuda.sh: --precision $p: fp32, tf32 or bf16"; exit 2 ;; esac
done
for part in $PARTS; do
    case "$part" in models|attention|fw-sweep) ;; *) say "bench/run_cuda.sh: --parts $part: models, attention or fw-sweep"; exit 2 ;; esac
done
PRECS_LIST=${PRECS// /,}   # for the programs' --precision lists
in_list() { case " $2 " in *" $1 "*) return 0 ;; esac; return 1; }
has_prec() { in_list "$1" "$PRECS"; }
MODELS=0; in_list models "$PARTS" && MODELS=1
in_list attention "$PARTS" || ATTN=0
in_list fw-sweep "$PARTS" || FW_SWEEP=0

T_START=$(date +%s)
BUILD=build/bench_cuda
mkdir -p "$BUILD" bench/results
[ -n "$OUT" ] || OUT="bench/results/cuda_$(date +%Y-%m-%d)$([ "$PRECS" != fp32 ] && echo "_${PRECS// /_}").md"
REPORT="$BUILD/report.md"; : > "$REPORT"
raw_of() { echo "$BUILD/raw_$1.txt"; }   # the RESULT lines of one precision
for p in $PRECS; do : > "$(raw_of "$p")"; done
OPS="$BUILD/ops.txt"; : > "$OPS"   # the C runs' per-kind times: "ROW PRECISION kind=K fwd_ms=F bwd_ms=B"
# goal NAME STATUS NUMBERS: one checked goal, in the report (and in --goals FILE)
goal() {
    rep "- $1: **$2** ($3)"
    [ -z "$GOALS" ] || printf '| %s | %s | %s |\n' "$1" "$2" "$3" >> "$GOALS"
}

# ---- build -------------------------------------------------------------------------------------
BINS="build/cuda/bench_model build/cuda/bench_attention build/cuda/bench_fw_sweep build/cuda/bench_reduce"
if [ "$NO_BUILD" = 1 ]; then
    for b in $BINS; do [ -x "$b" ] || { say "bench/run_cuda.sh --no-build: $b is missing (make gpu-prep builds it)"; exit 1; }; done
else
    [ -x "$NVCC" ] || { say "make bench-cuda: nvcc not found (set NVCC=...): the CUDA benchmark needs the CUDA compiler"; exit 1; }
    say "== building $BINS (nvcc)"
    # shellcheck disable=SC2086
    make -s NVCC="$NVCC" CUDA_ARCH="$ARCH" $BINS || { say "build failed"; exit 1; }
fi
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

# each run stops after max-time + 30 s, each kernel sweep after BENCH_KERNEL_LIMIT s (--foreground:
# a timeout around this script stops them too)
RUN_LIMIT=$(awk -v t="$MAX_TIME" 'BEGIN { printf "%d", t + 30 }')
KERNEL_LIMIT=${BENCH_KERNEL_LIMIT:-180}
past_deadline() { [ "$DEADLINE" -gt 0 ] && [ $(($(date +%s) - T_START)) -ge "$DEADLINE" ]; }
NOT_RUN=""; FAILED=""
: > "$BUILD/failed.txt"
run_side() { # run_side c|torch ROW REP PRECISION
    local log="$BUILD/last_$1.txt"
    if past_deadline; then NOT_RUN="$NOT_RUN $1:$2/$4"; return 0; fi
    # shellcheck disable=SC2046,SC2086
    if [ "$1" = c ]; then
        timeout --foreground "$RUN_LIMIT" build/cuda/bench_model --device cuda $SIZES $(row_field "$2" 1) --precision "$4" \
            --steps "$STEPS" --warmup "$WARMUP" --max-time "$MAX_TIME" --profile "$([ "$4" = tf32 ] && echo 0 || echo "$PROFILE")" \
            > "$log" 2>&1
        sed -n "s/^OPS impl=c mixer=[^ ]* /$2 $4 /p" "$log" >> "$OPS"
    else
        [ "$TORCH" = 1 ] || return 0
        timeout --foreground "$RUN_LIMIT" "$PY" $(row_field "$2" 2) --device cuda $SIZES --precision "$4" --steps "$STEPS" \
            --warmup "$WARMUP" --max-time "$MAX_TIME" > "$log" 2>&1
    fi
    RAW=$(raw_of "$4") record_result "$log" "$2" "$3" "$1 $4" gpu_mb
    # a run without a result: its last lines go into the report
    grep -q '^RESULT' "$log" || { FAILED="$FAILED $1:$2/$4"; tail -n 4 "$log" | sed "s|^|$1 $2 $4: |" >> "$BUILD/failed.txt"; }
}
# the precisions with a goal (fp32 and bf16 at least PyTorch's speed); tf32 alone: tf32
GOAL_PRECS=""
for p in fp32 bf16; do has_prec "$p" && GOAL_PRECS="$GOAL_PRECS $p"; done
[ -n "$GOAL_PRECS" ] || GOAL_PRECS=$PRECS
OTHER_PRECS=""
for p in $PRECS; do in_list "$p" "$GOAL_PRECS" || OTHER_PRECS="$OTHER_PRECS $p"; done
run_pair() { # ROW REP PRECISION: C and torch, in turns which first
    if [ $(($2 % 2)) = 1 ]; then run_side c "$1" "$2" "$3"; run_side torch "$1" "$2" "$3"
    else run_side torch "$1" "$2" "$3"; run_side c "$1" "$2" "$3"; fi
}
if [ "$MODELS" = 1 ]; then
    for r in $(seq 1 "$REPS"); do
        say "== repeat $r of $REPS"
        # the goal precisions row by row (a deadline leaves whole rows out, the first row - sdpa,
        # whose memory has a goal too - never), then the others over every row
        for m in $ROWS; do for p in $GOAL_PRECS; do run_pair "$m" "$r" "$p"; done; done
        for p in $OTHER_PRECS; do for m in $ROWS; do run_pair "$m" "$r" "$p"; done; done
    done
fi
[ -z "$FAILED" ] || NOTES+=("these runs gave no result (failed, or stopped after $RUN_LIMIT s):$FAILED; their last lines are under Failed runs below.")
[ -z "$NOT_RUN" ] || NOTES+=("the deadline (--deadline $DEADLINE s) left these runs out (side:row/precision):$NOT_RUN.")

# ---- the report --------------------------------------------------------------------------------
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
rep "# metaformer.h CUDA benchmark, $(date '+%Y-%m-%d %H:%M')"
rep ""
rep "Command: \`bash bench/run_cuda.sh --precision $PRECS_LIST --parts ${PARTS// /,}\` (reps $REPS, steps $STEPS + $WARMUP warm-up, max $MAX_TIME s per run)."
rep "GPU: ${GPU:-unknown (no nvidia-smi)}; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs."
if [ "$NO_BUILD" = 1 ]; then
    rep "C: prebuilt by make gpu-prep ($(grep -E '^(commit|nvcc|NVFLAGS):' "${GPU_PREP:-build/gpu-prep}/MANIFEST.txt" 2> /dev/null | tr '\n' ';' | sed 's/;$//'))."
else
    rep "C: $("$NVCC" --version | tail -n 1), the Makefile's NVFLAGS ($(make -s print-NVFLAGS), CUDA_ARCH $ARCH)."
fi
[ "$TORCH" = 1 ] && rep "PyTorch: $("$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -n 1), eager; sdpa/metric/quadratic attend through F.scaled_dot_product_attention (PyTorch's choice of kernel: for bf16 its flash or cuDNN one)."
rep "Precisions: fp32 = exact float32 on both sides; tf32 = matmuls (and the C attention kernels' tiles) on the TF32 tensor cores, fp32 accumulation; bf16 = C mf_cuda_set_precision(MF_PREC_BF16) (fp32 master weights and Adam, bf16 GEMM operands, fp32 accumulation), torch fp32 parameters and Adam with the forward and the loss under torch.autocast(dtype=torch.bfloat16)."

if [ "$MODELS" = 1 ]; then
rep "Config: $SIZES, dropout 0; sequence and memory lengths per row. MetaFormer mixers: learned positions, GELU; relative, compressive, fast_weights, linear, feedback: the seeds' models (no positions, ReLU FFN) against the seeds' PyTorch code."
rep "Step: forward + cross-entropy + backward + clip_grad_norm(1.0) + Adam (lr 1e-3) + zero_grad on random tokens, timed until the GPU is done (C: mf_item of the loss, host clock; torch: CUDA events around the step)."
rep ""
hdr="| row | config |"; sep="|---|---|"
for p in $PRECS; do hdr="$hdr $p C tok/s | $p torch tok/s | $p ratio |"; sep="$sep---:|---:|---:|"; done
rep "$hdr goal |"
rep "$sep---|"
ratio_of() { # PRECISION ROW: C tok/s / torch tok/s, or nothing
    local c t
    c=$(RAW=$(raw_of "$1") raw_stat c "$2" tok_s median)
    t=$(RAW=$(raw_of "$1") raw_stat torch "$2" tok_s median)
    awk -v c="$c" -v t="$t" 'BEGIN { if (c != "" && t != "" && t > 0) printf "%.3f", c / t }'
}
table_row() { # ROW: its line of the throughput table
    local m=$1 line p c t r goal="met"
    line="| $m | $(row_field "$m" 3) |"
    for p in $PRECS; do
        c=$(RAW=$(raw_of "$p") raw_stat c "$m" tok_s median)
        t=$(RAW=$(raw_of "$p") raw_stat torch "$m" tok_s median)
        r=$(ratio_of "$p" "$m")
        line="$line $(awk -v x="$c" 'BEGIN { print x == "" ? "-" : sprintf("%.0f", x) }') | $(awk -v x="$t" 'BEGIN { print x == "" ? "-" : sprintf("%.0f", x) }') | ${r:--} |"
    done
    for p in $GOAL_PRECS; do
        r=$(ratio_of "$p" "$m")
        if [ -z "$r" ]; then goal="-"; break; fi
        awk -v r="$r" 'BEGIN { exit !(r < 1) }' && goal="NOT met"
    done
    echo "$line $goal |"
}
table_rows table_row
rep ""
rep "tok/s: median over the runs of each side (each run: the median step). ratio = C / torch; goal: ratio >= 1 at$GOAL_PRECS."
rep ""
rep "Peak GPU memory (MB). C: the most device memory the model and its timed steps held (the drop of cudaMemGetInfo's free memory; cuBLAS's workspace included; after the warm-up, whose first step sizes the arena). torch: max_memory_allocated (its tensors) / max_memory_reserved (its caching allocator's holding)."
rep ""
hdr="| row |"; sep="|---|"
for p in $PRECS; do hdr="$hdr $p C | $p torch alloc / reserved |"; sep="$sep---:|---:|"; done
has_prec fp32 && has_prec bf16 && { hdr="$hdr C bf16 / fp32 | torch bf16 / fp32 (alloc) |"; sep="$sep---:|---:|"; }
rep "$hdr"
rep "$sep"
mem_ratio() { # IMPL ROW FIELD: bf16 / fp32 of FIELD's largest value, or -
    local a b
    a=$(RAW=$(raw_of bf16) raw_stat "$1" "$2" "$3" maxval)
    b=$(RAW=$(raw_of fp32) raw_stat "$1" "$2" "$3" maxval)
    awk -v a="$a" -v b="$b" 'BEGIN { print (a != "" && b != "" && b > 0) ? sprintf("%.2f", a / b) : "-" }'
}
for m in $ROWS; do
    line="| $m |"
    for p in $PRECS; do
        c=$(RAW=$(raw_of "$p") raw_stat c "$m" gpu_mb maxval)
        ta=$(RAW=$(raw_of "$p") raw_stat torch "$m" gpu_alloc_mb maxval)
        tr=$(RAW=$(raw_of "$p") raw_stat torch "$m" gpu_mb maxval)
        line="$line ${c:--} | ${ta:--} / ${tr:--} |"
    done
    has_prec fp32 && has_prec bf16 && line="$line $(mem_ratio c "$m" gpu_mb) | $(mem_ratio torch "$m" gpu_alloc_mb) |"
    rep "$line"
done
rep ""
rep "### Goals (models)"
rep ""
for p in fp32 bf16; do
    has_prec "$p" || continue
    slow=""; missing=""; n=0; nr=0
    for m in $ROWS; do
        r=$(ratio_of "$p" "$m"); n=$((n + 1))
        [ -n "$r" ] || { missing="$missing $m"; continue; }
        nr=$((nr + 1))
        awk -v r="$r" 'BEGIN { exit !(r < 1) }' && slow="$slow $m ($r)"
    done
    what="$p: every model at least as fast as PyTorch eager$([ "$p" = bf16 ] && echo " with bf16 autocast")"
    if [ "$nr" = 0 ]; then goal "$what" "not measured" "no row has both sides"
    elif [ -n "$slow" ]; then goal "$what" "NOT met" "slower:$slow; $nr of $n rows measured"
    elif [ "$nr" -lt "$n" ]; then goal "$what" "met where measured" "$nr of $n rows measured; not measured:$missing"
    else goal "$what" "met" "all $n rows"; fi
done
if has_prec fp32 && has_prec bf16; then
    r=$(mem_ratio c sdpa gpu_mb)
    what="bf16 peak GPU memory at least a third below fp32 on the sdpa config (C bf16 / fp32 <= 0.67)"
    if [ "$r" = - ]; then goal "$what" "not measured" "no sdpa runs at both precisions"
    elif awk -v r="$r" 'BEGIN { exit !(r <= 2.0 / 3) }'; then goal "$what" "met" "ratio $r"
    else goal "$what" "NOT met" "ratio $r"; fi
fi
if [ -s "$OPS" ]; then
    rep ""
    rep "### Where the C step's time goes (ms per step, forward + backward, by kind of op)"
    rep ""
    rep "The library's op profiler (mf_set_profile) over $PROFILE steps after each fp32 / bf16 C run's timed ones. It waits for the GPU before and after every op, so each op pays its own launch latency and the profiled step (the last column) is longer than the timed one: read the shares. gemm: cuBLAS inside the products; matmul: the rest of those ops; glue: the step's time outside the ops (the model code between them)."
    for p in $PRECS; do
        grep -q " $p kind=" "$OPS" || continue
        rep ""
        rep "$p:"
        rep ""
        awk -v p="$p" '$2 == p { split($3, k, "="); split($4, f, "="); split($5, b, "=")
                                 if (!(k[2] in seen)) { seen[k[2]] = 1; kinds[++nk] = k[2] }
                                 if (!($1 in rows)) { rows[$1] = 1; order[++nr] = $1 }
                                 ms[$1, k[2]] = f[2] + b[2] }
             END { h = "| row |"; s = "|---|"
                   for (i = 1; i <= nk; i++) { h = h " " kinds[i] " |"; s = s "---:|" }
                   print h; print s
                   for (r = 1; r <= nr; r++) { l = "| " order[r] " |"
                       for (i = 1; i <= nk; i++) l = l sprintf(" %.2f |", ms[order[r], kinds[i]])
                       print l } }' "$OPS" > "$BUILD/ops_$p.md"
        while IFS= read -r l; do rep "$l"; done < "$BUILD/ops_$p.md"
    done
fi
for n in "${NOTES[@]+"${NOTES[@]}"}"; do rep ""; rep "Note: $n"; done
if [ -s "$BUILD/failed.txt" ]; then
    rep ""
    rep "Failed runs (the last lines of each):"
    rep '```'
    while IFS= read -r l; do rep "$l"; done < "$BUILD/failed.txt"
    rep '```'
fi
fi

# ---- the kernels alone -------------------------------------------------------------------------
verbatim() { # LOG CMD...: the command's output into the report (and LOG)
    local log=$1
    shift
    rep '```'
    "$@" 2>&1 | tee "$log" | while IFS= read -r l; do rep "$l"; done
    [ "${PIPESTATUS[0]}" = 0 ] || FAILED="$FAILED $(basename "$log" .txt)"
    rep '```'
}
if [ "$ATTN" = 1 ]; then
    rep ""
    rep "## Attention: the fused kernel vs torch.nn.functional.scaled_dot_product_attention (B 4, H 8, dk 64, causal)"
    rep ""
    rep "Goal: in bf16, forward + backward at least 0.7x PyTorch's fastest SDPA kernel at T = 1024 .. 8192. FLOPs as FlashAttention counts them; peak_MB: C from cudaMemGetInfo, torch max_memory_allocated."
    verbatim "$BUILD/attention_c.txt" timeout --foreground "$KERNEL_LIMIT" build/cuda/bench_attention --device cuda --precision "$PRECS_LIST" 4 8 64 1024 2048 4096 8192
    : > "$BUILD/attention_torch.txt"
    [ "$TORCH" = 1 ] && verbatim "$BUILD/attention_torch.txt" timeout --foreground "$KERNEL_LIMIT" "$PY" bench/torch_sdpa.py --batch 4 --heads 8 --dk 64 --precision "$PRECS_LIST"
    # per (precision, T): C's fwd+bwd TFLOP/s against the fastest torch kernel's
    rep ""
    rep "| precision | T | C fwd+bwd TF/s | torch best fwd+bwd TF/s (kernel) | C / torch |"
    rep "|---|---:|---:|---:|---:|"
    awk '/^(metaformer|torch_)/ && NF >= 8 {
             key = $2 " " $3
             if (FILENAME == ARGV[1]) c[key] = $7
             else if (!(key in t) || $7 + 0 > t[key] + 0) { t[key] = $7; k[key] = substr($1, 7) }
             if (!(key in seen)) { seen[key] = 1; order[++n] = key }
         }
         END { for (i = 1; i <= n; i++) { key = order[i]; split(key, a, " ")
                   r = (key in c && key in t && t[key] > 0) ? sprintf("%.2f", c[key] / t[key]) : "-"
                   printf "| %s | %s | %s | %s | %s |\n", a[1], a[2], key in c ? c[key] : "-",
                          key in t ? t[key] " (" k[key] ")" : "-", r } }' \
        "$BUILD/attention_c.txt" "$BUILD/attention_torch.txt" > "$BUILD/attention_table.md"
    while IFS= read -r l; do rep "$l"; done < "$BUILD/attention_table.md"
    rep ""
    what="bf16 fused attention forward + backward at least 0.7x PyTorch's fastest SDPA (T 1024-8192, dk 64)"
    if has_prec bf16; then
        res=$(awk -F'|' '$2 ~ /bf16/ { n++; r = $6 + 0; if ($6 ~ /-/) miss++; else if (r < 0.7) { low++; l = l " T=" $3 + 0 " (" r ")" } }
                         END { if (n == 0 || miss == n) print "not measured|no bf16 rows"
                               else if (low) print "NOT met|below 0.7 at" l
                               else if (miss) print "met where measured|" n - miss " of " n " lengths"
                               else print "met|" n " lengths, ratios " "all >= 0.7" }' "$BUILD/attention_table.md")
        goal "$what" "${res%%|*}" "${res#*|}"
    fi
fi
if [ "$FW_SWEEP" = 1 ]; then
    rep ""
    rep "## Fast weights: the recurrent vs the chunkwise kernel (forward + backward; goal: chunkwise >= 5x recurrent at T = 4096)"
    rep ""
    for p in $PRECS; do
        [ "$p" = tf32 ] && continue   # the fast-weights kernels have no TF32 path of their own
        verbatim "$BUILD/fw_$p.txt" timeout --foreground "$KERNEL_LIMIT" build/cuda/bench_fw_sweep --device cuda --precision "$p"
        sp=$(awk '$1 == 4096 { for (i = NF; i > 0; i--) if ($i ~ /^[0-9.]+x$/) { sub(/x$/, "", $i); print $i; exit } }' "$BUILD/fw_$p.txt")
        what="$p: fast-weights chunkwise at least 5x the recurrent kernel at T = 4096"
        if [ -z "$sp" ]; then goal "$what" "not measured" "no T = 4096 line"
        elif awk -v s="$sp" 'BEGIN { exit !(s >= 5) }'; then goal "$what" "met" "${sp}x"
        else goal "$what" "NOT met" "${sp}x"; fi
    done
fi
# the column reductions ride with the kernel sweep of fast weights (one part of make gpu-report)
if [ "$FW_SWEEP" = 1 ]; then
    rep ""
    rep "## Column reductions: bias, LayerNorm gamma / beta and embedding gradients, sum_axis (ms, GB/s read)"
    rep ""
    verbatim "$BUILD/reduce.txt" timeout --foreground "$KERNEL_LIMIT" build/cuda/bench_reduce --device cuda
fi
rep ""
rep "## Raw runs"
rep ""
rep '```'
for p in $PRECS; do while IFS= read -r l; do rep "$l"; done < "$(raw_of "$p")"; done
rep '```'
T_END=$(date +%s)
rep ""
rep "Runtime of this benchmark: $((T_END - T_START)) s."
cp "$REPORT" "$OUT"
say ""
say "report: $OUT"
[ -z "$FAILED" ] || { say "failed:$FAILED"; exit 1; }
