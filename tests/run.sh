#!/usr/bin/env bash
# Runs each test command given as an argument, adds up their "N passed, N failed" lines and
# prints the suite's closing line. A command that dies without its summary counts as one failure.
set -u
total_pass=0; total_fail=0
for cmd in "$@"; do
    echo "== $cmd"
    out=$(bash -c "$cmd" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^ok ' | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
    printf '%s\n' "$out" | grep -c '^ok ' | sed 's/^/   tests ok: /'
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $cmd: exited with status $rc before printing its summary"
        total_fail=$((total_fail + 1)); continue
    fi
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $cmd: exit status $rc"; total_fail=$((total_fail + 1))
    fi
done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
