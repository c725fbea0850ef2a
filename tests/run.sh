#!/usr/bin/env bash
# The test runner. Each test command prints "ok ..."/"FAIL ..." lines and ends with its
# "N passed, N failed" line; the runner shows each command's output (without the ok lines, which
# it counts), adds up the counts and prints the suite's closing line "N passed, N failed". A
# command that dies without its summary counts as one failure, and one that exits non-zero with
# 0 failures counted as one too. The exit status is non-zero when anything failed.
#
#   tests/run.sh CMD...                    run the commands one after another, each shown as it ends
#   tests/run.sh --one LOG CMD             run one command, keep its output in LOG.out and its
#                                          command, exit status, seconds, start time (epoch) and
#                                          CPU seconds in LOG, written last
#   tests/run.sh --report LOG...           print the kept runs in the order given, and the total
#
# `make test` runs every command with --one as a make target of its own, so make -j runs the tests
# in parallel, with each other and with the builds; --report then prints the logs whole in the
# fixed order of the Makefile's list, whatever order they finished in.
set -u

# The environment of every test command. OMP_WAIT_POLICY=PASSIVE: the OpenMP threads sleep instead
# of spinning while they wait, so tests that run side by side (and other work on the machine) do not
# burn the cores that the other tests need; the threads and the parallel code they run stay the same.
# GLIBC_TUNABLES: blocks up to 32 MB come from the heap, and freed memory stays in the process
# instead of going back to the kernel. The gradient checks build a fresh context (a 1 MB activation
# arena, the model's parameters) for each of their thousands of evaluations; with glibc's default
# thresholds every one of those buffers was mapped anew and page-faulted in, which made system time
# most of some tests' time (test_xl: 9.7 s, 1.0 s with this). ASan binaries have their own allocator
# and ignore this.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456}

now() { date +%s.%N; }

run_one() { # LOG CMD
    local log=$1 cmd=$2 t0 rc cpu
    mkdir -p "$(dirname "$log")"
    rm -f "$log"
    t0=$(now)
    # an inner shell waits for the command, so a crash report ("Segmentation fault ...") lands in
    # the log and not on the terminal among the other tests' output. The subshell's `times` gives
    # the command's CPU time (its children's user and system time: "0m1.250s 0m0.125s").
    cpu=$( { bash -c 'bash -c "$1"; exit $?' _ "$cmd" > "$log.out" 2>&1 < /dev/null; echo $? > "$log.rc"; times; } | tail -n 1 |
           awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); t += a[1] * 60 + a[2] } printf "%.1f", t }')
    rc=$(cat "$log.rc"); rm -f "$log.rc"
    printf '%s\n%s\n%s\n%s\n%s\n' "$cmd" "$rc" "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')" "$t0" "$cpu" > "$log.tmp"
    mv "$log.tmp" "$log"
}

total_pass=0; total_fail=0
show() { # LOG: print one kept run and add up its counts
    local log=$1 cmd rc secs cpu line p f
    if [ ! -f "$log" ]; then
        echo "== $log"; echo "FAIL $log: the test did not run"; total_fail=$((total_fail + 1)); return
    fi
    { read -r cmd; read -r rc; read -r secs; read -r _; read -r cpu; } < "$log"
    echo "== $cmd"
    grep -v '^ok ' "$log.out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
    echo "   tests ok: $(grep -c '^ok ' "$log.out") ($secs s, $cpu s CPU)"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log.out" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $cmd: exited with status $rc before printing its summary"
        total_fail=$((total_fail + 1)); return
    fi
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $cmd: exit status $rc"; total_fail=$((total_fail + 1))
    fi
}
finish() {
    echo "$total_pass passed, $total_fail failed"
    [ "$total_fail" -eq 0 ]
}

case "${1-}" in
--one)
    [ $# -eq 3 ] || { echo "usage: $0 --one LOG CMD" >&2; exit 2; }
    run_one "$2" "$3" ;;
--report)
    shift
    for log in "$@"; do show "$log"; done
    finish ;;
*)
    dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
    i=0
    for cmd in "$@"; do
        i=$((i + 1)); run_one "$dir/$i.log" "$cmd"; show "$dir/$i.log"
    done
    finish ;;
esac
