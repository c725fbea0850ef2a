#!/usr/bin/env bash
# build/train-mpi (examples/train.c with -DMETAFORMER_MPI) against build/train, 2 ranks on this machine:
#   - `mpirun -np 2 train-mpi --batch B` prints the losses and validation losses of `train --batch 2B`
#     (to float rounding: the ranks' gradients are averaged in another order), for sdpa and for the
#     relative mixer with memories (each rank carries the memory of its rows), and so does --zero1;
#   - a checkpoint of 2 ranks, resumed by one process (build/train: the file is an ordinary one), goes
#     on with the losses of the uninterrupted 2-rank run (its --grad-accum doubles: the same global batch);
#   - a rank that fails ends the whole job with a non-zero status and a message naming it, never a
#     hang (every mpirun runs under `timeout`): a data file that rank 1 cannot open (mpirun's
#     "A : B" form gives each rank its own command line), and a NaN loss of rank 1 alone.
# Skipped, saying why, where MPI or build/train-mpi is missing (make train-mpi). Prints ok/FAIL lines
# and the runner's summary line.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-$PWD/build/train}
TRAIN_MPI=${TRAIN_MPI:-$PWD/build/train-mpi}
# shellcheck source=tests/lib.sh
. tests/lib.sh
if ! command -v mpirun > /dev/null; then
    echo "skipped: mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev, then make train-mpi)"
    finish; exit
fi
if [ ! -x "$TRAIN_MPI" ]; then echo "skipped: $TRAIN_MPI is not built (make train-mpi)"; finish; exit; fi
start_test "$TRAIN" "make examples"

# root needs --allow-run-as-root; 2 ranks on fewer than 2 free cores need --oversubscribe
MPIRUN=(timeout 120 mpirun --oversubscribe $([ "$(id -u)" -eq 0 ] && echo --allow-run-as-root))
awk 'BEGIN { srand(7); split("the king and queen of a land far away spoke to the people who listened", w, " ");
             for (i = 0; i < 900; i++) printf "%s%s", w[int(rand() * 15) + 1], (i % 12 == 11 ? ".\n" : " ") }' > text.txt
STEPS=6; STOP=3
TINY=(--d-model 16 --heads 2 --layers 2 --d-ff 32 --seq-len 12 --threads 1 --log-every 1 --steps $STEPS
      --eval-every 3 --eval-batches 2 --sample 0 --lr 3e-3)
# "N loss" of every step line, then "valid N loss" of every validation line
losses() { grep -E '^step [0-9]+(/[0-9]+ |: valid loss)' "$1" | awk '{ if ($3 == "valid") print "valid", $2, $5; else print $2, $4 }'; }
# same_losses A B: the same lines, the numbers within 2e-6 (the last printed digit)
same_losses() {
    [ "$(losses "$1" | wc -l)" -gt 0 ] && [ "$(losses "$1" | wc -l)" -eq "$(losses "$2" | wc -l)" ] &&
    paste -d' ' <(losses "$1") <(losses "$2") | awk '{ k = NF / 2; for (i = 1; i < k; i++) if ($i != $(i + k)) bad = 1;
        d = $k - $(2 * k); if (d < 0) d = -d; if (d > 2e-6) bad = 1 } END { exit bad }'
}

for v in "sdpa|--mixer sdpa" "relative|--mixer relative --mem-len 5"; do
    name=${v%%|*}
    # shellcheck disable=SC2086
    "$TRAIN" text.txt "${TINY[@]}" ${v#*|} --batch 6 > "$name.one" 2>&1
    # shellcheck disable=SC2086
    "${MPIRUN[@]}" -np 2 "$TRAIN_MPI" text.txt "${TINY[@]}" ${v#*|} --batch 3 > "$name.two" 2>&1; rc=$?
    if [ $rc -eq 0 ] && same_losses "$name.one" "$name.two" && grep -q 'batch 3 x 2 ranks (6 windows per step)' "$name.two"
    then ok "$name: 2 ranks x --batch 3 = 1 process x --batch 6 (every loss and validation loss)"
    else bad "$name: 2 ranks x --batch 3 = 1 process x --batch 6" "rc $rc" "$(diff <(losses "$name.one") <(losses "$name.two"))" "$(tail -n 5 "$name.two")"; fi

    if [ "$name" = sdpa ]; then # ZeRO-1: the moments sharded, the same steps
        "${MPIRUN[@]}" -np 2 "$TRAIN_MPI" text.txt "${TINY[@]}" --batch 3 --zero1 > zero1.two 2>&1; rc=$?
        if [ $rc -eq 0 ] && same_losses "$name.two" zero1.two; then ok "sdpa: --zero1 gives the losses of plain data parallelism"
        else bad "sdpa: --zero1 gives the losses of plain data parallelism" "rc $rc" "$(diff <(losses "$name.two") <(losses zero1.two))"; fi
    fi

    # stopped after STOP steps by 2 ranks, resumed by one process
    # shellcheck disable=SC2086
    "${MPIRUN[@]}" -np 2 "$TRAIN_MPI" text.txt "${TINY[@]}" ${v#*|} --batch 3 --save "$name.st" --stop-after $STOP > "$name.p1" 2>&1 &&
    "$TRAIN" text.txt "${TINY[@]}" ${v#*|} --resume "$name.st" > "$name.p2" 2>&1; rc=$?
    cat "$name.p1" "$name.p2" > "$name.p12"
    if [ $rc -eq 0 ] && grep -q 'of 2 ranks resumed by 1: --grad-accum 1 becomes 2' "$name.p2" &&
       [ "$(losses "$name.p2" | wc -l)" -ge $((STEPS - STOP)) ] && same_losses "$name.two" "$name.p12"
    then ok "$name: a 2-rank checkpoint resumed by 1 process continues the 2-rank losses"
    else bad "$name: a 2-rank checkpoint resumed by 1 process continues the 2-rank losses" "rc $rc" \
             "$(diff <(losses "$name.two") <(losses "$name.p12"))" "$(tail -n 5 "$name.p1" "$name.p2")"; fi
done

# rank 1 cannot open its data file: the job ends, naming rank 1 and the file
"${MPIRUN[@]}" -np 1 "$TRAIN_MPI" text.txt "${TINY[@]}" --batch 3 : -np 1 "$TRAIN_MPI" missing.txt "${TINY[@]}" --batch 3 > fail.out 2>&1; rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'train-mpi: error: rank 1 of 2: cannot open "missing.txt"' fail.out
then ok "a rank that cannot read its data ends the job (status $rc) with a message naming the rank"
else bad "a rank that cannot read its data ends the job with a message naming the rank" "rc $rc (124: a hang)" "$(head -20 fail.out)"; fi

# rank 1 alone diverges (its own --lr): the global loss is NaN, every rank stops, rank 0 names rank 1
"${MPIRUN[@]}" -np 1 "$TRAIN_MPI" text.txt "${TINY[@]}" --batch 3 --schedule constant : \
    -np 1 "$TRAIN_MPI" text.txt "${TINY[@]}" --batch 3 --schedule constant --lr 1e30 > nan.out 2>&1; rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'not finite, so training stops' nan.out && grep -q 'not finite on rank 1 of 2' nan.out &&
   [ "$(grep -c 'train-mpi: error' nan.out)" -eq 1 ]
then ok "a NaN loss on one rank stops every rank (status $rc), with one message naming the rank"
else bad "a NaN loss on one rank stops every rank with one message naming the rank" "rc $rc (124: a hang)" "$(head -20 nan.out)"; fi
finish
