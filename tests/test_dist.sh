#!/usr/bin/env bash
# Data-parallel training over MPI: tests/test_dist.c on 2 ranks (optimized, then ASan + UBSan), each
# under a time limit, so a collective that hangs fails the test instead of the suite. Where Open MPI
# is missing (tools/install_mpi.sh could not install it) the test says "skip", counted neither
# passed nor failed.
set -u
cd "$(dirname "$0")/.."
if ! command -v mpirun > /dev/null || [ ! -x build/dist/test_dist ]; then
    echo "skip Open MPI not installed: the data-parallel tests (build/dist/test_dist) need mpicc and mpirun (apt-get install libopenmpi-dev openmpi-bin)"
    echo "0 passed, 0 failed"
    exit 0
fi
# root may run mpirun when asked; 2 ranks on fewer cores need --oversubscribe; one thread per rank
run() { timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$@" < /dev/null; }
pass=0; fail=0
for bin in build/dist/test_dist build/dist/asan/test_dist; do
    [ -x "$bin" ] || continue
    # ASan: Open MPI's own allocations at exit are not the library's leaks
    out=$(ASAN_OPTIONS=abort_on_error=1:detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 run -x ASAN_OPTIONS -x UBSAN_OPTIONS "$bin" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$' | sed "s|^ok   |ok   $bin: |; s|^FAIL |FAIL $bin: |" |
        grep -v -E '^-+$|^(Primary job|a non-zero exit|mpirun detected|the job to be|  Process name|  Exit code|Per user-direction)'
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ $rc -eq 124 ]; then echo "FAIL $bin: timed out after 120 s (a hang)"; fail=$((fail + 1))
    elif [ -z "$line" ]; then echo "FAIL $bin: exited with status $rc before its summary"; fail=$((fail + 1))
    else
        pass=$((pass + $(echo "$line" | cut -d' ' -f1))); fail=$((fail + $(echo "$line" | cut -d' ' -f3)))
        [ $rc -ne 0 ] && [ "$(echo "$line" | cut -d' ' -f3)" = 0 ] && { echo "FAIL $bin: exit status $rc"; fail=$((fail + 1)); }
    fi
done
echo "$pass passed, $fail failed"
