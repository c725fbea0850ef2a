#!/usr/bin/env bash
# make bench-dist: data-parallel training on this machine, 2 ranks x 1 thread (build/train-mpi under
# mpirun) against 1 process x 2 threads (build/train) on the same global batch, for every model:
# tokens/s, the time the ranks wait in mf_dist_sync for the gradient averages, and the share of the
# communication hidden behind the backward (1 - the wait with overlap / the wait with --no-overlap,
# where every average runs after the backward), peak memory per process. The three runs of a model
# go one after the other, for REPS rounds, so that a busy machine slows them alike; each value is
# the median over the rounds. The report: bench/results/dist_<date>.md (--out FILE).
#   bench/dist.sh [--reps N] [--steps N] [--rows "sdpa metric ..."] [--out FILE]
# The corpus is the project's own text (README.md, docs/math.md, metaformer.h): any text does, the
# speed does not depend on it.
set -u
cd "$(dirname "$0")/.."
REPS=3; STEPS=12; ROWS=""; OUT="bench/results/dist_$(date +%Y-%m-%d).md"
while [ $# -gt 0 ]; do
    case "$1" in
    --reps) REPS=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --rows) ROWS=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "bench/dist.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
command -v mpirun > /dev/null || { echo "bench/dist.sh: mpirun is missing (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
make -s build/train build/train-mpi || exit 1
BUILD=build/bench_dist; mkdir -p "$BUILD"
mpicc -std=c99 -O2 bench/bench_allreduce.c -o "$BUILD/bench_allreduce" || exit 1
cat README.md docs/math.md metaformer.h > "$BUILD/corpus.txt"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} # idle OpenMP threads sleep: a shared machine slows both sides alike
MPIRUN=(mpirun --oversubscribe $([ "$(id -u)" -eq 0 ] && echo --allow-run-as-root) --bind-to none)
[ -n "$ROWS" ] || ROWS="$(build/train --list-mixers | sed 's/^relative$/relative compressive/' | tr '\n' ' ')"
# the models of bench/run.sh's table: d_model 256, 8 heads, 4 layers, d_ff 1024; a global batch of 16
BASE=(--d-model 256 --heads 8 --layers 4 --d-ff 1024 --steps "$STEPS" --warmup 1 --eval-every 0 --eval-batches 1
      --sample 0 --log-every 1000 --save-every 0)
