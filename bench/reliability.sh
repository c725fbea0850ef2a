#!/usr/bin/env bash
# bench/reliability.sh - the reliability report: bench/results/reliability_<date>.md
# (`make reliability`).
#
#   bash bench/reliability.sh           run the reliability tests found by name (kill during save,
#                                       resume of every model, non-finite values and memory caps),
#                                       read the rest: fuzzing from the latest bench/results/fuzz_*.md
#                                       (`make fuzz`), the sanitizer runs from make test's logs
#                                       (build/logs/asan: gcc ASan + UBSan; build/logs/casan: clang's)
#   bash bench/reliability.sh --logs    run nothing: read every test's latest log under build/logs
#   REPORT_DATE=2026-11-24 OUT=file.md  the date in the file name, the report's path
#
# Each part is found by what it prints, so the script runs whatever has landed and says "missing"
# (or "not run") for the rest:
#   kill during save   a test under tests/ that prints "kill points tried: N, checkpoints lost: M"
#   resume every model a test under tests/ that prints "resumed bit-exactly: X of Y models"
#   non-finite         tests/test_nonfinite.sh (build/train) and tests/test_finite.c
#   fuzzing           "| target | executions | ... crashes ..." rows of bench/results/fuzz_*.md
# Goals: checkpoints lost 0, every model resumed bit-exactly, no fuzz crash, no failing sanitizer run.
set -u
cd "$(dirname "$0")/.."
MODE=run
[ "${1:-}" = "--logs" ] && MODE=logs
DATE=${REPORT_DATE:-$(date +%F)}
OUT=${OUT:-bench/results/reliability_$DATE.md}
LOGS=build/logs
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
rep() { printf '%s\n' "$*" >> "$OUT"; printf '%s\n' "$*"; }

# the closing "N passed, N failed" of a log, as "N passed, N failed" (empty when there is none)
summary_of() { grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" 2>/dev/null | tail -n 1; }

# run_or_read FILE: the output of the test in FILE (tests/NAME.sh or tests/NAME.c) into $work/NAME.out:
# its latest make test log with --logs, else run it (a C test is built by make first). Returns 1 when
# there is no output to read.
run_or_read() {
    local f=$1 name base log
    base=$(basename "$f"); name=${base%.*}
    case "$f" in
        *.sh) log=$LOGS/sh/$name.log ;;
        *)    log=$LOGS/tests/$name.log ;;
    esac
    if [ "$MODE" = logs ]; then
        [ -s "$log.out" ] || return 1   # tests/run.sh --one keeps the output in LOG.out
        cp "$log.out" "$work/$name.out"
        return 0
    fi
    case "$f" in
        *.sh) # the shell tests need the programs they run: build/train, build/sample, ...
              nice make -s build/train build/sample > "$work/$name.build" 2>&1
              nice bash "$f" > "$work/$name.out" 2>&1 ;;
        *)    if ! nice make -s "build/tests/$name" > "$work/$name.build" 2>&1; then
                  cp "$work/$name.build" "$work/$name.out"; return 0
              fi
              nice "./build/tests/$name" > "$work/$name.out" 2>&1 ;;
    esac
    return 0
}

