#!/usr/bin/env bash
# bench/ab.sh - `make bench-ab`: an A/B of two versions of metaformer.h on make bench's model rows.
# Both bench_model builds run interleaved (A B, then B A, ...) in one invocation, so a noisy or
# shared machine slows both alike; the table gives each side's median tok/s and B / A.
#
#   bash bench/ab.sh                         A = the committed header (git:HEAD), B = the working tree
#   bash bench/ab.sh --a git:main --b path/to/metaformer.h --rows "sdpa relative" --reps 7
# Options:
#   --a SPEC, --b SPEC     git:REV (metaformer.h at that revision) or a file path [A git:HEAD, B metaformer.h]
#   --rows "a b"           rows of bench/cpu_rows.sh (default: sdpa identity relative fast_weights
#                          feedback_kv small)
#   --reps N [5]  --steps N [6]  --warmup N [2]  --max-time S [10]  --threads N [2]
#   --extra "FLAGS"        more bench_model flags for every run (e.g. "--batch 4")
#   --out FILE             also append the table to FILE
# Needs only gcc with OpenMP. The C runs use libgomp's default wait policy, as make bench does.
set -u
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=bench/common.sh
. bench/common.sh
# shellcheck source=bench/cpu_rows.sh
. bench/cpu_rows.sh
A=git:HEAD; B=metaformer.h; ROWS="sdpa identity relative fast_weights feedback_kv small"
REPS=5; STEPS=6; WARMUP=2; MAX_TIME=10; THREADS=2; EXTRA=""; OUT=""; BUILD_ONLY=0
# shellcheck disable=SC2034 # parse_args sets FW_SWEEP (--no-fw-sweep); unused here
FW_SWEEP=0
own_option() {
    case "$1" in
    --a) A=${2-}; ARG_USED=2 ;;
    --b) B=${2-}; ARG_USED=2 ;;
    --threads) THREADS=${2-}; ARG_USED=2 ;;
    --extra) EXTRA=${2-}; ARG_USED=2 ;;
    esac
}
parse_args own_option "$@"
for m in $ROWS; do [ -n "$(row_spec "$m")" ] || { echo "bench/ab.sh: unknown row $m (see bench/cpu_rows.sh)" >&2; exit 2; }; done
BUILD=build/bench_ab
mkdir -p "$BUILD"

# stage SIDE SPEC: SPEC's metaformer.h into $BUILD/SIDE/, built into $BUILD/SIDE/bench_model
stage() {
    local dir="$BUILD/$1"
    rm -rf "$dir"; mkdir -p "$dir"
    case "$2" in
    git:*) git show "${2#git:}:metaformer.h" > "$dir/metaformer.h" ||
               { echo "bench/ab.sh: cannot read metaformer.h at git revision ${2#git:}" >&2; exit 1; } ;;
    *) cp "$2" "$dir/metaformer.h" || { echo "bench/ab.sh: cannot read $2" >&2; exit 1; } ;;
    esac
    say "== building $1 = $2 ($(sha1sum "$dir/metaformer.h" | cut -c1-12))"
    ${CC:-gcc} -O3 -march=native -fopenmp -I"$dir" bench/bench_model.c -o "$dir/bench_model" -lm ||
        { echo "bench/ab.sh: the build of $1 ($2) failed" >&2; exit 1; }
}
stage a "$A"
stage b "$B"
[ "$BUILD_ONLY" = 1 ] && exit 0

RAW="$BUILD/raw.txt"; : > "$RAW"
run_side() { # run_side SIDE ROW REP
    # shellcheck disable=SC2046,SC2086
    env -u OMP_WAIT_POLICY OMP_NUM_THREADS="$THREADS" "$BUILD/$1/bench_model" $(row_field "$2" 1) $EXTRA \
        --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" --max-time "$MAX_TIME" > "$BUILD/last_$1.txt" 2>&1
    grep '^RESULT' "$BUILD/last_$1.txt" | relabel "$2" | sed "s/^RESULT impl=c /RESULT impl=$1 /;s/^/rep=$3 /" >> "$RAW"
    grep -q '^RESULT' "$BUILD/last_$1.txt" || { say "   $1 $2: FAILED"; tail -n 5 "$BUILD/last_$1.txt"; }
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$REPS"); do
    for m in $ROWS; do
        if [ $((r % 2)) = 1 ]; then run_side a "$m" "$r"; run_side b "$m" "$r"
        else run_side b "$m" "$r"; run_side a "$m" "$r"; fi
    done
    say "   repeat $r of $REPS done"
done

table() {
    echo "A/B: A = $A, B = $B; $REPS interleaved repeats, $STEPS timed steps each, $THREADS threads; load average $LOAD_BEFORE before, $(cut -d' ' -f1-3 /proc/loadavg) after"
    echo
    echo "| row | A tok/s | B tok/s | B / A | B / A per repeat |"
    echo "|---|---:|---:|---:|---|"
    for m in $ROWS; do
        local ta tb per="" r x y
        ta=$(raw_stat a "$m" tok_s median); tb=$(raw_stat b "$m" tok_s median)
        for r in $(seq 1 "$REPS"); do
            x=$(grep "^rep=$r RESULT impl=a mixer=$m " "$RAW" | field tok_s)
            y=$(grep "^rep=$r RESULT impl=b mixer=$m " "$RAW" | field tok_s)
            [ -n "$x" ] && [ -n "$y" ] && per="$per $(awk -v a="$x" -v b="$y" 'BEGIN {printf "%.3f", b / a}')"
        done
        echo "| $m | ${ta:--} | ${tb:--} | $( [ -n "$ta" ] && [ -n "$tb" ] && awk -v a="$ta" -v b="$tb" 'BEGIN {printf "%.3f", b / a}' || echo -) |$per |"
    done
}
table | tee -a "${OUT:-/dev/null}"