row_args() {
    case $1 in
    relative) echo "--mixer relative --mem-len 64 --seq-len 64 --pos none" ;;
    compressive) echo "--mixer relative --compressive --mem-len 32 --c-mem-len 64 --compression-rate 2 --seq-len 32 --pos none" ;;
    feedback|feedback_kv) echo "--mixer $1 --seq-len 64" ;;
    *) echo "--mixer $1 --seq-len 128" ;;
    esac
}
field() { sed -n "s/$1/\1/p" "$2" | head -n 1; }
tok_s() { field '^trained .*(\([0-9.]*\) tokens\/s).*' "$1"; }
wait_s() { field '^ranks: [0-9]*, \([0-9.]*\) s of the.*' "$1"; }
train_s() { field '^ranks: [0-9]*, [0-9.]* s of the \([0-9.]*\) s of training.*' "$1"; }
params() { field '^model: .*, \([0-9]*\) parameters$' "$1"; }
peak_mb() { awk '/Maximum resident set size/ { if ($NF > m) m = $NF } END { printf "%.0f", m / 1024 }' "$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# the cost model's link: alpha from a 1-float all-reduce, beta from one 4 MiB bucket's (2 ranks: the
# ring sends the whole buffer once each way, so beta is the all-reduce's bytes / time)
"${MPIRUN[@]}" -np 2 "$BUILD/bench_allreduce" > "$BUILD/allreduce.txt" || exit 1
ALPHA_MS=$(sed -n 's/^RESULT floats=1 .*best_ms=\([^ ]*\).*/\1/p' "$BUILD/allreduce.txt")
BETA_GBS=$(sed -n 's/^RESULT floats=1048576 .*gb_s=\([^ ]*\).*/\1/p' "$BUILD/allreduce.txt")
RAW="$BUILD/raw.txt"; : > "$RAW"
for rep in $(seq "$REPS"); do
    for m in $ROWS; do
        # shellcheck disable=SC2046
        args=($(row_args "$m"))
        /usr/bin/time -v build/train "$BUILD/corpus.txt" "${BASE[@]}" "${args[@]}" --batch 16 --threads 2 > "$BUILD/one.out" 2> "$BUILD/one.time"
        rm -f "$BUILD"/rank.time.*
        # each rank under its own `time` (its file named by the rank Open MPI gives it)
        "${MPIRUN[@]}" -np 2 sh -c '/usr/bin/time -v -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$BUILD/rank.time" \
            build/train-mpi "$BUILD/corpus.txt" "${BASE[@]}" "${args[@]}" --batch 8 --threads 1 > "$BUILD/two.out" 2>&1
        "${MPIRUN[@]}" -np 2 build/train-mpi "$BUILD/corpus.txt" "${BASE[@]}" "${args[@]}" --batch 8 --threads 1 --no-overlap > "$BUILD/seq.out" 2>&1
        line="rep=$rep row=$m params=$(params "$BUILD/one.out") one_tok_s=$(tok_s "$BUILD/one.out") two_tok_s=$(tok_s "$BUILD/two.out")"
        line="$line two_train_s=$(train_s "$BUILD/two.out") two_wait_s=$(wait_s "$BUILD/two.out") seq_wait_s=$(wait_s "$BUILD/seq.out")"
        line="$line seq_tok_s=$(tok_s "$BUILD/seq.out") one_mb=$(peak_mb "$BUILD/one.time")"
        line="$line rank_mb=$(cat "$BUILD"/rank.time.* | peak_mb /dev/stdin)"
        echo "$line" | tee -a "$RAW"
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

stat() { grep " row=$1 " "$RAW" | sed -n "s/.* $2=\([^ ]*\).*/\1/p" | median; }
{
    echo "# Data-parallel training on this machine: 2 ranks x 1 thread vs 1 process x 2 threads, $(date '+%Y-%m-%d %H:%M')"
    echo
    echo "Command: \`bash bench/dist.sh --reps $REPS --steps $STEPS\` (make bench-dist)."
    echo "Machine: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), $(nproc) CPUs; load average $load_before before, $load_after after"
    echo "(other jobs may share this machine: the three runs of a model alternate, medians over $REPS rounds)."
    echo "MPI: $(mpirun --version 2>&1 | head -n 1), shared-memory transport between the 2 ranks of one machine."
    echo "Config: d_model 256, 8 heads, 4 layers, d_ff 1024, dropout 0; T 128 (MetaFormer mixers, fast_weights, linear), 64"
    echo "(feedback, relative with 64 memories), 32 (compressive: 32 memories, 64 compressed, rate 2); a global batch of 16"
    echo "windows: \`build/train --batch 16 --threads 2\` against \`mpirun -np 2 build/train-mpi --batch 8 --threads 1\`; $STEPS steps"
    echo "(the first included), Adam, clip 1. Gradient buckets of 2^20 floats (4 MiB), averaged during the backward."
    echo
    echo "Link, measured by bench/bench_allreduce.c in this run (best of 20): alpha $ALPHA_MS ms (1 float), beta $BETA_GBS GB/s"
    echo "(one 4 MiB bucket); every size:"
    echo
    echo '```'
    cat "$BUILD/allreduce.txt"
    echo '```'
    echo
    echo "| model | parameters | 1 x 2 threads tok/s | 2 x 1 thread tok/s | 2 ranks / 1 process | cost model: all-reduce per step | wait in sync, overlap (% of step) | wait, --no-overlap (% of step) | hidden | peak MB 1 process | peak MB per rank |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for m in $ROWS; do
        one=$(stat "$m" one_tok_s); two=$(stat "$m" two_tok_s); ts=$(stat "$m" two_train_s)
        w=$(stat "$m" two_wait_s); ws=$(stat "$m" seq_wait_s); seq=$(stat "$m" seq_tok_s)
        awk -v m="$m" -v p="$(stat "$m" params)" -v one="$one" -v two="$two" -v ts="$ts" -v w="$w" -v ws="$ws" -v seq="$seq" \
            -v mb1="$(stat "$m" one_mb)" -v mb2="$(stat "$m" rank_mb)" -v steps="$STEPS" -v alpha="$ALPHA_MS" -v beta="$BETA_GBS" 'BEGIN {
            k = int((p + 1048575) / 1048576); model = 2 * k * alpha + 4 * p / (beta * 1e6) # ms, w = 2
            step = ts / steps; seqstep = (two * ts / seq) / steps; hidden = "-"
            if (ws > 0) hidden = sprintf("%.0f%%", 100 * (1 - w / ws))
            printf "| %s | %d | %.0f | %.0f | %.2f | %.2f ms | %.1f ms (%.1f%%) | %.1f ms (%.1f%%) | %s | %s | %s |\n", m, p, one, two, two / one, model,
                1000 * w / steps, 100 * w / ts, 1000 * ws / steps, 100 * (ws / steps) / seqstep,
                hidden, mb1, mb2 }'
    done
    echo
    echo "tok/s: the global tokens of the timed steps over their time (\`trained ... tokens/s\`). wait in sync: the time a rank"
    echo "spends in mf_dist_sync after its backward (the gradient averages not yet done, and waiting for the slower rank),"
    echo "per step; with --no-overlap every average runs there, so that wait is the whole communication; hidden = 1 - wait"
    echo "with overlap / wait without. Peak MB: the maximum resident set of the process (of each rank: the larger)."
    echo "cost model (docs/distributed.md, docs/math.md §18.9): 2 (w - 1) k alpha + 2 (w - 1) / w * 4 P / beta with w = 2, k buckets of 2^20"
    echo "floats, alpha and beta measured above: the all-reduce time alone. The waits measured in mf_dist_sync are larger"
    echo "where one rank finishes its backward later than the other (the wait holds that difference: on a machine shared with"
    echo "other work the ranks are not scheduled alike), so compare the model with the smallest waits."
    echo
    echo "## Raw runs"
    echo
    echo '```'
    cat "$RAW"
    echo '```'
} > "$OUT"
echo "report: $OUT"