# the tests under tests/ whose source prints PHRASE
tests_printing() { grep -l -- "$1" tests/test_*.c tests/test_*.cpp tests/*.sh 2>/dev/null; }

rep "# Reliability report ($DATE)"
rep ""
rep "Written by \`bench/reliability.sh\` (\`make reliability\`; mode: $MODE) on $(uname -sm), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
rep "Goals: no fuzz crash, 0 checkpoints lost, every model resumed bit-exactly, every sanitizer run clean."
rep ""

# ---- fuzzing ----
rep "## Fuzzing (libFuzzer / AFL++, \`make fuzz\`)"
rep ""
fuzz=$(ls bench/results/fuzz_*.md 2>/dev/null | sort | tail -n 1)
if [ -z "$fuzz" ]; then
    rep "not run: no bench/results/fuzz_*.md (run \`make fuzz\`)"
else
    rows=$(grep -E '^\|' "$fuzz")
    if [ -n "$rows" ]; then
        rep "From \`$fuzz\` (executions and crashes per target, as \`make fuzz\` recorded them):"
        rep ""
        rep "$rows"
    else
        rep "\`$fuzz\` has no table: see the file (its first lines below)"
        rep ""
        rep '```'
        rep "$(head -n 20 "$fuzz")"
        rep '```'
    fi
fi
rep ""

# ---- kill during save, resume every model ----
# section TITLE PHRASE REGEX: the tests printing PHRASE, each test's lines matching REGEX
section() {
    local title=$1 phrase=$2 regex=$3 files f name lines
    rep "## $title"
    rep ""
    files=$(tests_printing "$phrase")
    if [ -z "$files" ]; then
        rep "missing: no test under tests/ prints \"$phrase\""
        rep ""
        return
    fi
    for f in $files; do
        name=$(basename "$f")
        if ! run_or_read "$f"; then rep "- \`$name\`: not run (no log under $LOGS: run \`make test\`, or this script without --logs)"; continue; fi
        lines=$(grep -E -- "$regex" "$work/${name%.*}.out" | sed 's/^[[:space:]]*//')
        if [ -z "$lines" ]; then
            rep "- \`$name\`: printed no \"$phrase\" line ($(summary_of "$work/${name%.*}.out" || true)); its last lines:"
            rep '```'
            rep "$(tail -n 8 "$work/${name%.*}.out")"
            rep '```'
        else
            while IFS= read -r l; do rep "- \`$name\`: $l"; done <<< "$lines"
            [ -n "$(summary_of "$work/${name%.*}.out")" ] && rep "  (\`$name\`: $(summary_of "$work/${name%.*}.out"))"
        fi
    done
    rep ""
}
section "Kill during save (goal: 0 checkpoints lost)" "kill points tried" 'kill points tried: [0-9]+, checkpoints lost: [0-9]+'
section "Resume of every model (goal: every one bit-exact)" "resumed bit-exactly" 'resumed bit-exactly: [0-9]+ of [0-9]+ models'

# ---- non-finite values and memory caps ----
rep "## Non-finite values and memory caps"
rep ""
for f in tests/test_nonfinite.sh tests/test_finite.c tests/test_cuda_memory.cpp; do
    name=$(basename "$f")
    if [ ! -e "$f" ]; then rep "- \`$name\`: missing"; continue; fi
    if ! run_or_read "$f"; then rep "- \`$name\`: not run (no log under $LOGS)"; continue; fi
    s=$(summary_of "$work/${name%.*}.out")
    rep "- \`$name\`: ${s:-no summary line (failed to build or run)}"
    grep -E '^FAIL' "$work/${name%.*}.out" | head -n 5 | sed 's/^/  - /' | while IFS= read -r l; do rep "$l"; done
done
rep ""

# ---- sanitizers ----
rep "## Sanitizer runs (from make test's logs)"
rep ""
# sanitizer_dir TITLE DIR: the tests of one sanitizer flavour, their logs' closing lines added up
sanitizer_dir() {
    local title=$1 dir=$2 n=0 clean=0 failed="" p f log s
    for log in $(find "$dir" -name '*.log.out' 2>/dev/null | sort); do
        n=$((n + 1)); s=$(summary_of "$log")
        p=$(echo "$s" | sed -n 's/^\([0-9]*\) passed.*/\1/p'); f=$(echo "$s" | sed -n 's/.*, \([0-9]*\) failed.*/\1/p')
        if [ -n "$s" ] && [ "${f:-1}" -eq 0 ] && ! grep -q 'runtime error\|ERROR: AddressSanitizer\|ERROR: LeakSanitizer' "$log"; then
            clean=$((clean + 1))
        else failed="$failed $(basename "$log" .log.out)"; fi
        : "$p"
    done
    if [ $n -eq 0 ]; then rep "- $title: not run (no logs in $dir: run \`make test\`)"; return; fi
    rep "- $title: $clean of $n test binaries clean (no sanitizer report, every check passed)${failed:+; not clean:$failed}"
}
if [ -d "$LOGS/asan" ]; then sanitizer_dir "gcc -fsanitize=address,undefined ($LOGS/asan)" "$LOGS/asan"
else rep "- gcc ASan + UBSan: not run (no $LOGS/asan: run \`make test\`)"; fi
clang_dirs=$(find "$LOGS" -mindepth 1 -maxdepth 1 -type d \( -name 'casan' -o -name '*clang*' \) 2>/dev/null | sort)
if [ -z "$clang_dirs" ]; then rep "- clang ASan + UBSan: missing (no $LOGS/casan logs: make test has no clang sanitizer build, or it has not run)"
else for d in $clang_dirs; do sanitizer_dir "clang ($d)" "$d"; done; fi
rep ""
printf 'written: %s\n' "$OUT"
