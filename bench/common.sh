# bench/common.sh - the shell helpers bench/run.sh (CPU) and bench/run_cuda.sh (GPU) share.
# Source it before parsing the options; rep() appends to $REPORT (set it before the first rep).
# The script defines row_spec ROW (its benchmark rows), which row_field and default_rows read;
# record_result appends to $RAW (the raw RESULT lines), raw_stat reads it.
say() { printf '%s\n' "$*"; }
rep() { printf '%s\n' "$*" >> "$REPORT"; printf '%s\n' "$*"; }   # to the report and the terminal
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }                        # RESULT lines -> values
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print ""; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
maxval() { sort -g | tail -n 1; }
relabel() { sed "s/ mixer=[^ ]* / mixer=$1 /"; }  # a RESULT line renamed to its row (compressive runs --mixer relative)

# record_result LOG ROW REP LABEL MEM_FIELD: a run's RESULT line (in its LOG), relabelled ROW, goes to
# $RAW as "rep=REP ..." and a line "LABEL ROW: tok/s, MEM_FIELD MB" to the terminal; without one, FAILED
# and the log's last lines
record_result() {
    local line; line=$(grep '^RESULT' "$1" | relabel "$2")
    if [ -n "$line" ]; then echo "rep=$3 $line" >> "$RAW"; say "   $4 $2: $(echo "$line" | field tok_s) tok/s, $(echo "$line" | field "$5") MB";
    else say "   $4 $2: FAILED"; sed 's/^/      /' "$1" | tail -n 5; fi
}
# raw_stat IMPL ROW FIELD REDUCE...: FIELD of the $RAW lines of IMPL (c or torch) on ROW, through the
# command REDUCE (median, maxval, head -n 1)
raw_stat() { grep "impl=$1 mixer=$2 " "$RAW" | field "$3" | "${@:4}"; }
# table_rows ROW_FN: the report table's line of each of $ROWS, as `ROW_FN ROW` prints it; ALL_MET=1
# when every row's goal column says met (not "NOT met", not "-")
table_rows() {
    local m row
    ALL_MET=1
    for m in $ROWS; do
        row=$("$1" "$m")
        rep "$row"
        case "$row" in *"NOT met"*|*"| - |") ALL_MET=0 ;; esac
    done
}

# parse_args OWN "$@": the options both scripts take (setting ROWS, REPS, STEPS, WARMUP, MAX_TIME,
# FW_SWEEP, OUT, BUILD_ONLY; --help prints the script's header comment); any other option goes to
# the script's function OWN "$@", which sets ARG_USED to the arguments it took (1 or 2; 0: unknown).
parse_args() {
    local own=$1 prog
    prog=$(basename "$0")
    shift
    while [ $# -gt 0 ]; do
        ARG_USED=1
        case "$1" in
        --rows|--mixers) ROWS=${2-}; ARG_USED=2 ;;
        --reps) REPS=${2-}; ARG_USED=2 ;;
        --steps) STEPS=${2-}; ARG_USED=2 ;;
        --warmup) WARMUP=${2-}; ARG_USED=2 ;;
        --max-time) MAX_TIME=${2-}; ARG_USED=2 ;;
        --no-fw-sweep) FW_SWEEP=0 ;;
        --out) OUT=${2-}; ARG_USED=2 ;;
        --build-only) BUILD_ONLY=1 ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
        *) ARG_USED=0; "$own" "$@"
           [ "$ARG_USED" -gt 0 ] || { echo "bench/$prog: unknown option $1 (see --help)" >&2; exit 2; } ;;
        esac
        [ "$ARG_USED" -le $# ] || { echo "bench/$prog: option $1 needs a value" >&2; exit 2; }
        shift "$ARG_USED"
    done
}

# row_field ROW N: field N of the script's row_spec ROW ("|"-separated)
row_field() { row_spec "$1" | cut -d'|' -f"$2"; }

# default_rows BENCH_MODEL: the rows of every mixer the built bench_model has (the library's names,
# `bench_model --list-mixers`), with compressive (relative + compressed memories) after relative;
# a mixer without a row in row_spec is left out with a note
default_rows() {
    local m r rows=""
    for m in $("$1" --list-mixers); do
        for r in "$m" $([ "$m" = relative ] && echo compressive); do
            if [ -n "$(row_spec "$r")" ]; then rows="$rows${rows:+ }$r"
            else say "note: mixer $r has no benchmark row yet (add it to row_spec in $0)" >&2; fi
        done
    done
    printf '%s\n' "$rows"
}
